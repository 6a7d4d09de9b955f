package dispatch

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// Changes counts what may change the worker's host state, and only that:
// copies, waits and queries keep it, launches are counted apart, and
// everything else (allocations, streams, modules) changes it.
func TestChanges(t *testing.T) {
	s := newSession(t)
	c, _, _ := serve(t, s, context.Background())
	ctx := c.mustCtx()
	ch0, _ := s.Changes()
	if ch0 == 0 {
		t.Fatal("creating a context counted as no change")
	}
	_, d, _ := c.call(wire.OpMemAlloc, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(4096) }), nil)
	ptr := d.U64()
	after, _ := s.Changes()
	if after != ch0+1 {
		t.Fatalf("an allocation counted %d changes, want 1", after-ch0)
	}
	keeps := []struct {
		op   wire.Op
		args []byte
		bulk []byte
	}{
		{wire.OpMemcpyHtoD, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4); e.U64(0) }), []byte{1, 2, 3, 4}},
		{wire.OpMemcpyDtoH, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4); e.U64(0) }), nil},
		{wire.OpMemset, enc(func(e *wire.Enc) {
			e.U64(ctx)
			e.U64(ptr)
			e.U32(7)
			e.I32(1)
			e.U64(16)
			e.U64(0)
		}), nil},
		{wire.OpCtxSynchronize, enc(func(e *wire.Enc) { e.U64(ctx) }), nil},
		{wire.OpMemGetInfo, enc(func(e *wire.Enc) { e.U64(ctx) }), nil},
		{wire.OpDeviceCount, nil, nil},
	}
	for _, k := range keeps {
		if r, _, _ := c.call(k.op, k.args, k.bulk); r != cu.Success {
			t.Fatalf("%s: %v", k.op, r)
		}
	}
	if got, _ := s.Changes(); got != after {
		t.Fatalf("copies, waits and queries counted %d changes, want none", got-after)
	}
	if r, _, _ := c.call(wire.OpStreamCreate, enc(func(e *wire.Enc) { e.U64(ctx); e.U32(0); e.I32(0) }), nil); r != cu.Success {
		t.Fatalf("StreamCreate: %v", r)
	}
	if got, _ := s.Changes(); got != after+1 {
		t.Fatalf("a stream's creation counted %d changes, want 1", got-after)
	}
}

// A session's protocol state exported and imported into another session
// (a worker restored from an older dump) makes that session answer as the
// first would: its executed sequence number, a resent request's cached
// reply, an asynchronous failure not yet reported.
func TestStateRoundTrip(t *testing.T) {
	s := newSession(t)
	c, _, done := serve(t, s, context.Background())
	ctx := c.mustCtx()
	allocArgs := enc(func(e *wire.Enc) { e.U64(ctx); e.U64(4096) })
	allocSeq := c.send(wire.OpMemAlloc, 0, allocArgs, nil)
	_, p, _ := c.reply()
	ptr := wire.NewDec(p).U64()
	// An async copy out of bounds fails; its error waits for the next
	// synchronous call of the context.
	c.send(wire.OpMemcpyHtoD, wire.FlagAsync, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr + 1<<30); e.U64(4); e.U64(0) }), []byte{1, 1, 1, 1})
	c.call(wire.OpDeviceCount, nil, nil) // no context: the error stays pending
	s.Stop()
	<-done

	st := s.ExportState()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	var back State
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Pending) != 1 || back.Executed != s.ExecutedSeq() || len(back.Replies) == 0 {
		t.Fatalf("exported state: executed %d (want %d), %d pending, %d replies", back.Executed, s.ExecutedSeq(), len(back.Pending), len(back.Replies))
	}

	// The other session shares the device (the restored worker's device
	// is the dump's, with the same allocations).
	s2 := NewSession(s.dev, nil)
	if err := s2.ImportState(back); err != nil {
		t.Fatal(err)
	}
	if s2.ExecutedSeq() != s.ExecutedSeq() {
		t.Fatalf("imported executed %d, want %d", s2.ExecutedSeq(), s.ExecutedSeq())
	}
	ch, _ := s2.Changes()
	if ch != 0 {
		t.Fatalf("an import counted %d changes", ch)
	}
	c2, w, _ := serve(t, s2, context.Background())
	if w.LastExecuted != s.ExecutedSeq() {
		t.Fatalf("welcome says executed %d, want %d", w.LastExecuted, s.ExecutedSeq())
	}
	c2.seq = w.LastExecuted
	// The allocation's reply, resent, comes from the imported cache.
	if _, err := c2.c.Write(c2.frame(wire.OpMemAlloc, 0, allocSeq, allocArgs, nil)); err != nil {
		t.Fatal(err)
	}
	h, p2, _ := c2.reply()
	if h.Seq != allocSeq || wire.NewDec(p2).U64() != ptr {
		t.Fatalf("resent allocation: %+v, want the cached reply with %#x", h, ptr)
	}
	// The pending failure is reported by the context's next call.
	if r, _, _ := c2.call(wire.OpCtxSynchronize, enc(func(e *wire.Enc) { e.U64(ctx) }), nil); r == cu.Success {
		t.Fatal("the imported pending failure was not reported")
	}
	if r, _, _ := c2.call(wire.OpCtxSynchronize, enc(func(e *wire.Enc) { e.U64(ctx) }), nil); r != cu.Success {
		t.Fatalf("second sync: %v; the failure is reported once", r)
	}
	_, _, data := c2.call(wire.OpMemcpyDtoH, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4); e.U64(0) }), nil)
	if !bytes.Equal(data, []byte{0, 0, 0, 0}) {
		t.Fatalf("memory %v", data)
	}
}

// A state that claims more than a session keeps is refused whole.
func TestImportStateBounds(t *testing.T) {
	s := newSession(t)
	st := State{Executed: 9, Replies: make([]CachedReply, replyCacheSize+1)}
	if err := s.ImportState(st); err == nil {
		t.Fatal("a state with too many replies was imported")
	}
	big := State{Deferred: []CachedReply{{Seq: 1, Frame: make([]byte, deferredKeepMax+1024)}}}
	if err := s.ImportState(big); err == nil {
		t.Fatal("a state with an oversized deferred reply was imported")
	}
	if s.ExecutedSeq() != 0 {
		t.Fatalf("a refused import changed the session: executed %d", s.ExecutedSeq())
	}
}
