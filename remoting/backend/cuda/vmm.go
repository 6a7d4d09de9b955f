package cuda

// #include "vmm.h"
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/gpuctl/gpuctl/remoting/backend/cuda/suballoc"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Device memory for cuMemAlloc comes from chunks the worker maps itself
// with virtual memory management (package suballoc places allocations in
// them), one heap per context, so that the worker knows every byte its
// client can reach through cuMemAlloc and can save it, release the
// physical memory before the process is dumped, and back the same
// addresses again (see devmem.go). Pointers, ranges and pointer
// attributes answer as for cuMemAlloc: the client sees the addresses and
// sizes it asked for. Options.PlainMemory, or a driver or GPU without
// virtual memory management, keeps the driver's own allocator; the
// driver's checkpoint then saves that memory, as it saves pools, module
// variables and the client's own mappings in any case.

// sharedChunk is the size of the chunks small allocations share; rounded
// up to the GPU's granularity.
const sharedChunk = 2 << 20

// allocAlign is cuMemAlloc's alignment guarantee.
const allocAlign = 256

// vmmState is the device-wide table of chunks.
type vmmState struct {
	gran uint64 // mapping granularity; 0 until the first allocation
	off  bool   // the driver cannot map memory: allocations are plain
	// noExport: the driver cannot hand chunks out as descriptors, so
	// they cannot be parked (park.go).
	noExport bool
	// parked is the chunks Park handed out, until Unpark or a reload;
	// snap the snapshot Unpark kept, until its ReleaseMem.
	parked *parkState
	snap   *snapshot
	chunks map[uint64]*vmmChunk
	// mu guards the contexts' memTools against the concurrent ReadMem,
	// WriteMem and HashBlocks calls of a save, and pinned.
	mu sync.Mutex
	// pinned are the host ranges PinHost pinned: start to end.
	pinned map[uintptr]uintptr
}

// vmmChunk is one mapped chunk. backed is false between ReleaseMem and
// RestoreMem, and between Park and Unpark: the addresses are reserved, the
// memory released or held outside the process.
type vmmChunk struct {
	ctx    *cuCtx
	size   uint64
	handle C.CUmemGenericAllocationHandle
	backed bool
	// fd is a descriptor of the chunk's memory kept from an unpark: the
	// driver will not export a handle imported from a descriptor again
	// (CUDA_ERROR_INVALID_VALUE on the H200), so the next park hands out
	// a copy of this one. It keeps the memory alive, so it is closed
	// wherever the memory is let go, and never open across a dump.
	fd *os.File
}

// dropFD closes ch's kept descriptor, if any.
func (ch *vmmChunk) dropFD() {
	if ch.fd != nil {
		ch.fd.Close()
		ch.fd = nil
	}
}

// heap returns c's heap, creating it on first use; nil means plain
// allocations.
func (d *Device) heap(c *cuCtx) (*suballoc.Heap, error) {
	if d.vmm == nil || d.vmm.off {
		return nil, nil
	}
	if c.heap != nil {
		return c.heap, nil
	}
	x, err := d.extended()
	if err != nil {
		return nil, err
	}
	if d.vmm.gran == 0 {
		var g C.size_t
		if err := d.drv.check(C.gc_vmm_granularity(x.x, C.int(d.dev), &g), "cuMemGetAllocationGranularity"); err != nil || g == 0 || g&(g-1) != 0 {
			d.log.Warn("this driver or GPU cannot map device memory for the worker; cuMemAlloc uses the driver's allocator and checkpoints copy device memory through the driver", "granularity", uint64(g), "err", err)
			d.vmm.off = true
			return nil, nil
		}
		d.vmm.gran = uint64(g)
	}
	small := (uint64(sharedChunk) + d.vmm.gran - 1) / d.vmm.gran * d.vmm.gran
	h, err := suballoc.New(suballoc.Config{Granularity: d.vmm.gran, SmallChunk: small, Align: allocAlign}, chunkBacking{d, c})
	if err != nil {
		return nil, cu.Errorf(cu.ErrorUnknown, "%v", err)
	}
	c.heap = h
	return h, nil
}

// ctxHealthy reports c's sticky error, if any: one a call reported
// already, or what a query of its legacy stream, which does not wait,
// returns in a faulted context. Work still running is not an error.
func (d *Device) ctxHealthy(c *cuCtx) error {
	if e := d.drv.sticky.Load(); e != nil {
		return &cu.Error{Code: e.Code, Detail: "cuMemAlloc: the context faulted earlier (" + e.Detail + ")"}
	}
	r := C.gc_stream_query(d.drv.api, c.raw, nil)
	if cu.Result(r) == cu.ErrorNotReady {
		return nil
	}
	return d.drv.check(r, "cuMemAlloc")
}

// vmmAlloc places an allocation in c's heap.
func (d *Device) vmmAlloc(h *suballoc.Heap, size uint64) (uint64, error) {
	if total, err := d.drv.totalMem(d.dev); err == nil && size > total {
		return 0, cu.Errorf(cu.ErrorOutOfMemory, "cuMemAlloc of %d bytes: the GPU has %d", size, total)
	}
	p, err := h.Alloc(size)
	if err == nil {
		return p, nil
	}
	var ce *cu.Error
	switch {
	case errors.Is(err, suballoc.ErrZeroSize):
		return 0, cu.Errorf(cu.ErrorInvalidValue, "cuMemAlloc of 0 bytes")
	case errors.As(err, &ce):
		return 0, err
	}
	return 0, cu.Errorf(cu.ErrorInvalidValue, "cuMemAlloc of %d bytes: %v", size, err)
}

// vmmFree frees p when it is an allocation of c's heap and reports
// whether it was.
func (d *Device) vmmFree(c *cuCtx, p uint64) (bool, error) {
	if c.heap == nil {
		return false, nil
	}
	if _, ok := c.heap.Size(p); !ok {
		return false, nil
	}
	// The driver's cuMemFree waits for the device's outstanding work
	// before the memory goes, and reports the errors of earlier launches;
	// cuMemUnmap and cuMemRelease do neither. Programs rely on the wait:
	// Thrust frees its sort's temporary storage right after launching the
	// sort's kernels, which faulted on the unmapped chunk or wrote into
	// the bytes' next owner (H200) before the worker waited here. The
	// heap's quarantine keeps the same order on its own; the wait keeps
	// cuMemFree's blocking and its errors as the driver has them.
	if err := d.drv.check(C.gc_ctx_synchronize(d.drv.api, c.raw), "cuMemFree (waiting for the device's outstanding work)"); err != nil {
		return true, err
	}
	return true, c.heap.Free(p)
}

// dropHeap unmaps every chunk of c (its context is going away, and the
// driver would not free them with it) once c's work is done, and frees
// c's save tools.
func (d *Device) dropHeap(c *cuCtx) {
	if c.tools != nil {
		d.freeTools(c, true)
	}
	if c.heap != nil {
		if err := c.heap.Close(); err != nil {
			d.log.Warn("unmapping a context's device memory", "err", err)
		}
		c.heap = nil
	}
}

// chunkBacking maps and unmaps c's chunks.
type chunkBacking struct {
	d *Device
	c *cuCtx
}

func (b chunkBacking) Map(size uint64) (uint64, error) {
	var (
		va C.CUdeviceptr
		h  C.CUmemGenericAllocationHandle
	)
	r := C.gc_vmm_map(b.d.drv.api, b.d.ext.x, b.c.raw, C.size_t(size), C.int(b.d.dev), b.d.exportable(), &va, &h)
	if r != 0 && b.d.exportable() != 0 && (cu.Result(r) == cu.ErrorNotSupported || cu.Result(r) == cu.ErrorInvalidValue) {
		// Memory that can be handed out as a descriptor (park.go) is
		// not to be had here: plain chunks, saved by copying.
		b.d.log.Warn("this driver or GPU cannot hand device memory out as a file descriptor; checkpoints copy it to the host while the client waits", "err", b.d.drv.check(r, "cuMemCreate (exportable)"))
		b.d.vmm.noExport = true
		r = C.gc_vmm_map(b.d.drv.api, b.d.ext.x, b.c.raw, C.size_t(size), C.int(b.d.dev), 0, &va, &h)
	}
	if err := b.d.drv.check(r, "cuMemAlloc (cuMemCreate and cuMemMap)"); err != nil {
		return 0, err
	}
	b.d.vmm.chunks[uint64(va)] = &vmmChunk{ctx: b.c, size: size, handle: h, backed: true}
	return uint64(va), nil
}

func (b chunkBacking) Unmap(base, size uint64) error {
	ch, ok := b.d.vmm.chunks[base]
	if !ok || ch.size != size {
		return cu.Errorf(cu.ErrorInvalidValue, "no device memory chunk %#x+%d", base, size)
	}
	backed := C.int(0)
	if ch.backed {
		backed = 1
	}
	r := C.gc_vmm_free(b.d.drv.api, b.d.ext.x, b.c.raw, C.CUdeviceptr(base), C.size_t(size), ch.handle, backed)
	if err := b.d.drv.check(r, fmt.Sprintf("cuMemFree (cuMemUnmap and cuMemRelease of %#x)", base)); err != nil {
		return err
	}
	ch.dropFD()
	delete(b.d.vmm.chunks, base)
	return nil
}

// Drain waits for the work queued in c: memory the client freed is
// reused or unmapped only after the kernels launched before the free are
// done, as the driver's cuMemFree ensures (suballoc's quarantine).
func (b chunkBacking) Drain() error {
	return b.d.drv.check(C.gc_ctx_synchronize(b.d.drv.api, b.c.raw), "cuMemFree (wait for the work queued before freed device memory is reused)")
}
