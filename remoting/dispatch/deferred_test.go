package dispatch

import (
	"bytes"
	"context"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// A deferred device-to-host copy is answered in order with the other
// replies; resent after a lost connection, it gets the data it read the
// first time, not what later work wrote since; a failure becomes the
// context's pending error.
func TestDeferredCopy(t *testing.T) {
	s := newSession(t)
	c, w, done := serve(t, s, context.Background())
	if w.Features&wire.FeatureDeferredReplies == 0 {
		t.Fatalf("welcome features %#x lack deferred replies", w.Features)
	}
	ctx := c.mustCtx()
	r, d, _ := c.call(wire.OpMemAlloc, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(4096) }), nil)
	if r != cu.Success {
		t.Fatal(r)
	}
	ptr := d.U64()
	copyArgs := func(p uint64) []byte { return enc(func(e *wire.Enc) { e.U64(ctx); e.U64(p); e.U64(8); e.U64(0) }) }
	first := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	c.send(wire.OpMemcpyHtoD, wire.FlagAsync, copyArgs(ptr), first)
	dtohSeq := c.send(wire.OpMemcpyDtoH, wire.FlagDeferred, copyArgs(ptr), nil)
	// Later work overwrites the source before anyone reads the reply.
	c.send(wire.OpMemcpyHtoD, wire.FlagAsync, copyArgs(ptr), bytes.Repeat([]byte{9}, 8))
	infoArgs := enc(func(e *wire.Enc) { e.U64(ctx) })
	infoSeq := c.send(wire.OpMemGetInfo, 0, infoArgs, nil)
	h, _, b := c.reply()
	if h.Seq != dtohSeq || cu.Result(h.Result) != cu.Success || !bytes.Equal(b, first) {
		t.Fatalf("first reply %+v data %v, want seq %d with %v", h, b, dtohSeq, first)
	}
	if h, _, _ := c.reply(); h.Seq != infoSeq {
		t.Fatalf("second reply answers seq %d, want %d (replies stay in order)", h.Seq, infoSeq)
	}
	executed := s.ExecutedSeq()
	c.c.Close()
	<-done

	// The client lost the copy's reply: it resends it with its number.
	c2, _, _ := serve(t, s, context.Background())
	c2.seq = executed
	if _, err := c2.c.Write(c2.frame(wire.OpMemcpyDtoH, wire.FlagDeferred, dtohSeq, copyArgs(ptr), nil)); err != nil {
		t.Fatal(err)
	}
	h, _, b = c2.reply()
	if h.Seq != dtohSeq || !bytes.Equal(b, first) {
		t.Fatalf("replayed reply %+v data %v, want %v as first read", h, b, first)
	}

	// A failing deferred copy is answered with its error and reported
	// again by the context's next synchronous call, once.
	bad := c2.send(wire.OpMemcpyDtoH, wire.FlagDeferred, copyArgs(0x10), nil)
	if h, _, _ := c2.reply(); h.Seq != bad || cu.Result(h.Result) == cu.Success {
		t.Fatalf("bad copy answered %+v", h)
	}
	for i, want := range []cu.Result{cu.ErrorInvalidValue, cu.Success} {
		if r, _, _ := c2.call(wire.OpMemGetInfo, infoArgs, nil); r != want {
			t.Errorf("sync call %d after the failed copy: %v, want %v", i, r, want)
		}
	}
}

// FlagDeferred is refused on anything but a device-to-host copy, and
// together with FlagAsync.
func TestDeferredRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		op    wire.Op
		flags uint16
	}{
		{"on another op", wire.OpMemGetInfo, wire.FlagDeferred},
		{"with async", wire.OpMemcpyDtoH, wire.FlagDeferred | wire.FlagAsync},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSession(t)
			c, _, done := serve(t, s, context.Background())
			c.send(tc.op, tc.flags, enc(func(e *wire.Enc) { e.U64(1) }), nil)
			if h, _, _ := c.reply(); h.Kind != wire.KindClosing {
				t.Fatalf("got %+v, want a closing notice", h)
			}
			if err := <-done; err == nil {
				t.Fatal("Serve went on after a protocol error")
			}
		})
	}
}
