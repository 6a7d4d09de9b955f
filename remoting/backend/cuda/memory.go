package cuda

// #include "api.h"
import "C"

import (
	"context"
	"fmt"
	"io"
	"unsafe"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// stageChunk is the size of each of the two pinned staging buffers. Host
// copies move through them in chunks: while the GPU copies one chunk, the
// next is read from (or the previous written to) the client's socket.
// 8 MiB keeps the per-call overhead well under 1% at PCIe speed while a
// session pins only 16 MiB.
const stageChunk = 8 << 20

// staging is a context's pair of pinned host buffers and the events that
// say when the GPU is done with each.
type staging struct {
	buf     [2]unsafe.Pointer
	done    [2]C.CUevent
	pending [2]bool
}

const eventDisableTiming = 0x2 // CU_EVENT_DISABLE_TIMING

// stage returns c's staging buffers, allocating them on first use.
func (d *Device) stage(c *cuCtx) (*staging, error) {
	if c.stage != nil {
		return c.stage, nil
	}
	st := &staging{}
	for i := range st.buf {
		var p unsafe.Pointer
		if err := d.drv.check(C.gc_host_alloc(d.drv.api, c.raw, stageChunk, &p), "cuMemHostAlloc"); err != nil {
			d.releaseStaging(c, st)
			return nil, err
		}
		st.buf[i] = p
		var e C.CUevent
		if err := d.drv.check(C.gc_event_create(d.drv.api, c.raw, eventDisableTiming, &e), "cuEventCreate"); err != nil {
			d.releaseStaging(c, st)
			return nil, err
		}
		st.done[i] = e
	}
	c.stage = st
	return st, nil
}

func (d *Device) freeStaging(c *cuCtx) {
	if c.stage != nil {
		d.releaseStaging(c, c.stage)
		c.stage = nil
	}
}

func (d *Device) releaseStaging(c *cuCtx, st *staging) {
	for i := range st.buf {
		if st.done[i] != nil {
			C.gc_event_synchronize(d.drv.api, c.raw, st.done[i])
			C.gc_event_destroy(d.drv.api, c.raw, st.done[i])
		}
		if st.buf[i] != nil {
			C.gc_host_free(d.drv.api, c.raw, st.buf[i])
		}
	}
}

// wait blocks until the GPU is done with buffer i.
func (d *Device) wait(c *cuCtx, st *staging, i int) error {
	if !st.pending[i] {
		return nil
	}
	st.pending[i] = false
	return d.drv.check(C.gc_event_synchronize(d.drv.api, c.raw, st.done[i]), "cuEventSynchronize")
}

func (st *staging) bytes(i int, n uint64) []byte {
	return unsafe.Slice((*byte)(st.buf[i]), n)
}

// stream resolves a client stream handle in c. 0 is the legacy default
// stream; CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are the
// driver's own special handles and pass through unchanged.
func (d *Device) stream(c *cuCtx, s backend.Stream) (C.CUstream, error) {
	switch s {
	case 0:
		return nil, nil
	case 1, 2:
		return C.gc_special_stream(C.uintptr_t(s)), nil
	}
	raw, ok := c.streams[s]
	if !ok {
		return nil, cu.Errorf(cu.ErrorInvalidHandle, "stream %#x does not exist in this context", uint64(s))
	}
	return raw, nil
}

// span checks that [p, p+n) lies in one of c's allocations or globals.
func (d *Device) span(c *cuCtx, p backend.DevPtr, n uint64) error {
	if !c.mem.contains(uint64(p), n) && !d.sharedSpan(uint64(p), n) {
		return cu.Errorf(cu.ErrorInvalidValue, "device range %#x+%d is not inside an allocation of this context", uint64(p), n)
	}
	return nil
}

func (d *Device) MemAlloc(_ context.Context, h backend.Ctx, size uint64) (backend.DevPtr, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	hp, err := d.heap(c)
	if err != nil {
		return 0, err
	}
	if hp != nil {
		// A place in a chunk the heap already has never reaches the
		// driver, which would report a context faulted by an earlier
		// kernel (a sticky error) on any call: ask it directly.
		if err := d.ctxHealthy(c); err != nil {
			return 0, err
		}
		p, err := d.vmmAlloc(hp, size)
		if err != nil {
			return 0, err
		}
		c.mem.add(span{base: p, size: size})
		return backend.DevPtr(p), nil
	}
	var p C.CUdeviceptr
	if err := d.drv.check(C.gc_mem_alloc(d.drv.api, c.raw, C.size_t(size), &p), "cuMemAlloc"); err != nil {
		return 0, err
	}
	c.mem.add(span{base: uint64(p), size: size})
	return backend.DevPtr(p), nil
}

func (d *Device) MemFree(_ context.Context, h backend.Ctx, p backend.DevPtr) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if p == 0 {
		return nil // freeing 0 does nothing, as in CUDA
	}
	if pooled, err := d.freePoolMem(c, uint64(p)); pooled {
		return err
	}
	x, ok := c.mem.find(uint64(p))
	if !ok || x.base != uint64(p) {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x is not the start of an allocation of this context", uint64(p))
	}
	if x.module != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x is a module variable; it is freed when its module is unloaded", uint64(p))
	}
	if mine, err := d.vmmFree(c, uint64(p)); mine {
		// The heap has let go of p even when the wait its free set off
		// failed (a context that faulted): forget it here as well.
		c.mem.remove(uint64(p))
		return err
	}
	if err := d.drv.check(C.gc_mem_free(d.drv.api, c.raw, C.CUdeviceptr(p)), "cuMemFree"); err != nil {
		return err
	}
	c.mem.remove(uint64(p))
	return nil
}

func (d *Device) MemGetInfo(_ context.Context, h backend.Ctx) (uint64, uint64, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, 0, err
	}
	// Memory freed but still waiting for earlier work counts as free,
	// as it does natively once cuMemFree has returned.
	if c.heap != nil && c.heap.Pending() > 0 {
		if err := c.heap.Drain(); err != nil {
			return 0, 0, err
		}
	}
	var free, total C.size_t
	if err := d.drv.check(C.gc_mem_info(d.drv.api, c.raw, &free, &total), "cuMemGetInfo"); err != nil {
		return 0, 0, err
	}
	return uint64(free), uint64(total), nil
}

// MemGetAddressRange answers from the table of ranges this context made,
// which is exactly what the driver would answer for them.
func (d *Device) MemGetAddressRange(_ context.Context, h backend.Ctx, p backend.DevPtr) (backend.DevPtr, uint64, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, 0, err
	}
	x, ok := c.mem.find(uint64(p))
	if !ok {
		return 0, 0, cu.Errorf(cu.ErrorNotFound, "device address %#x is not in any allocation", uint64(p))
	}
	return backend.DevPtr(x.base), x.size, nil
}

// MemcpyHtoD reads the client's bytes straight off src into one staging
// buffer while the GPU copies the other to the device. It returns when the
// last chunk has reached the device, so the buffers are free for the next
// call; an asynchronous copy is therefore synchronous to the caller, which
// CUDA permits.
func (d *Device) MemcpyHtoD(_ context.Context, h backend.Ctx, dst backend.DevPtr, src io.Reader, n uint64, s backend.Stream) error {
	c, st, raw, err := d.copySetup(h, dst, n, s)
	if err != nil {
		return drain(src, n, err)
	}
	var off uint64
	for i := 0; off < n; i ^= 1 {
		k := min(n-off, stageChunk)
		if err := d.wait(c, st, i); err != nil {
			return drain(src, n-off, err)
		}
		if _, err := io.ReadFull(src, st.bytes(i, k)); err != nil {
			d.wait(c, st, i^1)
			return fmt.Errorf("reading %d bytes of copy data from the client: %w", n, err)
		}
		off += k
		r := C.gc_htod(d.drv.api, c.raw, C.CUdeviceptr(uint64(dst)+off-k), st.buf[i], C.size_t(k), raw, st.done[i])
		if err := d.drv.check(r, "cuMemcpyHtoDAsync"); err != nil {
			d.wait(c, st, i^1)
			return drain(src, n-off, err)
		}
		st.pending[i] = true
	}
	err0, err1 := d.wait(c, st, 0), d.wait(c, st, 1)
	if err0 != nil {
		return err0
	}
	return err1
}

// MemcpyDtoH copies chunks into the staging buffers and writes each to
// dst while the GPU fills the other. Errors found before the first byte is
// written (a bad range, or a device error, which the first chunk's copy
// reports because it waits for the stream's earlier work) return with
// nothing written. A failure after that returns with the copy incomplete;
// the stream cannot be reframed and the caller drops the connection.
func (d *Device) MemcpyDtoH(_ context.Context, h backend.Ctx, dst io.Writer, src backend.DevPtr, n uint64, s backend.Stream) error {
	c, st, raw, err := d.copySetup(h, src, n, s)
	if err != nil {
		return err
	}
	issue := func(i int, off uint64) error {
		k := min(n-off, stageChunk)
		r := C.gc_dtoh(d.drv.api, c.raw, st.buf[i], C.CUdeviceptr(uint64(src)+off), C.size_t(k), raw, st.done[i])
		if err := d.drv.check(r, "cuMemcpyDtoHAsync"); err != nil {
			return err
		}
		st.pending[i] = true
		return nil
	}
	fail := func(err error) error {
		d.wait(c, st, 0)
		d.wait(c, st, 1)
		return err
	}
	if n == 0 {
		return nil
	}
	if err := issue(0, 0); err != nil {
		return err
	}
	for i, off := 0, uint64(0); off < n; i ^= 1 {
		k := min(n-off, stageChunk)
		if next := off + k; next < n {
			if err := issue(i^1, next); err != nil {
				return fail(err)
			}
		}
		if err := d.wait(c, st, i); err != nil {
			return fail(err)
		}
		if _, err := dst.Write(st.bytes(i, k)); err != nil {
			d.wait(c, st, i^1)
			return fmt.Errorf("writing copy data to the client: %w", err)
		}
		off += k
	}
	return nil
}

// copySetup validates a host copy's context, range and stream, and gets
// the context's staging buffers.
func (d *Device) copySetup(h backend.Ctx, p backend.DevPtr, n uint64, s backend.Stream) (*cuCtx, *staging, C.CUstream, error) {
	c, raw, err := d.ctxStream(h, s)
	if err != nil {
		return nil, nil, nil, err
	}
	if err := d.span(c, p, n); err != nil {
		return nil, nil, nil, err
	}
	st, err := d.stage(c)
	if err != nil {
		return nil, nil, nil, err
	}
	return c, st, raw, nil
}

// drain consumes the rest of a failed copy's bytes so the client's stream
// stays framed, and returns the copy's error (or the read error that
// broke the stream).
func drain(src io.Reader, n uint64, err error) error {
	if _, rerr := io.CopyN(io.Discard, src, int64(n)); rerr != nil {
		return fmt.Errorf("discarding %d bytes of a failed copy: %w (the copy failed with %w)", n, rerr, err)
	}
	return err
}

func (d *Device) MemcpyDtoD(_ context.Context, h backend.Ctx, dst, src backend.DevPtr, n uint64, s backend.Stream) error {
	c, raw, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	if err := d.span(c, dst, n); err != nil {
		return err
	}
	if err := d.span(c, src, n); err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return d.drv.check(C.gc_dtod(d.drv.api, c.raw, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), raw), "cuMemcpyDtoDAsync")
}

func (d *Device) Memset(_ context.Context, h backend.Ctx, dst backend.DevPtr, value uint32, elemSize int, count uint64, s backend.Stream) error {
	c, raw, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	if elemSize != 1 && elemSize != 2 && elemSize != 4 {
		return cu.Errorf(cu.ErrorInvalidValue, "memset element size %d (must be 1, 2 or 4)", elemSize)
	}
	if count > ^uint64(0)/uint64(elemSize) {
		return cu.Errorf(cu.ErrorInvalidValue, "memset of %d elements overflows", count)
	}
	if err := d.span(c, dst, count*uint64(elemSize)); err != nil {
		return err
	}
	if count == 0 {
		return nil
	}
	return d.drv.check(C.gc_memset(d.drv.api, c.raw, C.CUdeviceptr(dst), C.uint(value), C.int(elemSize), C.size_t(count), raw), "cuMemset")
}
