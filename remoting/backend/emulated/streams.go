package emulated

import (
	"context"
	"time"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// The special stream handles CUDA defines: CU_STREAM_LEGACY and
// CU_STREAM_PER_THREAD. Both name the context's default stream here.
const (
	streamLegacy    backend.Stream = 0x1
	streamPerThread backend.Stream = 0x2
)

type stream struct {
	ctx      backend.Ctx
	flags    uint32
	priority int32
	q        blockQ // work queued while the stream is blocked
}

// CU_EVENT_* flags.
const (
	eventBlockingSync  = 0x1
	eventDisableTiming = 0x2
	eventInterprocess  = 0x4
)

type event struct {
	ctx      backend.Ctx
	flags    uint32
	recorded bool
	at       time.Time
	pending  int // records queued on blocked streams
}

func (d *Device) StreamCreate(_ context.Context, h backend.Ctx, flags uint32, priority int32) (backend.Stream, error) {
	if _, err := d.ctx(h); err != nil {
		return 0, err
	}
	if flags&^1 != 0 { // CU_STREAM_NON_BLOCKING is the only flag
		return 0, cu.Errorf(cu.ErrorInvalidValue, "stream flags %#x", flags)
	}
	s := backend.Stream(d.newID())
	d.streams[s] = &stream{ctx: h, flags: flags, priority: priority}
	return s, nil
}

func (d *Device) StreamDestroy(_ context.Context, h backend.Ctx, s backend.Stream) error {
	if _, err := d.ctx(h); err != nil {
		return err
	}
	st, ok := d.streams[s]
	if !ok || st.ctx != h {
		return cu.Errorf(cu.ErrorInvalidHandle, "stream %#x does not exist in context %#x", uint64(s), uint64(h))
	}
	delete(d.streams, s)
	return nil
}

// StreamQuery never reports ErrorNotReady: work has completed when the
// call that submitted it returned.
func (d *Device) StreamQuery(_ context.Context, h backend.Ctx, s backend.Stream) error {
	c, err := d.syncCtx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	if !d.drained(c, s) {
		return cu.ErrorNotReady
	}
	return nil
}

func (d *Device) StreamSynchronize(_ context.Context, h backend.Ctx, s backend.Stream) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	if !d.drained(c, s) {
		return errBlocked("cuStreamSynchronize")
	}
	return c.takePending()
}

func (d *Device) StreamWaitEvent(_ context.Context, h backend.Ctx, s backend.Stream, e backend.Event, flags uint32) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	ev, ok := d.events[e]
	if !ok {
		return cu.Errorf(cu.ErrorInvalidHandle, "event %#x does not exist", uint64(e))
	}
	if flags&^1 != 0 { // CU_EVENT_WAIT_EXTERNAL
		return cu.Errorf(cu.ErrorInvalidValue, "stream wait flags %#x", flags)
	}
	if ev.pending > 0 {
		// The event's work is queued on a blocked stream: so is this
		// stream's, until the record runs.
		d.waitFor(c, s, func() bool { return ev.pending == 0 })
	}
	return nil // otherwise the event's work is complete
}

func (d *Device) EventCreate(_ context.Context, h backend.Ctx, flags uint32) (backend.Event, error) {
	if _, err := d.ctx(h); err != nil {
		return 0, err
	}
	if flags&^(eventBlockingSync|eventDisableTiming|eventInterprocess) != 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "event flags %#x", flags)
	}
	if flags&eventInterprocess != 0 && flags&eventDisableTiming == 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "an interprocess event must also disable timing")
	}
	e := backend.Event(d.newID())
	d.events[e] = &event{ctx: h, flags: flags}
	return e, nil
}

func (d *Device) event(h backend.Ctx, e backend.Event) (*context_, *event, error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, nil, err
	}
	ev, ok := d.events[e]
	if !ok {
		return nil, nil, cu.Errorf(cu.ErrorInvalidHandle, "event %#x does not exist", uint64(e))
	}
	return c, ev, nil
}

func (d *Device) EventDestroy(_ context.Context, h backend.Ctx, e backend.Event) error {
	if _, _, err := d.event(h, e); err != nil {
		return err
	}
	delete(d.events, e)
	return nil
}

// EventRecord timestamps the event now: every earlier piece of work on
// every stream has completed by this point.
func (d *Device) EventRecord(_ context.Context, h backend.Ctx, e backend.Event, s backend.Stream) error {
	c, ev, err := d.event(h, e)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	record := func() { ev.recorded, ev.at = true, time.Now() }
	if d.later(c, s, func() { ev.pending--; record() }) {
		ev.pending++
		return nil
	}
	record()
	d.pump()
	return nil
}

func (d *Device) EventQuery(_ context.Context, h backend.Ctx, e backend.Event) error {
	c, ev, err := d.event(h, e)
	if err != nil {
		return err
	}
	if ev.pending > 0 {
		d.pump()
		if ev.pending > 0 {
			return cu.ErrorNotReady
		}
	}
	return c.takePending()
}

func (d *Device) EventSynchronize(ctx context.Context, h backend.Ctx, e backend.Event) error {
	err := d.EventQuery(ctx, h, e)
	if cu.Code(err) == cu.ErrorNotReady {
		return errBlocked("cuEventSynchronize")
	}
	return err
}

// EventElapsedTime returns milliseconds between two recorded events, with
// CUDA's rules: both must be recorded and have timing enabled.
func (d *Device) EventElapsedTime(_ context.Context, h backend.Ctx, start, end backend.Event) (float32, error) {
	c, a, err := d.event(h, start)
	if err != nil {
		return 0, err
	}
	_, b, err := d.event(h, end)
	if err != nil {
		return 0, err
	}
	if a.flags&eventDisableTiming != 0 || b.flags&eventDisableTiming != 0 {
		return 0, cu.Errorf(cu.ErrorInvalidHandle, "event created with CU_EVENT_DISABLE_TIMING has no time")
	}
	if !a.recorded || !b.recorded {
		return 0, cu.Errorf(cu.ErrorInvalidHandle, "event was never recorded")
	}
	if err := c.takePending(); err != nil {
		return 0, err
	}
	return float32(b.at.Sub(a.at).Nanoseconds()) / 1e6, nil
}
