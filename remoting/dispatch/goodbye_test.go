package dispatch

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// TestGoodbyeEndsServe: a goodbye sent right behind an asynchronous
// memset and a synchronous call (one write, as a client's flush sends
// them) is executed after both: the call is answered, the memset has
// reached device memory, Serve returns ErrGoodbye with the goodbye's
// sequence number executed, a request behind it is never executed, and
// the connection cannot be served on again.
func TestGoodbyeEndsServe(t *testing.T) {
	s := newSession(t)
	c, w, done := serve(t, s, context.Background())
	if w.Features&wire.FeatureGoodbye == 0 {
		t.Fatalf("welcome features %#x lack goodbye: clients would not send it", w.Features)
	}
	ctx := c.mustCtx()
	r, d, _ := c.call(wire.OpMemAlloc, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(4096) }), nil)
	if r != cu.Success {
		t.Fatal(r)
	}
	ptr := d.U64()

	var batch []byte
	c.seq++
	batch = append(batch, c.frame(wire.OpMemset, wire.FlagAsync, c.seq, enc(func(e *wire.Enc) {
		e.U64(ctx)
		e.U64(ptr)
		e.U32(0x5a)
		e.I32(1)
		e.U64(4096)
		e.U64(0)
	}), nil)...)
	c.seq++
	infoSeq := c.seq
	batch = append(batch, c.frame(wire.OpMemGetInfo, 0, c.seq, enc(func(e *wire.Enc) { e.U64(ctx) }), nil)...)
	c.seq++
	byeSeq := c.seq
	batch = append(batch, c.frame(wire.OpGoodbye, wire.FlagAsync, c.seq, nil, nil)...)
	c.seq++
	batch = append(batch, c.frame(wire.OpMemFree, 0, c.seq, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr) }), nil)...)
	if _, err := c.c.Write(batch); err != nil {
		t.Fatal(err)
	}
	h, _, _ := c.reply()
	if h.Kind != wire.KindReply || h.Seq != infoSeq || cu.Result(h.Result) != cu.Success {
		t.Fatalf("the call before the goodbye: got %+v, want the reply to seq %d", h, infoSeq)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrGoodbye) {
			t.Fatalf("Serve after a goodbye returned %v, want ErrGoodbye", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the client's goodbye")
	}
	if got := s.ExecutedSeq(); got != byeSeq {
		t.Fatalf("executed up to seq %d, want the goodbye's %d (nothing after it)", got, byeSeq)
	}
	var got bytes.Buffer
	if err := s.dev.MemcpyDtoH(context.Background(), backend.Ctx(ctx), &got, backend.DevPtr(ptr), 4096, 0); err != nil {
		t.Fatalf("the allocation is gone or unreadable after the goodbye (the request behind it ran?): %v", err)
	}
	for i, b := range got.Bytes() {
		if b != 0x5a {
			t.Fatalf("byte %d is %#x: the memset before the goodbye was not executed", i, b)
		}
	}
	_, sc := pipe(t)
	if err := s.Serve(context.Background(), sc, WelcomeInfo{}, true); !errors.Is(err, ErrNotResumable) {
		t.Fatalf("Serve(resume) on after a goodbye: %v, want ErrNotResumable", err)
	}
}
