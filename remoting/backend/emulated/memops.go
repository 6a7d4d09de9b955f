package emulated

import (
	"context"
	"encoding/binary"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Stream memory operations, and the one case where work on this device
// does not complete when the call that submits it returns: a stream
// waiting on a value (cuStreamWaitValue32/64) that is not there yet. Such
// a stream is blocked: its later work is queued behind the wait and runs
// when work on another stream writes the value (pump). An event recorded
// on a blocked stream stays pending, and a stream that waits on a pending
// event blocks too.
//
// A synchronous call that would have to wait for a blocked stream (a
// stream or event synchronisation, a copy to the host) fails with
// CUDA_ERROR_ILLEGAL_STATE instead: only work submitted later could
// unblock it, and the caller is the one who would submit it, so a GPU
// would wait forever. Work on the legacy default stream does not wait for
// other blocked streams.

// blockQ is a blocked stream's queue: the condition the stream waits for,
// and the work submitted after it, in order.
type blockQ struct {
	wait  func() bool
	queue []func()
}

func (q *blockQ) busy() bool { return q.wait != nil || len(q.queue) > 0 }

func (d *Device) queueOf(c *context_, s backend.Stream) *blockQ {
	if st, ok := d.streams[s]; ok {
		return &st.q
	}
	return &c.defQ
}

// later queues fn behind the wait that stream s of c is blocked on, and
// reports whether it did; when the stream is not blocked the caller runs
// the work itself, at once.
func (d *Device) later(c *context_, s backend.Stream, fn func()) bool {
	if len(d.blocked) == 0 {
		return false
	}
	q := d.queueOf(c, s)
	if !q.busy() {
		return false
	}
	q.queue = append(q.queue, fn)
	return true
}

// waitFor makes stream s of c wait until cond holds.
func (d *Device) waitFor(c *context_, s backend.Stream, cond func() bool) {
	q := d.queueOf(c, s)
	block := func() {
		if !cond() {
			q.wait = cond
			d.blocked[q] = c
		}
	}
	if q.busy() {
		q.queue = append(q.queue, block)
		return
	}
	block()
}

// pump runs the work of blocked streams whose condition now holds, until
// nothing more can run.
func (d *Device) pump() {
	for progress := true; progress && len(d.blocked) > 0; {
		progress = false
		for q := range d.blocked {
			for q.wait != nil && q.wait() {
				q.wait = nil
				progress = true
				for len(q.queue) > 0 && q.wait == nil {
					fn := q.queue[0]
					q.queue[0] = nil
					q.queue = q.queue[1:]
					fn()
				}
			}
			if !q.busy() {
				delete(d.blocked, q)
			}
		}
	}
}

// deferredCopy writes b to device address dst for work that ran after a
// wait: the memory is looked up again, since it may have been freed since
// the work was queued, and a copy to memory that is gone fails the
// context as a fault would.
func (d *Device) deferredCopy(c *context_, dst uint64, b []byte) {
	to, err := d.mem.slice(dst, uint64(len(b)))
	if err != nil {
		c.fail(cu.Errorf(cu.ErrorIllegalAddress, "queued copy to %#x: %v", dst, err))
		return
	}
	copy(to, b)
}

// errBlocked is the failure of a synchronous call that would wait for a
// blocked stream forever.
func errBlocked(what string) error {
	return cu.Errorf(cu.ErrorIllegalState, "%s waits for a stream blocked on a value or event that no submitted work will provide", what)
}

// drained pumps and reports whether stream s of c has no queued work.
func (d *Device) drained(c *context_, s backend.Stream) bool {
	if len(d.blocked) == 0 {
		return true
	}
	d.pump()
	return !d.queueOf(c, s).busy()
}

// ctxDrained pumps and reports whether no stream of c is blocked.
func (d *Device) ctxDrained(c *context_) bool {
	if len(d.blocked) == 0 {
		return true
	}
	d.pump()
	for _, cc := range d.blocked {
		if cc == c {
			return false
		}
	}
	return true
}

// CUstreamWaitValue_flags and CUstreamBatchMemOpType values.
const (
	waitGEQ   = 0
	waitEQ    = 1
	waitAND   = 2
	waitNOR   = 3
	waitFlush = 1 << 30

	memOpWait32  = 1
	memOpWrite32 = 2
	memOpFlush   = 3
	memOpWait64  = 4
	memOpWrite64 = 5
	memOpBarrier = 6
)

func (d *Device) memOpTarget(addr backend.DevPtr, width uint32) error {
	if width != 32 && width != 64 {
		return cu.Errorf(cu.ErrorInvalidValue, "stream memory operation of %d bits (32 or 64)", width)
	}
	if uint64(addr)%uint64(width/8) != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "stream memory operation at %#x: not aligned to %d bytes", uint64(addr), width/8)
	}
	_, err := d.mem.slice(uint64(addr), uint64(width/8))
	return err
}

// condition returns the test of a stream wait.
func (d *Device) condition(c *context_, addr backend.DevPtr, value uint64, flags, width uint32) func() bool {
	return func() bool {
		b, err := d.mem.slice(uint64(addr), uint64(width/8))
		if err != nil {
			// The memory went away under the wait: fail the context and
			// let the stream go on.
			c.fail(cu.Errorf(cu.ErrorIllegalAddress, "stream wait on %#x: %v", uint64(addr), err))
			return true
		}
		var v uint64
		if width == 32 {
			v = uint64(binary.LittleEndian.Uint32(b))
		} else {
			v = binary.LittleEndian.Uint64(b)
		}
		switch flags &^ waitFlush {
		case waitGEQ:
			if width == 32 {
				return int32(uint32(v)-uint32(value)) >= 0
			}
			return int64(v-value) >= 0
		case waitEQ:
			return v == value
		case waitAND:
			return v&value != 0
		default: // waitNOR
			m := ^(v | value)
			if width == 32 {
				m &= 0xffffffff
			}
			return m != 0
		}
	}
}

func (d *Device) StreamWaitValue(_ context.Context, h backend.Ctx, s backend.Stream, addr backend.DevPtr, value uint64, flags, width uint32) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	if err := d.memOpTarget(addr, width); err != nil {
		return err
	}
	if flags&^waitFlush > waitNOR {
		return cu.Errorf(cu.ErrorInvalidValue, "stream wait flags %#x", flags)
	}
	d.waitFor(c, s, d.condition(c, addr, value, flags, width))
	return nil
}

func (d *Device) writeValue(addr backend.DevPtr, value uint64, width uint32) {
	b, err := d.mem.slice(uint64(addr), uint64(width/8))
	if err != nil {
		return // checked at submission; freed since (CUDA's behaviour is undefined)
	}
	if width == 32 {
		binary.LittleEndian.PutUint32(b, uint32(value))
	} else {
		binary.LittleEndian.PutUint64(b, value)
	}
}

func (d *Device) StreamWriteValue(_ context.Context, h backend.Ctx, s backend.Stream, addr backend.DevPtr, value uint64, flags, width uint32) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	if err := d.memOpTarget(addr, width); err != nil {
		return err
	}
	if flags&^1 != 0 { // CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER
		return cu.Errorf(cu.ErrorInvalidValue, "stream write flags %#x", flags)
	}
	if d.later(c, s, func() { d.writeValue(addr, value, width) }) {
		return nil
	}
	d.writeValue(addr, value, width)
	d.pump()
	return nil
}

func (d *Device) StreamBatchMemOp(ctx context.Context, h backend.Ctx, s backend.Stream, flags uint32, ops []backend.MemOp) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	if flags != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "batch memory operation flags %#x", flags)
	}
	for _, op := range ops {
		switch op.Type {
		case memOpWait32, memOpWrite32:
			err = d.memOpTarget(op.Addr, 32)
		case memOpWait64, memOpWrite64:
			err = d.memOpTarget(op.Addr, 64)
		case memOpFlush, memOpBarrier:
		default:
			err = cu.Errorf(cu.ErrorInvalidValue, "batch memory operation type %d", op.Type)
		}
		if err != nil {
			return err
		}
	}
	// Each operation is submitted in order, exactly as the separate calls
	// would be: a wait blocks the operations after it.
	for _, op := range ops {
		switch op.Type {
		case memOpWait32:
			err = d.StreamWaitValue(ctx, h, s, op.Addr, op.Value, op.Flags, 32)
		case memOpWait64:
			err = d.StreamWaitValue(ctx, h, s, op.Addr, op.Value, op.Flags, 64)
		case memOpWrite32:
			err = d.StreamWriteValue(ctx, h, s, op.Addr, op.Value, op.Flags&1, 32)
		case memOpWrite64:
			err = d.StreamWriteValue(ctx, h, s, op.Addr, op.Value, op.Flags&1, 64)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
