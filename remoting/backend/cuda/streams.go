package cuda

// #include "api.h"
import "C"

import (
	"context"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Query calls return CUDA_ERROR_NOT_READY often; it goes back as the bare
// result, without an allocation.
func (d *Device) query(r C.CUresult, call string) error {
	if cu.Result(r) == cu.ErrorNotReady {
		return cu.ErrorNotReady
	}
	return d.drv.check(r, call)
}

func (d *Device) StreamCreate(_ context.Context, h backend.Ctx, flags uint32, priority int32) (backend.Stream, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	var raw C.CUstream
	if err := d.drv.check(C.gc_stream_create(d.drv.api, c.raw, C.uint(flags), C.int(priority), &raw), "cuStreamCreateWithPriority"); err != nil {
		return 0, err
	}
	s := backend.Stream(d.newID())
	c.streams[s] = raw
	return s, nil
}

func (d *Device) StreamDestroy(_ context.Context, h backend.Ctx, s backend.Stream) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	raw, ok := c.streams[s]
	if !ok {
		return cu.Errorf(cu.ErrorInvalidHandle, "stream %#x does not exist in this context", uint64(s))
	}
	if err := d.drv.check(C.gc_stream_destroy(d.drv.api, c.raw, raw), "cuStreamDestroy"); err != nil {
		return err
	}
	delete(c.streams, s)
	return nil
}

func (d *Device) StreamQuery(_ context.Context, h backend.Ctx, s backend.Stream) error {
	c, raw, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	return d.query(C.gc_stream_query(d.drv.api, c.raw, raw), "cuStreamQuery")
}

func (d *Device) StreamSynchronize(_ context.Context, h backend.Ctx, s backend.Stream) error {
	c, raw, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_stream_synchronize(d.drv.api, c.raw, raw), "cuStreamSynchronize")
}

func (d *Device) StreamWaitEvent(_ context.Context, h backend.Ctx, s backend.Stream, e backend.Event, flags uint32) error {
	c, raw, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	ev, err := d.event(c, e)
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_stream_wait_event(d.drv.api, c.raw, raw, ev, C.uint(flags)), "cuStreamWaitEvent")
}

func (d *Device) event(c *cuCtx, e backend.Event) (C.CUevent, error) {
	raw, ok := c.events[e]
	if !ok {
		return nil, cu.Errorf(cu.ErrorInvalidHandle, "event %#x does not exist in this context", uint64(e))
	}
	return raw, nil
}

// eventInterprocess is CU_EVENT_INTERPROCESS. IPC events cannot be
// checkpointed by the driver, and no other process could use one anyway.
const eventInterprocess = 0x4

func (d *Device) EventCreate(_ context.Context, h backend.Ctx, flags uint32) (backend.Event, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	if flags&eventInterprocess != 0 {
		return 0, cu.Errorf(cu.ErrorNotSupported, "interprocess events are not available to remote sessions")
	}
	var raw C.CUevent
	if err := d.drv.check(C.gc_event_create(d.drv.api, c.raw, C.uint(flags), &raw), "cuEventCreate"); err != nil {
		return 0, err
	}
	e := backend.Event(d.newID())
	c.events[e] = raw
	return e, nil
}

func (d *Device) EventDestroy(_ context.Context, h backend.Ctx, e backend.Event) error {
	c, raw, err := d.ctxEvent(h, e)
	if err != nil {
		return err
	}
	if err := d.drv.check(C.gc_event_destroy(d.drv.api, c.raw, raw), "cuEventDestroy"); err != nil {
		return err
	}
	delete(c.events, e)
	return nil
}

func (d *Device) EventRecord(_ context.Context, h backend.Ctx, e backend.Event, s backend.Stream) error {
	c, raw, err := d.ctxEvent(h, e)
	if err != nil {
		return err
	}
	st, err := d.stream(c, s)
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_event_record(d.drv.api, c.raw, raw, st), "cuEventRecord")
}

func (d *Device) EventQuery(_ context.Context, h backend.Ctx, e backend.Event) error {
	c, raw, err := d.ctxEvent(h, e)
	if err != nil {
		return err
	}
	return d.query(C.gc_event_query(d.drv.api, c.raw, raw), "cuEventQuery")
}

func (d *Device) EventSynchronize(_ context.Context, h backend.Ctx, e backend.Event) error {
	c, raw, err := d.ctxEvent(h, e)
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_event_synchronize(d.drv.api, c.raw, raw), "cuEventSynchronize")
}

func (d *Device) EventElapsedTime(_ context.Context, h backend.Ctx, start, end backend.Event) (float32, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	a, err := d.event(c, start)
	if err != nil {
		return 0, err
	}
	b, err := d.event(c, end)
	if err != nil {
		return 0, err
	}
	var ms C.float
	if err := d.drv.check(C.gc_event_elapsed(d.drv.api, c.raw, a, b, &ms), "cuEventElapsedTime"); err != nil {
		return 0, err
	}
	return float32(ms), nil
}
