package emulated

import (
	"os"
	"slices"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

const (
	// arenaBase is where the synthetic device address space starts. Device
	// pointers look like the ones a real driver hands out.
	arenaBase = 0x7f00_0000_0000
	// allocAlign is cuMemAlloc's alignment guarantee.
	allocAlign = 256
)

// allocation is one cuMemAlloc (or module global). Its bytes are an
// anonymous private mapping of its own, so freeing it returns the memory to
// the host at once and an untouched allocation costs nothing.
type allocation struct {
	base  uint64
	data  []byte
	owner backend.Ctx
	// resv is set for a mapping of virtual memory management: data is a
	// view into resv's host range, owned by the mapping, not by this
	// allocation (see vmm.go).
	resv *reservation
	// mapped: data maps a reloaded memory file's pages (MapMem) rather
	// than anonymous memory; mapFile says which file (its device and
	// inode) and where in it.
	mapped  bool
	mapFile fileID
	mapOff  int64
}

// fileID names a file by its device and inode, whatever descriptor has it
// open.
type fileID struct{ dev, ino uint64 }

func fileIDOf(f *os.File) (fileID, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

func (a *allocation) end() uint64 { return a.base + uint64(len(a.data)) }

// arena is device memory: disjoint allocations in a 64-bit address space.
//
// Addresses are handed out upward and never reused, with a one-unit gap
// after each allocation, so a stale or overrunning pointer lands outside
// every allocation and faults instead of silently reading a neighbour.
// Lookups are a binary search over the allocations sorted by base, behind
// a one-entry cache of the last hit, because kernels touch the same
// buffer many times in a row.
type arena struct {
	allocs []*allocation // sorted by base; mutated only between launches
	bases  []uint64      // allocs[i].base, contiguous for a cache-friendly search
	next   uint64
	total  uint64
	used   atomic.Uint64
	last   atomic.Pointer[allocation]
}

func newArena(total uint64) *arena {
	return &arena{next: arenaBase, total: total}
}

func (m *arena) inUse() uint64 { return m.used.Load() }

func roundUp(n, to uint64) uint64 { return (n + to - 1) &^ (to - 1) }

// alloc reserves size bytes. It fails with CUDA_ERROR_OUT_OF_MEMORY when
// the device's size would be exceeded or the host cannot back it.
func (m *arena) alloc(size uint64, owner backend.Ctx) (*allocation, error) {
	if size == 0 {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "allocation of 0 bytes")
	}
	rounded := roundUp(size, allocAlign)
	if rounded < size || rounded > m.total || m.used.Load()+rounded > m.total {
		return nil, cu.Errorf(cu.ErrorOutOfMemory, "allocation of %d bytes: %d of %d bytes of device memory in use",
			size, m.used.Load(), m.total)
	}
	if uint64(int(size)) != size {
		return nil, cu.Errorf(cu.ErrorOutOfMemory, "allocation of %d bytes exceeds the host address space", size)
	}
	data, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, cu.Errorf(cu.ErrorOutOfMemory, "allocation of %d bytes: host: %v", size, err)
	}
	a := &allocation{base: m.next, data: data, owner: owner}
	m.next += rounded + allocAlign
	m.allocs = append(m.allocs, a) // m.next only grows, so the slice stays sorted
	m.bases = append(m.bases, a.base)
	m.used.Add(rounded)
	return a, nil
}

// free releases the allocation that starts at base.
func (m *arena) free(base uint64) error {
	i, ok := slices.BinarySearchFunc(m.allocs, base, func(a *allocation, b uint64) int {
		switch {
		case a.base < b:
			return -1
		case a.base > b:
			return 1
		}
		return 0
	})
	if !ok {
		return cu.Errorf(cu.ErrorInvalidValue, "free of %#x: not the start of an allocation", base)
	}
	a := m.allocs[i]
	m.allocs = slices.Delete(m.allocs, i, i+1)
	m.bases = slices.Delete(m.bases, i, i+1)
	m.release(a)
	return nil
}

func (m *arena) release(a *allocation) {
	m.last.CompareAndSwap(a, nil)
	if a.resv == nil {
		m.used.Add(-roundUp(uint64(len(a.data)), allocAlign))
		_ = unix.Munmap(a.data)
	}
	a.data = nil
}

// freeOwned releases every allocation owned by ctx.
func (m *arena) freeOwned(owner backend.Ctx) {
	m.allocs = slices.DeleteFunc(m.allocs, func(a *allocation) bool {
		if a.owner == owner {
			m.release(a)
			return true
		}
		return false
	})
	m.bases = m.bases[:0]
	for _, a := range m.allocs {
		m.bases = append(m.bases, a.base)
	}
}

func (m *arena) freeAll() {
	for _, a := range m.allocs {
		m.release(a)
	}
	m.allocs, m.bases = nil, nil
}

// find returns the allocation containing addr, or nil.
func (m *arena) find(addr uint64) *allocation {
	if a := m.last.Load(); a != nil && addr >= a.base && addr < a.end() {
		return a
	}
	// The last allocation that starts at or below addr.
	bases := m.bases
	lo, hi := 0, len(bases)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bases[mid] <= addr {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return nil
	}
	a := m.allocs[lo-1]
	if addr >= a.end() {
		return nil
	}
	// Kernels run on several goroutines; writing the shared cache only
	// when it changes keeps its cache line from bouncing between cores.
	if m.last.Load() != a {
		m.last.Store(a)
	}
	return a
}

// Span implements ptx.Memory.
func (m *arena) Span(addr uint64) (base uint64, data []byte, ok bool) {
	a := m.find(addr)
	if a == nil {
		return 0, nil, false
	}
	return a.base, a.data, true
}

// slice returns the n bytes at addr, which must lie inside one allocation
// or in consecutive mappings of one reservation (which are contiguous in
// host memory too, so the range is one slice).
func (m *arena) slice(addr, n uint64) ([]byte, error) {
	a := m.find(addr)
	if a == nil {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "device address %#x is not in any allocation", addr)
	}
	off := addr - a.base
	if n > uint64(len(a.data))-off && a.resv != nil {
		if b, ok := m.mappedRun(a, addr, n); ok {
			return b, nil
		}
	}
	if n > uint64(len(a.data))-off {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "%d bytes at %#x run past the end of the %d-byte allocation at %#x",
			n, addr, len(a.data), a.base)
	}
	return a.data[off : off+n], nil
}
