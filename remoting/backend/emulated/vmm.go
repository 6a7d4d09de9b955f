package emulated

import (
	"context"
	"slices"
	"sort"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap):
//
//   - A reservation is a range of device addresses backed by a range of
//     host addresses of the same size, mapped PROT_NONE and never touched.
//   - A physical allocation is shared anonymous host memory of its own.
//   - Mapping part of a physical allocation into a reservation maps the same
//     host pages a second time at the matching place of the reservation's
//     host range (mremap with an old size of 0), so that two mappings of one
//     allocation alias as on a GPU, and consecutive mappings are contiguous
//     host memory: a copy may cross from one into the next.
//   - A mapping becomes visible to kernels and copies (an arena entry) once
//     cuMemSetAccess grants the device access; unmapping puts PROT_NONE
//     pages back.
//
// All of it is ordinary memory of the worker process, so a CRIU dump keeps
// it, aliases included.

// vmmGranularity is the allocation granularity the emulated device
// reports, minimum and recommended alike: 2 MiB, as on current GPUs.
const vmmGranularity = 2 << 20

// Values of CUmemAllocationType, CUmemLocationType, CUmemAccess_flags and
// CUmemAllocationHandleType used here.
const (
	allocTypePinned   = 1
	locTypeDevice     = 1
	accessNone        = 0
	accessRead        = 1
	accessReadWrite   = 3
	handleTypeMaxBits = 0xf // none, POSIX fd, Win32, Win32 KMT, fabric
)

type reservation struct {
	base, size uint64
	host       []byte
	maps       []*vmap // sorted by base
}

type physical struct {
	handle backend.MemHandle
	data   []byte
	// refs counts the creation's reference, retains and mappings; the
	// memory is freed when it drops to zero.
	refs     int
	released bool // the creation's reference was dropped
}

type vmap struct {
	base, size, offset uint64
	phys               *physical
	resv               *reservation
	access             uint32
	alloc              *allocation // the arena entry, while accessible
}

func (v *vmap) end() uint64 { return v.base + v.size }

// reserveVA hands out size bytes of device addresses aligned to align,
// after everything handed out so far.
func (m *arena) reserveVA(size, align uint64) uint64 {
	base := roundUp(m.next, align)
	m.next = base + roundUp(size, allocAlign) + allocAlign
	return base
}

// charge accounts n bytes of device memory, failing when the device is
// full; uncharge gives them back.
func (m *arena) charge(n uint64) error {
	if n > m.total || m.used.Load()+n > m.total {
		return cu.Errorf(cu.ErrorOutOfMemory, "%d bytes: %d of %d bytes of device memory in use", n, m.used.Load(), m.total)
	}
	m.used.Add(n)
	return nil
}

func (m *arena) uncharge(n uint64) { m.used.Add(-n) }

// insert adds an allocation that does not come from alloc (a mapping),
// keeping the table sorted.
func (m *arena) insert(a *allocation) {
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] >= a.base })
	m.allocs = slices.Insert(m.allocs, i, a)
	m.bases = slices.Insert(m.bases, i, a.base)
}

// remove drops an allocation added with insert.
func (m *arena) remove(a *allocation) {
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] >= a.base })
	if i < len(m.allocs) && m.allocs[i] == a {
		m.allocs = slices.Delete(m.allocs, i, i+1)
		m.bases = slices.Delete(m.bases, i, i+1)
	}
	m.last.CompareAndSwap(a, nil)
}

// mappedRun returns the n bytes at addr when they lie in consecutive
// accessible mappings of a's reservation, starting in a.
func (m *arena) mappedRun(a *allocation, addr, n uint64) ([]byte, bool) {
	r := a.resv
	if addr+n < addr || addr+n > r.base+r.size {
		return nil, false
	}
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] >= a.base })
	for end := a.base + uint64(len(a.data)); end < addr+n; {
		i++
		if i >= len(m.allocs) || m.allocs[i].base != end || m.allocs[i].resv != r {
			return nil, false
		}
		end += uint64(len(m.allocs[i].data))
	}
	off := addr - r.base
	return r.host[off : off+n], true
}

func hostAddr(b []byte, off uint64) uintptr { return uintptr(unsafe.Pointer(&b[off])) }

// protNone replaces n bytes of host memory at p with untouchable pages.
func protNone(p uintptr, n uint64) error {
	_, _, e := unix.Syscall6(unix.SYS_MMAP, p, uintptr(n), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED, ^uintptr(0), 0)
	if e != 0 {
		return e
	}
	return nil
}

func (d *Device) checkLocation(locType uint32, locID int32) error {
	if locType != locTypeDevice {
		return cu.Errorf(cu.ErrorNotSupported, "memory location type %d: the emulated device allocates only device memory (type 1)", locType)
	}
	return d.checkDev(locID)
}

func (d *Device) MemGetAllocationGranularity(_ context.Context, allocType, handleTypes, locType uint32, locID int32, option uint32) (uint64, error) {
	if allocType != allocTypePinned {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "allocation type %d (want CU_MEM_ALLOCATION_TYPE_PINNED)", allocType)
	}
	if err := d.checkLocation(locType, locID); err != nil {
		return 0, err
	}
	if option > 1 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "granularity option %d (0 minimum, 1 recommended)", option)
	}
	return vmmGranularity, nil
}

func (d *Device) MemAddressReserve(_ context.Context, size, align uint64, addr backend.DevPtr, flags uint64) (backend.DevPtr, error) {
	if size == 0 || size%vmmGranularity != 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "reservation of %d bytes: the size must be a non-zero multiple of %d", size, vmmGranularity)
	}
	if align == 0 {
		align = vmmGranularity
	}
	if align&(align-1) != 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "alignment %d is not a power of two", align)
	}
	if flags != 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "reservation flags %#x", flags)
	}
	if uint64(int(size)) != size {
		return 0, cu.Errorf(cu.ErrorOutOfMemory, "reservation of %d bytes exceeds the host address space", size)
	}
	// The address hint is only a hint: addresses are handed out upward
	// and never reused, as for every allocation of this device.
	host, err := unix.Mmap(-1, 0, int(size), unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return 0, cu.Errorf(cu.ErrorOutOfMemory, "reservation of %d bytes: host: %v", size, err)
	}
	r := &reservation{base: d.mem.reserveVA(size, max(align, vmmGranularity)), size: size, host: host}
	d.resvs[r.base] = r
	return backend.DevPtr(r.base), nil
}

func (d *Device) MemAddressFree(_ context.Context, p backend.DevPtr, size uint64) error {
	r, ok := d.resvs[uint64(p)]
	if !ok || r.size != size {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not a reservation", uint64(p), size)
	}
	if len(r.maps) > 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "reservation %#x still has %d mappings; unmap them first", uint64(p), len(r.maps))
	}
	delete(d.resvs, r.base)
	return unix.Munmap(r.host)
}

func (d *Device) MemCreate(_ context.Context, size uint64, allocType, handleTypes, locType uint32, locID int32, compression uint32, flags uint64) (backend.MemHandle, error) {
	if allocType != allocTypePinned {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "allocation type %d (want CU_MEM_ALLOCATION_TYPE_PINNED)", allocType)
	}
	if err := d.checkLocation(locType, locID); err != nil {
		return 0, err
	}
	if size == 0 || size%vmmGranularity != 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "allocation of %d bytes: the size must be a non-zero multiple of %d", size, vmmGranularity)
	}
	if handleTypes&^handleTypeMaxBits != 0 || flags != 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "allocation handle types %#x, flags %#x", handleTypes, flags)
	}
	if uint64(int(size)) != size {
		return 0, cu.Errorf(cu.ErrorOutOfMemory, "allocation of %d bytes exceeds the host address space", size)
	}
	if err := d.mem.charge(size); err != nil {
		return 0, err
	}
	data, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		d.mem.uncharge(size)
		return 0, cu.Errorf(cu.ErrorOutOfMemory, "allocation of %d bytes: host: %v", size, err)
	}
	ph := &physical{handle: backend.MemHandle(d.newID()), data: data, refs: 1}
	d.phys[ph.handle] = ph
	return ph.handle, nil
}

// unref drops one reference to ph and frees it with the last.
func (d *Device) unref(ph *physical) {
	ph.refs--
	if ph.refs > 0 {
		return
	}
	delete(d.phys, ph.handle)
	d.mem.uncharge(uint64(len(ph.data)))
	_ = unix.Munmap(ph.data)
	ph.data = nil
}

func (d *Device) MemRelease(_ context.Context, h backend.MemHandle) error {
	ph, ok := d.phys[h]
	if !ok {
		return cu.Errorf(cu.ErrorInvalidValue, "memory handle %#x does not exist", uint64(h))
	}
	if ph.released && ph.refs == 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "memory handle %#x was released", uint64(h))
	}
	ph.released = true
	d.unref(ph)
	return nil
}

// resvOf returns the reservation holding [p, p+size).
func (d *Device) resvOf(p, size uint64) (*reservation, bool) {
	for _, r := range d.resvs {
		if p >= r.base && size <= r.size && p-r.base <= r.size-size {
			return r, true
		}
	}
	return nil, false
}

func (d *Device) MemMap(_ context.Context, p backend.DevPtr, size, offset uint64, h backend.MemHandle, flags uint64) error {
	ph, ok := d.phys[h]
	if !ok {
		return cu.Errorf(cu.ErrorInvalidHandle, "memory handle %#x does not exist", uint64(h))
	}
	if flags != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "mapping flags %#x", flags)
	}
	if size == 0 || size%vmmGranularity != 0 || offset%vmmGranularity != 0 || uint64(p)%vmmGranularity != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "mapping %#x+%d at offset %d: address, size and offset must be multiples of %d",
			uint64(p), size, offset, vmmGranularity)
	}
	if offset > uint64(len(ph.data)) || size > uint64(len(ph.data))-offset {
		return cu.Errorf(cu.ErrorInvalidValue, "mapping %d bytes at offset %d of a %d-byte allocation", size, offset, len(ph.data))
	}
	r, ok := d.resvOf(uint64(p), size)
	if !ok {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not inside a reservation", uint64(p), size)
	}
	i := sort.Search(len(r.maps), func(i int) bool { return r.maps[i].end() > uint64(p) })
	if i < len(r.maps) && r.maps[i].base < uint64(p)+size {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d overlaps the mapping at %#x", uint64(p), size, r.maps[i].base)
	}
	roff := uint64(p) - r.base
	_, _, e := unix.Syscall6(unix.SYS_MREMAP, hostAddr(ph.data, offset), 0, uintptr(size),
		unix.MREMAP_MAYMOVE|unix.MREMAP_FIXED, hostAddr(r.host, roff), 0)
	if e != 0 {
		return cu.Errorf(cu.ErrorOutOfMemory, "mapping %d bytes: host: %v", size, e)
	}
	ph.refs++
	r.maps = slices.Insert(r.maps, i, &vmap{base: uint64(p), size: size, offset: offset, phys: ph, resv: r})
	return nil
}

func (d *Device) MemUnmap(_ context.Context, p backend.DevPtr, size uint64) error {
	r, ok := d.resvOf(uint64(p), size)
	if !ok || size == 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not inside a reservation", uint64(p), size)
	}
	// The range must be made of whole mappings, back to back.
	i := sort.Search(len(r.maps), func(i int) bool { return r.maps[i].end() > uint64(p) })
	j, at := i, uint64(p)
	for ; j < len(r.maps) && at < uint64(p)+size; j++ {
		if r.maps[j].base != at || r.maps[j].end() > uint64(p)+size {
			break
		}
		at = r.maps[j].end()
	}
	if at != uint64(p)+size {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d does not cover whole mappings", uint64(p), size)
	}
	for _, v := range r.maps[i:j] {
		if v.alloc != nil {
			d.mem.remove(v.alloc)
			v.alloc = nil
		}
		if err := protNone(hostAddr(r.host, v.base-r.base), v.size); err != nil {
			return cu.Errorf(cu.ErrorUnknown, "unmapping %#x: host: %v", v.base, err)
		}
		d.unref(v.phys)
	}
	r.maps = slices.Delete(r.maps, i, j)
	return nil
}

// mapsIn returns the mappings making up [p, p+size) exactly.
func (d *Device) mapsIn(p, size uint64) ([]*vmap, error) {
	r, ok := d.resvOf(p, size)
	if !ok || size == 0 {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not inside a reservation", p, size)
	}
	var out []*vmap
	at := p
	for _, v := range r.maps {
		if v.end() <= p || v.base >= p+size {
			continue
		}
		if v.base > at {
			break
		}
		out = append(out, v)
		at = v.end()
	}
	if at < p+size {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not entirely mapped", p, size)
	}
	return out, nil
}

func (d *Device) MemSetAccess(_ context.Context, p backend.DevPtr, size uint64, descs []backend.AccessDesc) error {
	if len(descs) == 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "no access descriptors")
	}
	flags := uint32(accessNone)
	for _, ds := range descs {
		if err := d.checkLocation(ds.LocType, ds.LocID); err != nil {
			return err
		}
		if ds.Flags != accessNone && ds.Flags != accessRead && ds.Flags != accessReadWrite {
			return cu.Errorf(cu.ErrorInvalidValue, "access flags %d", ds.Flags)
		}
		flags = ds.Flags
	}
	vs, err := d.mapsIn(uint64(p), size)
	if err != nil {
		return err
	}
	for _, v := range vs {
		v.access = flags
		switch {
		case flags != accessNone && v.alloc == nil:
			// Read-only access is not enforced: a write by a kernel
			// lands, where a GPU would fault.
			off := v.base - v.resv.base
			v.alloc = &allocation{base: v.base, data: v.resv.host[off : off+v.size : off+v.size], resv: v.resv}
			d.mem.insert(v.alloc)
		case flags == accessNone && v.alloc != nil:
			d.mem.remove(v.alloc)
			v.alloc = nil
		}
	}
	return nil
}

func (d *Device) MemGetAccess(_ context.Context, locType uint32, locID int32, p backend.DevPtr) (uint64, error) {
	if err := d.checkLocation(locType, locID); err != nil {
		return 0, err
	}
	v, ok := d.mapAt(uint64(p))
	if !ok {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "%#x is not mapped", uint64(p))
	}
	return uint64(v.access), nil
}

func (d *Device) mapAt(p uint64) (*vmap, bool) {
	r, ok := d.resvOf(p, 1)
	if !ok {
		return nil, false
	}
	i := sort.Search(len(r.maps), func(i int) bool { return r.maps[i].end() > p })
	if i == len(r.maps) || r.maps[i].base > p {
		return nil, false
	}
	return r.maps[i], true
}

func (d *Device) MemRetainAllocationHandle(_ context.Context, p backend.DevPtr) (backend.MemHandle, error) {
	v, ok := d.mapAt(uint64(p))
	if !ok {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "%#x is not mapped", uint64(p))
	}
	v.phys.refs++
	return v.phys.handle, nil
}

// closeVMM frees every reservation and physical allocation.
func (d *Device) closeVMM() {
	for _, r := range d.resvs {
		for _, v := range r.maps {
			if v.alloc != nil {
				d.mem.remove(v.alloc)
			}
		}
		_ = unix.Munmap(r.host)
	}
	for _, ph := range d.phys {
		d.mem.uncharge(uint64(len(ph.data)))
		_ = unix.Munmap(ph.data)
	}
	d.resvs = map[uint64]*reservation{}
	d.phys = map[backend.MemHandle]*physical{}
}
