package cuda

// #include "api.h"
import "C"

import (
	"context"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/cuda/suballoc"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// cuCtx is a context the client holds, with everything it created in it.
// Resources are per context so that destroying a context forgets exactly
// what the driver freed with it.
type cuCtx struct {
	raw     C.CUcontext
	primary bool
	streams map[backend.Stream]C.CUstream
	events  map[backend.Event]C.CUevent
	modules map[backend.Module]*module
	mem     spans
	stage   *staging // pinned buffers for host copies; nil until first used

	heap  *suballoc.Heap // cuMemAlloc's chunks (vmm.go); nil until first used
	tools *memTools      // the means of saving them (devmem.go)
	// stack is the per-thread stack size TrimContexts replaced (trim.go);
	// 0 while the context is not trimmed.
	stack uint64
}

func newCtx(raw C.CUcontext, primary bool) *cuCtx {
	return &cuCtx{
		raw:     raw,
		primary: primary,
		streams: map[backend.Stream]C.CUstream{},
		events:  map[backend.Event]C.CUevent{},
		modules: map[backend.Module]*module{},
	}
}

// ctx looks up a client's context handle.
func (d *Device) ctx(h backend.Ctx) (*cuCtx, error) {
	c, ok := d.ctxs[h]
	if !ok {
		return nil, cu.Errorf(cu.ErrorInvalidContext, "context %#x does not exist", uint64(h))
	}
	return c, nil
}

func (d *Device) PrimaryCtxRetain(_ context.Context, dev int32) (backend.Ctx, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	var raw C.CUcontext
	if err := d.drv.check(C.gc_primary_retain(d.drv.api, d.dev, &raw), "cuDevicePrimaryCtxRetain"); err != nil {
		return 0, err
	}
	d.primaryRefs++
	if d.primary == 0 {
		d.primary = backend.Ctx(d.newID())
		d.ctxs[d.primary] = newCtx(raw, true)
	}
	return d.primary, nil
}

func (d *Device) PrimaryCtxRelease(_ context.Context, dev int32) error {
	if err := d.checkDev(dev); err != nil {
		return err
	}
	if d.primary == 0 || d.primaryRefs == 0 {
		return cu.Errorf(cu.ErrorInvalidContext, "primary context of device 0 is not retained")
	}
	if d.primaryRefs == 1 {
		// The last release destroys the context in the driver: free the
		// staging buffers it owns first, and forget what it held.
		d.dropCtx(d.primary, d.ctxs[d.primary])
	}
	if err := d.drv.check(C.gc_primary_release(d.drv.api, d.dev), "cuDevicePrimaryCtxRelease"); err != nil {
		return err
	}
	d.primaryRefs--
	if d.primaryRefs == 0 {
		d.primary = 0
	}
	return nil
}

// PrimaryCtxReset destroys the primary context's state. As in the
// emulated backend, the client must retain it again to use it.
func (d *Device) PrimaryCtxReset(_ context.Context, dev int32) error {
	if err := d.checkDev(dev); err != nil {
		return err
	}
	if d.primary != 0 {
		d.dropCtx(d.primary, d.ctxs[d.primary])
	}
	if err := d.drv.check(C.gc_primary_reset(d.drv.api, d.dev), "cuDevicePrimaryCtxReset"); err != nil {
		return err
	}
	d.primary, d.primaryRefs = 0, 0
	return nil
}

func (d *Device) PrimaryCtxState(_ context.Context, dev int32) (uint32, bool, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, false, err
	}
	var flags C.uint
	var active C.int
	if err := d.drv.check(C.gc_primary_state(d.drv.api, d.dev, &flags, &active), "cuDevicePrimaryCtxGetState"); err != nil {
		return 0, false, err
	}
	return uint32(flags), active != 0, nil
}

func (d *Device) PrimaryCtxSetFlags(_ context.Context, dev int32, flags uint32) error {
	if err := d.checkDev(dev); err != nil {
		return err
	}
	return d.drv.check(C.gc_primary_set_flags(d.drv.api, d.dev, C.uint(flags)), "cuDevicePrimaryCtxSetFlags")
}

func (d *Device) CtxCreate(_ context.Context, dev int32, flags uint32) (backend.Ctx, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	var raw C.CUcontext
	if err := d.drv.check(C.gc_ctx_create(d.drv.api, d.dev, C.uint(flags), &raw), "cuCtxCreate"); err != nil {
		return 0, err
	}
	h := backend.Ctx(d.newID())
	d.ctxs[h] = newCtx(raw, false)
	return h, nil
}

func (d *Device) CtxDestroy(_ context.Context, h backend.Ctx) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if c.primary {
		return cu.Errorf(cu.ErrorInvalidContext, "context %#x is the primary context: release it with cuDevicePrimaryCtxRelease", uint64(h))
	}
	return d.destroyCtx(h, c)
}

// destroyCtx destroys a created context in the driver and forgets it.
func (d *Device) destroyCtx(h backend.Ctx, c *cuCtx) error {
	d.dropCtx(h, c)
	return d.drv.check(C.gc_ctx_destroy(d.drv.api, c.raw), "cuCtxDestroy")
}

// dropCtx frees what this package allocated in c (its staging buffers)
// and forgets c's handles, which the driver is about to free with it.
func (d *Device) dropCtx(h backend.Ctx, c *cuCtx) {
	if c == nil {
		return
	}
	d.freeStaging(c)
	d.dropHeap(c)
	for fh, f := range d.funcs {
		if f.ctx == h {
			delete(d.funcs, fh)
		}
	}
	delete(d.ctxs, h)
}

func (d *Device) CtxDevice(_ context.Context, h backend.Ctx) (int32, error) {
	if _, err := d.ctx(h); err != nil {
		return 0, err
	}
	return 0, nil
}

func (d *Device) CtxSynchronize(_ context.Context, h backend.Ctx) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.drv.check(C.gc_ctx_synchronize(d.drv.api, c.raw), "cuCtxSynchronize"); err != nil {
		return err
	}
	// Everything queued before is done: freed memory is reusable.
	if c.heap != nil {
		if err := c.heap.Reclaim(); err != nil {
			d.log.Warn("unmapping freed device memory", "err", err)
		}
	}
	return nil
}

// ctxStream resolves a context and one of its streams, the lookup most
// stream-ordered calls start with.
func (d *Device) ctxStream(h backend.Ctx, s backend.Stream) (*cuCtx, C.CUstream, error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, nil, err
	}
	raw, err := d.stream(c, s)
	return c, raw, err
}

// ctxEvent resolves a context and one of its events.
func (d *Device) ctxEvent(h backend.Ctx, e backend.Event) (*cuCtx, C.CUevent, error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, nil, err
	}
	raw, err := d.event(c, e)
	return c, raw, err
}
