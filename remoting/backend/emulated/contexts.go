package emulated

import (
	"context"
	"errors"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// context_ is a CUDA context. (The trailing underscore keeps the name free
// of the standard library's context package.)
type context_ struct {
	handle  backend.Ctx
	flags   uint32
	primary bool
	// sticky is an error from a kernel that corrupts the context (an
	// illegal address): every later call on the context fails with it, as
	// on a real GPU, until the context is destroyed or reset.
	sticky error
	// pending is an asynchronous error that does not poison the context:
	// the next synchronising call reports it once.
	pending error
	// defQ queues the default stream's work while it is blocked.
	defQ blockQ
	// limits holds the limits set with cuCtxSetLimit (limits.go).
	limits map[int32]uint64
}

// stickyCodes are the kernel failures after which CUDA declares the
// context unusable.
var stickyCodes = map[cu.Result]bool{
	cu.ErrorIllegalAddress:      true,
	cu.ErrorIllegalInstruction:  true,
	cu.ErrorMisalignedAddress:   true,
	cu.ErrorInvalidAddressSpace: true,
	cu.ErrorInvalidPC:           true,
	cu.ErrorLaunchFailed:        true,
	cu.ErrorAssert:              true,
	cu.ErrorLaunchTimeout:       true,
}

// fail records an asynchronous failure on the context.
func (c *context_) fail(err error) {
	if stickyCodes[cu.Code(err)] {
		if c.sticky == nil {
			c.sticky = err
		}
		return
	}
	if c.pending == nil {
		c.pending = err
	}
}

// takePending returns and clears the pending error.
func (c *context_) takePending() error {
	err := c.pending
	c.pending = nil
	return err
}

var errSuspended = cu.Errorf(cu.ErrorIllegalState, "the device is suspended for a checkpoint")

// ctx looks up a context handle and fails with the context's sticky error
// if it has one, so every call on a poisoned context reports the failure.
func (d *Device) ctx(h backend.Ctx) (*context_, error) {
	if d.suspended {
		return nil, errSuspended
	}
	c, ok := d.ctxs[h]
	if !ok {
		return nil, cu.Errorf(cu.ErrorInvalidContext, "context %#x does not exist", uint64(h))
	}
	if c.sticky != nil {
		return nil, c.sticky
	}
	return c, nil
}

// syncCtx is ctx for a synchronising call: it also reports (and clears) a
// pending asynchronous error.
func (d *Device) syncCtx(h backend.Ctx) (*context_, error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, err
	}
	return c, c.takePending()
}

func (d *Device) PrimaryCtxRetain(_ context.Context, dev int32) (backend.Ctx, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	if d.primary == nil {
		d.primary = &context_{handle: backend.Ctx(d.newID()), flags: d.pflags, primary: true}
		d.ctxs[d.primary.handle] = d.primary
	}
	d.prefs++
	return d.primary.handle, nil
}

func (d *Device) PrimaryCtxRelease(_ context.Context, dev int32) error {
	if err := d.checkDev(dev); err != nil {
		return err
	}
	if d.primary == nil || d.prefs == 0 {
		return cu.Errorf(cu.ErrorInvalidContext, "primary context of device 0 is not retained")
	}
	d.prefs--
	if d.prefs == 0 {
		d.destroyCtx(d.primary)
		d.primary = nil
	}
	return nil
}

func (d *Device) PrimaryCtxReset(_ context.Context, dev int32) error {
	if err := d.checkDev(dev); err != nil {
		return err
	}
	if d.primary != nil {
		d.destroyCtx(d.primary)
		d.primary, d.prefs = nil, 0
	}
	d.pflags = 0
	return nil
}

func (d *Device) PrimaryCtxState(_ context.Context, dev int32) (uint32, bool, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, false, err
	}
	return d.pflags, d.primary != nil, nil
}

// ctxFlagsMask covers CU_CTX_SCHED_* (0x7), MAP_HOST (0x8),
// LMEM_RESIZE_TO_MAX (0x10), COREDUMP (0x20), USER_COREDUMP (0x40) and
// SYNC_MEMOPS (0x80).
const ctxFlagsMask = 0xff

func (d *Device) PrimaryCtxSetFlags(_ context.Context, dev int32, flags uint32) error {
	if err := d.checkDev(dev); err != nil {
		return err
	}
	if flags&^ctxFlagsMask != 0 || flags&0x7 == 0x3 || flags&0x7 > 0x4 {
		return cu.Errorf(cu.ErrorInvalidValue, "context flags %#x", flags)
	}
	d.pflags = flags
	if d.primary != nil {
		d.primary.flags = flags
	}
	return nil
}

func (d *Device) CtxCreate(_ context.Context, dev int32, flags uint32) (backend.Ctx, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	if flags&^ctxFlagsMask != 0 || flags&0x7 == 0x3 || flags&0x7 > 0x4 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "context flags %#x", flags)
	}
	c := &context_{handle: backend.Ctx(d.newID()), flags: flags}
	d.ctxs[c.handle] = c
	return c.handle, nil
}

func (d *Device) CtxDestroy(_ context.Context, h backend.Ctx) error {
	c, ok := d.ctxs[h]
	if !ok {
		return cu.Errorf(cu.ErrorInvalidContext, "context %#x does not exist", uint64(h))
	}
	if c.primary {
		return cu.Errorf(cu.ErrorInvalidContext, "context %#x is a primary context; release it with cuDevicePrimaryCtxRelease", uint64(h))
	}
	d.destroyCtx(c)
	return nil
}

// destroyCtx frees everything the context owns.
func (d *Device) destroyCtx(c *context_) {
	for h, f := range d.funcs {
		if f.ctx == c.handle {
			delete(d.funcs, h)
		}
	}
	for h, m := range d.modules {
		if m.ctx == c.handle {
			delete(d.modules, h)
		}
	}
	for h, s := range d.streams {
		if s.ctx == c.handle {
			delete(d.streams, h)
		}
	}
	for h, e := range d.events {
		if e.ctx == c.handle {
			delete(d.events, h)
		}
	}
	for q, qc := range d.blocked {
		if qc == c {
			delete(d.blocked, q) // its queued work dies with the context
		}
	}
	d.mem.freeOwned(c.handle)
	delete(d.ctxs, c.handle)
}

func (d *Device) CtxDevice(_ context.Context, h backend.Ctx) (int32, error) {
	if _, err := d.ctx(h); err != nil {
		return 0, err
	}
	return 0, nil
}

// CtxSynchronize reports the context's asynchronous failures; its work is
// always complete.
func (d *Device) CtxSynchronize(_ context.Context, h backend.Ctx) error {
	c, err := d.syncCtx(h)
	if err == nil && !d.ctxDrained(c) {
		return errBlocked("cuCtxSynchronize")
	}
	return err
}

// isCUDA reports whether err carries a CUDA result rather than being a
// transport failure (a client that hung up mid-copy).
func isCUDA(err error) bool {
	var e *cu.Error
	var r cu.Result
	return errors.As(err, &e) || errors.As(err, &r)
}
