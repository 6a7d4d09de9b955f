package dispatch

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// tclient speaks the protocol from the client side, frame by frame.
type tclient struct {
	t   *testing.T
	c   net.Conn
	br  *bufio.Reader
	seq uint64
}

func pipe(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-ch
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// serve runs s on a fresh connection and returns the client side, after
// reading the Welcome, and a channel with Serve's result.
func serve(t *testing.T, s *Session, ctx context.Context) (*tclient, *wire.Welcome, chan error) {
	t.Helper()
	cc, sc := pipe(t)
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, sc, WelcomeInfo{SessionID: "s-test", Secret: "sec"}, false) }()
	tc := &tclient{t: t, c: cc, br: bufio.NewReader(cc)}
	w, err := wire.ReadWelcome(tc.br)
	if err != nil {
		t.Fatal(err)
	}
	return tc, w, done
}

func newSession(t *testing.T) *Session {
	t.Helper()
	dev := emulated.New(emulated.Config{MemBytes: 64 << 20, Seed: "dispatch-test"})
	t.Cleanup(func() { dev.Close() })
	return NewSession(dev, nil)
}

func (c *tclient) frame(op wire.Op, flags uint16, seq uint64, args, bulk []byte) []byte {
	b := make([]byte, wire.RequestHeaderSize, wire.RequestHeaderSize+len(args)+len(bulk))
	(&wire.RequestHeader{Len: uint32(len(args)), Op: op, Flags: flags, Seq: seq, Bulk: uint64(len(bulk))}).Put(b)
	return append(append(b, args...), bulk...)
}

func (c *tclient) send(op wire.Op, flags uint16, args, bulk []byte) uint64 {
	c.t.Helper()
	c.seq++
	if _, err := c.c.Write(c.frame(op, flags, c.seq, args, bulk)); err != nil {
		c.t.Fatal(err)
	}
	return c.seq
}

func (c *tclient) reply() (wire.ReplyHeader, []byte, []byte) {
	c.t.Helper()
	c.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	var hb [wire.ReplyHeaderSize]byte
	if _, err := io.ReadFull(c.br, hb[:]); err != nil {
		c.t.Fatalf("read reply: %v", err)
	}
	h, err := wire.DecodeReplyHeader(hb[:], wire.DefaultMaxFrame)
	if err != nil {
		c.t.Fatal(err)
	}
	p := make([]byte, h.Len)
	io.ReadFull(c.br, p)
	bulk := make([]byte, h.Bulk)
	io.ReadFull(c.br, bulk)
	return h, p, bulk
}

func (c *tclient) call(op wire.Op, args []byte, bulk []byte) (cu.Result, *wire.Dec, []byte) {
	c.t.Helper()
	seq := c.send(op, 0, args, bulk)
	h, p, b := c.reply()
	if h.Kind != wire.KindReply || h.Seq != seq {
		c.t.Fatalf("%s: got %+v for seq %d", op, h, seq)
	}
	return cu.Result(h.Result), wire.NewDec(p), b
}

func enc(f func(e *wire.Enc)) []byte {
	var e wire.Enc
	f(&e)
	return e.B
}

func (c *tclient) mustCtx() uint64 {
	r, d, _ := c.call(wire.OpCtxCreate, enc(func(e *wire.Enc) { e.I32(0); e.U32(0) }), nil)
	if r != cu.Success {
		c.t.Fatalf("CtxCreate: %v", r)
	}
	return d.U64()
}

func TestServeCalls(t *testing.T) {
	s := newSession(t)
	c, w, _ := serve(t, s, context.Background())
	if w.Status != wire.StatusOK || w.SessionID != "s-test" || w.Secret != "sec" || w.LastExecuted != 0 {
		t.Fatalf("welcome %+v", w)
	}
	ctx := c.mustCtx()
	r, d, _ := c.call(wire.OpMemAlloc, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(4096) }), nil)
	if r != cu.Success {
		t.Fatal(r)
	}
	ptr := d.U64()
	data := bytes.Repeat([]byte{1, 2, 3, 4}, 1024)

	tests := []struct {
		name     string
		op       wire.Op
		args     []byte
		bulk     []byte
		want     cu.Result
		wantBulk []byte
	}{
		{"device count", wire.OpDeviceCount, nil, nil, cu.Success, nil},
		{"copy in", wire.OpMemcpyHtoD, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4096); e.U64(0) }), data, cu.Success, nil},
		{"copy out", wire.OpMemcpyDtoH, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4096); e.U64(0) }), nil, cu.Success, data},
		{"copy out of range", wire.OpMemcpyDtoH, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(1 << 20); e.U64(0) }), nil, cu.ErrorInvalidValue, nil},
		{"copy in, size disagrees with payload", wire.OpMemcpyHtoD, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(8); e.U64(0) }), data[:4], cu.ErrorInvalidValue, nil},
		{"unknown op", wire.Op(4000), []byte{1, 2, 3}, []byte{4, 5}, cu.ErrorNotSupported, nil},
		{"short arguments", wire.OpMemAlloc, []byte{1, 2, 3}, nil, cu.ErrorInvalidValue, nil},
		{"trailing arguments", wire.OpDeviceCount, []byte{1}, nil, cu.ErrorInvalidValue, nil},
		{"invalid context", wire.OpMemAlloc, enc(func(e *wire.Enc) { e.U64(0xbad); e.U64(16) }), nil, cu.ErrorInvalidContext, nil},
		{"invalid event", wire.OpEventQuery, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(0xbad) }), nil, cu.ErrorInvalidHandle, nil},
		{"out of memory", wire.OpMemAlloc, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(1 << 50) }), nil, cu.ErrorOutOfMemory, nil},
		{"empty image", wire.OpModuleLoad, enc(func(e *wire.Enc) { e.U64(ctx) }), nil, cu.ErrorInvalidImage, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c.t = t
			r, _, b := c.call(tc.op, tc.args, tc.bulk)
			if r != tc.want {
				t.Errorf("result %v, want %v", r, tc.want)
			}
			if !bytes.Equal(b, tc.wantBulk) && !(len(b) == 0 && len(tc.wantBulk) == 0) {
				t.Errorf("bulk of %d bytes, want %d", len(b), len(tc.wantBulk))
			}
		})
	}
}

// An asynchronous failure is reported once, by the next synchronous call
// of the same context.
func TestPendingAsyncError(t *testing.T) {
	s := newSession(t)
	c, _, _ := serve(t, s, context.Background())
	ctx := c.mustCtx()
	other := c.mustCtx()
	memset := enc(func(e *wire.Enc) {
		e.U64(ctx)
		e.U64(0x10)
		e.U32(1)
		e.I32(4)
		e.U64(4)
		e.U64(0)
	})
	c.send(wire.OpMemset, wire.FlagAsync, memset, nil)
	info := func(cx uint64) []byte { return enc(func(e *wire.Enc) { e.U64(cx) }) }
	steps := []struct {
		name string
		ctx  uint64
		want cu.Result
	}{
		{"other context unaffected", other, cu.Success},
		{"reported", ctx, cu.ErrorInvalidValue},
		{"reported once", ctx, cu.Success},
	}
	for _, st := range steps {
		if r, _, _ := c.call(wire.OpMemGetInfo, info(st.ctx), nil); r != st.want {
			t.Errorf("%s: %v, want %v", st.name, r, st.want)
		}
	}
}

// A request resent after a reconnect runs exactly once: a synchronous one
// gets its cached reply, an asynchronous one is skipped.
func TestReplayExactlyOnce(t *testing.T) {
	s := newSession(t)
	c, _, done := serve(t, s, context.Background())
	ctx := c.mustCtx()
	allocArgs := enc(func(e *wire.Enc) { e.U64(ctx); e.U64(4096) })
	allocSeq := c.send(wire.OpMemAlloc, 0, allocArgs, nil)
	_, p, _ := c.reply()
	ptr := wire.NewDec(p).U64()
	htod := func() []byte { return enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4); e.U64(0) }) }
	asyncSeq := c.send(wire.OpMemcpyHtoD, wire.FlagAsync, htod(), []byte{1, 1, 1, 1})
	if r, _, _ := c.call(wire.OpMemcpyHtoD, htod(), []byte{2, 2, 2, 2}); r != cu.Success {
		t.Fatal(r)
	}
	infoArgs := enc(func(e *wire.Enc) { e.U64(ctx) })
	_, d, _ := c.call(wire.OpMemGetInfo, infoArgs, nil)
	free := d.U64()
	executed := s.ExecutedSeq()
	c.c.Close()
	<-done

	c2, w, _ := serve(t, s, context.Background())
	if w.LastExecuted != executed {
		t.Fatalf("welcome says executed %d, want %d", w.LastExecuted, executed)
	}
	c2.seq = executed
	// Resend the allocation and the async copy with their old numbers.
	if _, err := c2.c.Write(append(c2.frame(wire.OpMemAlloc, 0, allocSeq, allocArgs, nil),
		c2.frame(wire.OpMemcpyHtoD, wire.FlagAsync, asyncSeq, htod(), []byte{1, 1, 1, 1})...)); err != nil {
		t.Fatal(err)
	}
	h, p2, _ := c2.reply()
	if h.Seq != allocSeq || cu.Result(h.Result) != cu.Success || wire.NewDec(p2).U64() != ptr {
		t.Fatalf("replayed allocation: %+v ptr %#x, want the cached reply with %#x", h, wire.NewDec(p2).U64(), ptr)
	}
	_, d, _ = c2.call(wire.OpMemGetInfo, infoArgs, nil)
	if got := d.U64(); got != free {
		t.Errorf("free memory %d after replay, want %d: the allocation ran twice", got, free)
	}
	_, _, b := c2.call(wire.OpMemcpyDtoH, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4); e.U64(0) }), nil)
	if !bytes.Equal(b, []byte{2, 2, 2, 2}) {
		t.Errorf("memory %v: the resent async copy ran again", b)
	}
}

// Stop interrupts a blocked read at a frame boundary; a half-received
// frame is kept and finished when the same connection is served again.
func TestStopAndResume(t *testing.T) {
	s := newSession(t)
	cc, sc := pipe(t)
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), sc, WelcomeInfo{SessionID: "s"}, false) }()
	c := &tclient{t: t, c: cc, br: bufio.NewReader(cc)}
	if _, err := wire.ReadWelcome(c.br); err != nil {
		t.Fatal(err)
	}
	c.mustCtx()
	f := c.frame(wire.OpDeviceCount, 0, 2, nil, nil)
	c.seq = 2
	cc.Write(f[:10])
	time.Sleep(50 * time.Millisecond)
	s.Stop()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("Serve returned %v, want ErrStopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not interrupt Serve")
	}
	if s.ExecutedSeq() != 1 {
		t.Fatalf("executed %d, want 1", s.ExecutedSeq())
	}
	go func() { done <- s.Serve(context.Background(), sc, WelcomeInfo{}, true) }()
	cc.Write(f[10:])
	h, p, _ := c.reply()
	if h.Seq != 2 || cu.Result(h.Result) != cu.Success || wire.NewDec(p).I32() < 1 {
		t.Fatalf("resumed frame: %+v", h)
	}
	s.Stop()
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Fatalf("second Serve: %v", err)
	}
}

// A Stop issued as Serve starts, with the connection registered and
// nothing read yet (failpoint "dispatch/serve"), ends that Serve with
// ErrStopped, not with a read timeout: the socket can be served on, and
// the half-sent frame waiting in it is completed and answered.
func TestStopAsServeStarts(t *testing.T) {
	s := newSession(t)
	cc, sc := pipe(t)
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), sc, WelcomeInfo{SessionID: "s"}, false) }()
	c := &tclient{t: t, c: cc, br: bufio.NewReader(cc)}
	if _, err := wire.ReadWelcome(c.br); err != nil {
		t.Fatal(err)
	}
	c.mustCtx()
	s.Stop()
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Fatalf("first Serve: %v", err)
	}

	var fp failpoint.Set
	gate := failpoint.NewGate()
	fp.On("dispatch/serve", gate.Hook)
	go func() { done <- s.Serve(failpoint.With(context.Background(), &fp), sc, WelcomeInfo{}, true) }()
	select {
	case <-gate.Reached():
	case err := <-done:
		t.Fatalf("Serve ended before reaching dispatch/serve: %v", err)
	}
	f := c.frame(wire.OpDeviceCount, 0, 2, nil, nil)
	c.seq = 2
	cc.Write(f[:10])
	s.Stop()
	gate.Release()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopped) {
			t.Fatalf("Serve stopped as it started returned %v, want ErrStopped", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a Stop issued as Serve started was lost")
	}
	go func() { done <- s.Serve(context.Background(), sc, WelcomeInfo{}, true) }()
	cc.Write(f[10:])
	if h, _, _ := c.reply(); h.Seq != 2 || cu.Result(h.Result) != cu.Success {
		t.Fatalf("the frame completed after the stop: %+v", h)
	}
	s.Stop()
	<-done
}

// A Serve that ended other than at a frame boundary (here its context
// ended) left its socket in an unknown place: serving it on with
// resume=true is refused at once, and a new connection is served.
func TestResumeRefusedAfterUncleanEnd(t *testing.T) {
	s := newSession(t)
	ctx, cancel := context.WithCancel(context.Background())
	c, _, done := serve(t, s, ctx)
	c.mustCtx()
	cancel()
	if err := <-done; errors.Is(err, ErrStopped) || err == nil {
		t.Fatalf("Serve after its context ended: %v", err)
	}
	_, sc := pipe(t)
	if err := s.Serve(context.Background(), sc, WelcomeInfo{}, true); !errors.Is(err, ErrNotResumable) {
		t.Fatalf("resume after an unclean end: %v, want ErrNotResumable", err)
	}
	c2, w, _ := serve(t, s, context.Background())
	if w.LastExecuted != 1 {
		t.Fatalf("new connection's Welcome says %d executed, want 1", w.LastExecuted)
	}
	c2.seq = 1
	if r, _, _ := c2.call(wire.OpDeviceCount, nil, nil); r != cu.Success {
		t.Fatalf("new connection after a refused resume: %v", r)
	}
}

// Malformed framing closes only that connection, with a Closing notice;
// the session survives for the next one.
func TestProtocolErrorClosesConnection(t *testing.T) {
	s := newSession(t)
	tests := []struct {
		name string
		hdr  wire.RequestHeader
	}{
		{"oversized frame", wire.RequestHeader{Len: wire.DefaultMaxFrame + 1, Op: wire.OpLaunch, Seq: 100}},
		{"unknown flags", wire.RequestHeader{Op: wire.OpDeviceCount, Flags: 0x40, Seq: 100}},
		{"sync op sent async", wire.RequestHeader{Op: wire.OpMemAlloc, Flags: wire.FlagAsync, Seq: 100}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, _, done := serve(t, s, context.Background())
			var b [wire.RequestHeaderSize]byte
			tc.hdr.Put(b[:])
			c.c.Write(b[:])
			h, p, _ := c.reply()
			if h.Kind != wire.KindClosing || len(p) == 0 {
				t.Fatalf("got %+v %q, want a closing notice", h, p)
			}
			if err := <-done; !errors.Is(err, wire.ErrProtocol) {
				t.Fatalf("Serve: %v", err)
			}
		})
	}
	c, _, _ := serve(t, s, context.Background())
	c.seq = s.ExecutedSeq()
	if r, _, _ := c.call(wire.OpDeviceCount, nil, nil); r != cu.Success {
		t.Fatalf("session unusable after a protocol error: %v", r)
	}
}

func TestServeEndsWithContext(t *testing.T) {
	s := newSession(t)
	ctx, cancel := context.WithCancel(context.Background())
	_, _, done := serve(t, s, ctx)
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve ignored its context")
	}
}

// fuzzConn feeds a byte string to Serve and discards its replies.
type fuzzConn struct {
	r *bytes.Reader
	net.Conn
}

func (f *fuzzConn) Read(p []byte) (int, error)       { return f.r.Read(p) }
func (f *fuzzConn) Write(p []byte) (int, error)      { return len(p), nil }
func (f *fuzzConn) SetReadDeadline(time.Time) error  { return nil }
func (f *fuzzConn) SetWriteDeadline(time.Time) error { return nil }
func (f *fuzzConn) Close() error                     { return nil }

// FuzzServe feeds arbitrary client streams to a session: it must end with
// an error, never panic or hang.
func FuzzServe(f *testing.F) {
	var c tclient
	ctxCreate := c.frame(wire.OpCtxCreate, 0, 1, enc(func(e *wire.Enc) { e.I32(0); e.U32(0) }), nil)
	f.Add(ctxCreate)
	f.Add(append(ctxCreate, c.frame(wire.OpMemAlloc, 0, 2, enc(func(e *wire.Enc) { e.U64(1); e.U64(64) }), nil)...))
	f.Add(c.frame(wire.OpLaunch, wire.FlagAsync, 1, bytes.Repeat([]byte{0xff}, 60), nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		dev := emulated.New(emulated.Config{MemBytes: 16 << 20, Cores: 1})
		defer dev.Close()
		s := NewSession(backend.Device(dev), nil)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := s.Serve(ctx, &fuzzConn{r: bytes.NewReader(b)}, WelcomeInfo{}, false)
		if err == nil {
			t.Fatal("Serve returned nil at the end of its input")
		}
		if ctx.Err() != nil {
			t.Fatal("Serve did not finish its input in time")
		}
	})
}

// The reply cache keys by sequence number; the client's numbers have gaps
// (ring positions), so entries whose numbers agree modulo the cache size
// must not evict each other.
func TestReplyCache(t *testing.T) {
	var c replyCache
	for i := range uint64(replyCacheSize) {
		c.put(1+i*replyCacheSize, []byte{byte(i), byte(i >> 8)})
	}
	tests := []struct {
		seq  uint64
		want []byte
	}{
		{1, []byte{0, 0}},
		{1 + 5*replyCacheSize, []byte{5, 0}},
		{1 + (replyCacheSize-1)*replyCacheSize, []byte{(replyCacheSize - 1) & 0xff, (replyCacheSize - 1) >> 8}},
		{2, nil},
	}
	for _, tc := range tests {
		if got := c.get(tc.seq); !bytes.Equal(got, tc.want) {
			t.Errorf("get(%d) = %v, want %v", tc.seq, got, tc.want)
		}
	}
	c.put(7, []byte{7})
	if c.get(1) != nil || !bytes.Equal(c.get(7), []byte{7}) || len(c.m) != replyCacheSize {
		t.Errorf("eviction: oldest %v, newest %v, %d entries", c.get(1), c.get(7), len(c.m))
	}
}

// LaunchEx carries clusters and the cooperative flag to the backend; the
// emulated device runs a 1×1×1 cluster as a plain launch and refuses
// larger clusters and cooperative launches, and bad arguments are refused
// before the backend sees them.
func TestLaunchEx(t *testing.T) {
	s := newSession(t)
	c, _, _ := serve(t, s, context.Background())
	ctx := c.mustCtx()
	ptx := []byte(".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry empty()\n{\n  ret;\n}\n")
	r, d, _ := c.call(wire.OpModuleLoad, enc(func(e *wire.Enc) { e.U64(ctx) }), ptx)
	if r != cu.Success {
		t.Fatalf("module load: %v", r)
	}
	mod := d.U64()
	r, d, _ = c.call(wire.OpModuleGetFunction, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(mod); e.Str("empty") }), nil)
	if r != cu.Success {
		t.Fatalf("get function: %v", r)
	}
	fn := d.U64()
	launch := func(grid, cluster [3]uint32, flags uint32) []byte {
		return enc(func(e *wire.Enc) {
			e.U64(ctx)
			e.U64(fn)
			for _, v := range grid {
				e.U32(v)
			}
			e.U32(32) // block
			e.U32(1)
			e.U32(1)
			e.U32(0) // shared
			e.U64(0) // stream
			for _, v := range cluster {
				e.U32(v)
			}
			e.U32(flags)
			e.Bytes(nil)
		})
	}
	for _, tc := range []struct {
		name          string
		grid, cluster [3]uint32
		flags         uint32
		want          cu.Result
	}{
		{"no cluster", [3]uint32{4, 1, 1}, [3]uint32{1, 1, 1}, 0, cu.Success},
		{"cluster of 2", [3]uint32{4, 1, 1}, [3]uint32{2, 1, 1}, 0, cu.ErrorNotSupported},
		{"cooperative", [3]uint32{4, 1, 1}, [3]uint32{1, 1, 1}, 1, cu.ErrorNotSupported},
		{"zero cluster dimension", [3]uint32{4, 1, 1}, [3]uint32{0, 1, 1}, 0, cu.ErrorInvalidValue},
		{"unknown flag", [3]uint32{4, 1, 1}, [3]uint32{1, 1, 1}, 2, cu.ErrorInvalidValue},
	} {
		if r, _, _ := c.call(wire.OpLaunchEx, launch(tc.grid, tc.cluster, tc.flags), nil); r != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, r, tc.want)
		}
	}
}

// slowDevice pauses in the middle of every device-to-host copy, with half
// of the data written, and in every context synchronise.
type slowDevice struct {
	*emulated.Device
	pause time.Duration
}

func (d slowDevice) halves(dst io.Writer, copyAll func(io.Writer) error) error {
	var all bytes.Buffer
	if err := copyAll(&all); err != nil {
		return err
	}
	b := all.Bytes()
	if _, err := dst.Write(b[:len(b)/2]); err != nil {
		return err
	}
	time.Sleep(d.pause)
	_, err := dst.Write(b[len(b)/2:])
	return err
}

func (d slowDevice) MemcpyDtoH(ctx context.Context, c backend.Ctx, dst io.Writer, src backend.DevPtr, n uint64, s backend.Stream) error {
	return d.halves(dst, func(w io.Writer) error { return d.Device.MemcpyDtoH(ctx, c, w, src, n, s) })
}

func (d slowDevice) MemcpyDtoH3D(ctx context.Context, c backend.Ctx, dst io.Writer, src backend.Pitched, e backend.Extent, s backend.Stream) error {
	return d.halves(dst, func(w io.Writer) error { return d.Device.MemcpyDtoH3D(ctx, c, w, src, e, s) })
}

func (d slowDevice) CtxSynchronize(ctx context.Context, c backend.Ctx) error {
	time.Sleep(d.pause)
	return d.Device.CtxSynchronize(ctx, c)
}

// With keepalives on, a call that runs long has keepalives sent before
// its reply, but an op whose reply is a bulk payload, streamed as the
// device produces it, keeps the writer to itself: a keepalive never lands
// inside its data, whichever op it is (every one the spec marks BulkOut).
func TestKeepalivesStayOutOfBulkReplies(t *testing.T) {
	dev := emulated.New(emulated.Config{MemBytes: 64 << 20, Seed: "dispatch-test"})
	t.Cleanup(func() { dev.Close() })
	s := NewSession(slowDevice{Device: dev, pause: 150 * time.Millisecond}, nil)
	cc, sc := pipe(t)
	go s.Serve(context.Background(), sc, WelcomeInfo{SessionID: "s", Keepalive: 10 * time.Millisecond}, false)
	c := &tclient{t: t, c: cc, br: bufio.NewReader(cc)}
	if w, err := wire.ReadWelcome(c.br); err != nil || w.KeepaliveMS != 10 {
		t.Fatalf("welcome %+v, %v", w, err)
	}
	ctx := c.mustCtx()
	r, d, _ := c.call(wire.OpMemAlloc, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(4096) }), nil)
	if r != cu.Success {
		t.Fatal(r)
	}
	ptr := d.U64()
	data := make([]byte, 4096)
	for i := range data {
		data[i] = byte(i*7 + 1)
	}
	if r, _, _ := c.call(wire.OpMemcpyHtoD, enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4096); e.U64(0) }), data); r != cu.Success {
		t.Fatal(r)
	}
	// callSeeing sends op and reads up to its reply, counting the
	// keepalives before it.
	callSeeing := func(op wire.Op, args []byte) (keepalives int, bulk []byte) {
		seq := c.send(op, 0, args, nil)
		for {
			h, _, b := c.reply()
			switch {
			case h.Kind == wire.KindKeepalive:
				keepalives++
			case h.Kind == wire.KindReply && h.Seq == seq && cu.Result(h.Result) == cu.Success:
				return keepalives, b
			default:
				t.Fatalf("%s: got %+v", op, h)
			}
		}
	}
	if n, _ := callSeeing(wire.OpCtxSynchronize, enc(func(e *wire.Enc) { e.U64(ctx) })); n == 0 {
		t.Fatal("no keepalive during a call that ran 15 intervals")
	}
	bulkOps := map[wire.Op][]byte{
		wire.OpMemcpyDtoH: enc(func(e *wire.Enc) { e.U64(ctx); e.U64(ptr); e.U64(4096); e.U64(0) }),
		// 8 rows of 64 bytes in 8 slices: the same 4096 bytes.
		wire.OpMemcpyDtoH3D: enc(func(e *wire.Enc) {
			e.U64(ctx)
			e.U64(ptr) // src, its pitch and height
			e.U64(64)
			e.U64(8)
			e.U64(64) // width, height, depth
			e.U64(8)
			e.U64(8)
			e.U64(0) // stream
		}),
	}
	for op := wire.Op(0); op < 1000; op++ {
		if _, ok := bulkOps[op]; op.BulkReply() && !ok {
			t.Errorf("%s has a bulk reply and no case here", op)
		}
	}
	for op, args := range bulkOps {
		n, got := callSeeing(op, args)
		if n != 0 || !bytes.Equal(got, data) {
			t.Errorf("%s: %d keepalives before the reply, data intact %v", op, n, bytes.Equal(got, data))
		}
	}
}
