package emulated

import (
	"context"
	"os"
	"runtime"
	"slices"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// The emulated device's memory is host memory of the worker process, so
// saving it is a copy and releasing it gives its pages back to the host
// (madvise): a CRIU dump then carries only the worker's own state, as on a
// GPU whose VMM memory the worker released.

var _ backend.DeviceMemory = (*Device)(nil)

// MemRegions lists the arena's own allocations (cuMemAlloc, pools, module
// variables), by address, then the physical allocations of virtual memory
// management, by handle. Mappings of physical memory are views, saved
// through their physical allocation.
func (d *Device) MemRegions(context.Context) ([]backend.MemRegion, error) {
	var out []backend.MemRegion
	for _, a := range d.mem.allocs {
		if a.resv == nil && a.data != nil {
			out = append(out, backend.MemRegion{Kind: backend.MemAlloc, ID: a.base, Size: uint64(len(a.data))})
		}
	}
	hs := make([]backend.MemHandle, 0, len(d.phys))
	for h, ph := range d.phys {
		if ph.data != nil {
			hs = append(hs, h)
		}
	}
	slices.Sort(hs)
	for _, h := range hs {
		out = append(out, backend.MemRegion{Kind: backend.MemPhysical, ID: uint64(h), Size: uint64(len(d.phys[h].data))})
	}
	return out, nil
}

// regionBytes is r's host memory.
func (d *Device) regionBytes(r backend.MemRegion) ([]byte, error) {
	switch r.Kind {
	case backend.MemAlloc:
		a := d.mem.find(r.ID)
		if a != nil && a.base == r.ID && a.resv == nil && uint64(len(a.data)) == r.Size {
			return a.data, nil
		}
	case backend.MemPhysical:
		if ph, ok := d.phys[backend.MemHandle(r.ID)]; ok && uint64(len(ph.data)) == r.Size {
			return ph.data, nil
		}
	}
	return nil, cu.Errorf(cu.ErrorInvalidValue, "no device memory region %d/%#x of %d bytes", r.Kind, r.ID, r.Size)
}

func (d *Device) regionSpan(r backend.MemRegion, off uint64, n int) ([]byte, error) {
	b, err := d.regionBytes(r)
	if err != nil {
		return nil, err
	}
	if off > uint64(len(b)) || uint64(n) > uint64(len(b))-off {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "%d bytes at offset %d run past region %#x of %d bytes", n, off, r.ID, len(b))
	}
	return b[off : off+uint64(n)], nil
}

func (d *Device) ReadMem(_ context.Context, r backend.MemRegion, off uint64, dst []byte) error {
	b, err := d.regionSpan(r, off, len(dst))
	if err != nil {
		return err
	}
	copy(dst, b)
	return nil
}

func (d *Device) WriteMem(_ context.Context, r backend.MemRegion, off uint64, src []byte) error {
	b, err := d.regionSpan(r, off, len(src))
	if err != nil {
		return err
	}
	copy(b, src)
	return nil
}

// HashBlocks hashes on every core: the host is this device's GPU.
func (d *Device) HashBlocks(_ context.Context, r backend.MemRegion, block, seed uint64, out []uint64) error {
	b, err := d.regionBytes(r)
	if err != nil {
		return err
	}
	return hashBlocks(b, block, seed, out)
}

// hashBlocks hashes b in blocks of block bytes into out, on every core.
func hashBlocks(b []byte, block, seed uint64, out []uint64) error {
	if block == 0 || uint64(len(out)) != (uint64(len(b))+block-1)/block {
		return cu.Errorf(cu.ErrorInvalidValue, "%d hashes for %d bytes in blocks of %d", len(out), len(b), block)
	}
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), len(out))
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(out); i += workers {
				lo := uint64(i) * block
				out[i] = devmem.HashBlock(seed, b[lo:min(lo+block, uint64(len(b)))])
			}
		})
	}
	wg.Wait()
	return nil
}

// ReleaseMem gives every region's pages back to the host; they read as
// zeros until written again.
func (d *Device) ReleaseMem(context.Context) error {
	// Nothing maps the last park's file after this: the next Park
	// copies everything, and no descriptor of it may go into a dump.
	d.dropReuse()
	for _, a := range d.mem.allocs {
		if a.resv == nil && a.mapped {
			// A file's pages: MADV_DONTNEED would bring the file's
			// contents back, not zeros, and CRIU would dump the file.
			if err := remapAnon(a.data); err != nil {
				return cu.Errorf(cu.ErrorUnknown, "release allocation %#x: %v", a.base, err)
			}
			a.mapped, a.mapFile, a.mapOff = false, fileID{}, 0
			continue
		}
		if a.resv == nil && len(a.data) > 0 {
			if err := unix.Madvise(a.data, unix.MADV_DONTNEED); err != nil {
				return cu.Errorf(cu.ErrorUnknown, "release allocation %#x: %v", a.base, err)
			}
		}
	}
	for h, ph := range d.phys {
		if len(ph.data) > 0 {
			// Shared memory keeps its pages through MADV_DONTNEED.
			if err := unix.Madvise(ph.data, unix.MADV_REMOVE); err != nil {
				return cu.Errorf(cu.ErrorUnknown, "release physical allocation %#x: %v", uint64(h), err)
			}
		}
	}
	return nil
}

// RestoreMem has nothing to do: released pages come back on first touch.
func (d *Device) RestoreMem(context.Context) error { return nil }

var _ backend.MemMapper = (*Device)(nil)

// MapMem maps f's pages at allocation r, copy-on-write: the device reads
// the reloaded memory where the file holds it, and its writes stay its
// own.
func (d *Device) MapMem(_ context.Context, r backend.MemRegion, f *os.File, off int64) error {
	if r.Kind != backend.MemAlloc {
		return cu.Errorf(cu.ErrorInvalidValue, "only allocations can be mapped, not region %d/%#x", r.Kind, r.ID)
	}
	b, err := d.regionBytes(r)
	if err != nil {
		return err
	}
	if len(b) == 0 || off%int64(os.Getpagesize()) != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "map region %#x at file offset %d", r.ID, off)
	}
	id, err := fileIDOf(f)
	if err != nil {
		return cu.Errorf(cu.ErrorUnknown, "map region %#x: stat the file: %v", r.ID, err)
	}
	if _, err := unix.MmapPtr(int(f.Fd()), off, unsafe.Pointer(&b[0]), uintptr(len(b)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_FIXED); err != nil {
		return cu.Errorf(cu.ErrorUnknown, "map region %#x: %v", r.ID, err)
	}
	a := d.mem.find(r.ID)
	a.mapped, a.mapFile, a.mapOff = true, id, off
	return nil
}

// remapAnon puts fresh anonymous memory (zeros, no pages yet) in place of
// whatever b maps, at the same addresses.
func remapAnon(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&b[0]), uintptr(len(b)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
	return err
}

// UntrackedState: the emulated device keeps its modules' variables and
// its pools' memory in allocations MemRegions lists, and has no device
// heap, so nothing lies outside the regions (backend.UntrackedState).
func (d *Device) UntrackedState(context.Context) ([32]byte, bool, error) {
	return [32]byte{}, true, nil
}
