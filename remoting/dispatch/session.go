// Package dispatch is the worker side of a session's call stream: it reads
// request frames from the client's connection, executes them on a
// backend.Device, writes replies, and keeps the protocol state that makes
// reconnect and replay exactly-once: the highest executed sequence number,
// a cache of recent replies, the pending errors of asynchronous work, and
// bytes read ahead from a connection that was stopped mid-stream.
//
// That state lives in the worker's memory, so it survives a CRIU dump and
// restore together with the device state it describes.
package dispatch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// ErrStopped is returned by Serve after Stop: the session stopped at a
// frame boundary with every reply written.
var ErrStopped = errors.New("dispatch: session stopped at a frame boundary")

// ErrNotResumable is returned by Serve(resume=true) when the previous
// Serve did not stop at a frame boundary: bytes it had read are lost, or
// a reply may be cut short on the wire, so that socket cannot carry the
// session on. The client must reconnect (and is greeted, and resends).
var ErrNotResumable = errors.New("dispatch: the connection did not stop at a frame boundary; the client must reconnect")

// WelcomeInfo is what Serve puts in the Welcome of a new connection.
type WelcomeInfo struct {
	SessionID string
	Secret    string // sent only to a new session's first connection; may be empty on resume
	// MaxFrame is the largest argument block accepted; 0 means
	// wire.DefaultMaxFrame.
	MaxFrame uint32
	// Keepalive, when set, is how often Serve sends a keepalive frame on
	// a connection that has been silent while a call runs. Set it only for
	// a client that asked (wire.HelloKeepalive); the Welcome announces it.
	Keepalive time.Duration `json:"keepalive,omitempty"`
}

// replyCacheSize bounds the reply cache. A client has at most one
// synchronous request outstanding per thread, so this is the number of
// client threads whose lost replies can be replayed.
const replyCacheSize = 1024

// Session is one session's protocol state. Its methods other than Stop and
// ExecutedSeq must be called from one goroutine (the worker's).
type Session struct {
	dev backend.Device
	log *slog.Logger

	executed atomic.Uint64
	stopReq  atomic.Bool
	// changes and launches are Changes' counts.
	changes, launches atomic.Uint64

	// mu makes Stop and the start of Serve one after the other: a Stop
	// either comes before Serve clears the request and is forgotten, or
	// after, and then its deadline lands on the connection Serve reads.
	// Interleaved, the deadline could interrupt a read after the request
	// was cleared, and Serve ended with a timeout, losing its read-ahead.
	mu   sync.Mutex
	conn net.Conn
	// boundary is whether the last Serve ended at a frame boundary
	// (ErrStopped), so that its socket can be served on (resume=true).
	boundary bool

	// wmu guards the reply writer. Serve holds it except while a call
	// runs, when the writer is at a frame boundary and the keepalive
	// goroutine may use it (only with WelcomeInfo.Keepalive; otherwise
	// Serve holds it throughout and nothing else writes).
	wmu        sync.Mutex
	keepalives bool // the current Serve releases wmu around calls

	maxFrame  uint32
	readAhead []byte                // unprocessed bytes of a stopped connection
	pending   map[backend.Ctx]error // failures of async work not yet reported
	cache     replyCache            // replies of recent sync requests
	deferred  deferredCache         // data of recent deferred copies
	scratch   []byte                // reused reply encoding buffer
	modules   atomic.Pointer[ModuleCache]
	// cacheWrites counts module cache writes still in progress.
	cacheWrites sync.WaitGroup
	// execMu is held while a request executes, so that Between can run
	// work on the device in the gaps between requests (a live
	// migration's pre-copy reads device memory while the session runs).
	execMu sync.Mutex
}

// replyCache keeps the reply frames of the last replyCacheSize synchronous
// requests by sequence number. Sequence numbers have gaps (the client
// uses ring positions), so it is a map with first-in first-out eviction,
// not an array indexed by seq.
type replyCache struct {
	m     map[uint64][]byte
	order [replyCacheSize]uint64
	next  int
}

func (c *replyCache) get(seq uint64) []byte { return c.m[seq] }

func (c *replyCache) put(seq uint64, frame []byte) {
	if c.m == nil {
		c.m = make(map[uint64][]byte, replyCacheSize)
	}
	var buf []byte
	if old := c.order[c.next]; old != 0 {
		buf = c.m[old][:0] // reuse the evicted entry's memory
		delete(c.m, old)
	}
	c.m[seq] = append(buf, frame...)
	c.order[c.next] = seq
	c.next = (c.next + 1) % replyCacheSize
}

// NewSession returns the protocol state of a new session on dev.
func NewSession(dev backend.Device, log *slog.Logger) *Session {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Session{dev: dev, log: log, pending: map[backend.Ctx]error{}, maxFrame: wire.DefaultMaxFrame}
}

// Between runs f while no request executes: after the one in progress,
// if any, and before the next. It may be called from any goroutine,
// while Serve runs or not.
func (s *Session) Between(f func()) {
	s.execMu.Lock()
	defer s.execMu.Unlock()
	f()
}

// Resumable reports whether the last Serve stopped at a frame boundary,
// so that its socket can be served on with resume=true. Call it from the
// goroutine that calls Serve, while no Serve runs.
func (s *Session) Resumable() bool { return s.boundary }

// ExecutedSeq is the highest request sequence number executed so far.
func (s *Session) ExecutedSeq() uint64 { return s.executed.Load() }

// Stop asks the Serve in progress to return ErrStopped at the next frame
// boundary. A read blocked waiting for the next frame is interrupted; a
// frame whose bulk payload is being streamed is finished first. With no
// Serve in progress it has no effect: a stop meant for a Serve that ended
// on its own must not end the next connection's Serve at once, so a
// caller that starts Serve on another goroutine should let it begin
// before stopping it.
func (s *Session) Stop() {
	s.mu.Lock()
	s.stopReq.Store(true)
	if s.conn != nil {
		s.conn.SetReadDeadline(time.Unix(1, 0))
	}
	s.mu.Unlock()
}

// Unread puts b after the read-ahead of a stopped connection: bytes that
// arrived on it but that Serve never read (a TLS record layer's plaintext
// it had opened). The next Serve on the same connection (resume=true)
// processes them first. Call it only while no Serve runs.
func (s *Session) Unread(b []byte) {
	s.readAhead = append(s.readAhead, b...)
}

// Serve runs the session on conn until conn fails (that error is
// returned), ctx ends (ctx's error), or Stop is called (ErrStopped).
//
// resume=false: conn is a new connection; Serve first writes the Welcome
// (status ok, w's id and secret, the executed seq) and discards any bytes
// read ahead from an earlier connection, because the client resends what
// was not executed. resume=true: conn is the same client socket handed
// back after a Stop; no Welcome is written (the client never left) and the
// read-ahead bytes are processed first. When the previous Serve did not
// end with ErrStopped, resume=true returns ErrNotResumable at once.
func (s *Session) Serve(ctx context.Context, conn net.Conn, w WelcomeInfo, resume bool) error {
	if w.MaxFrame != 0 {
		s.maxFrame = max(w.MaxFrame, wire.MinMaxFrame)
	}
	if resume && !s.boundary {
		return ErrNotResumable
	}
	s.boundary = false
	s.mu.Lock()
	s.stopReq.Store(false)
	s.conn = conn
	conn.SetReadDeadline(time.Time{})
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.conn = nil
		s.mu.Unlock()
	}()
	if err := failpoint.Inject(ctx, "dispatch/serve"); err != nil {
		return err
	}
	stopWatch := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stopWatch()

	if !resume {
		s.readAhead = nil
		if err := wire.WriteWelcome(conn, &wire.Welcome{
			Status:       wire.StatusOK,
			SessionID:    w.SessionID,
			Secret:       w.Secret,
			MaxFrame:     s.maxFrame,
			LastExecuted: s.executed.Load(),
			Features:     wire.FeatureDeferredReplies | wire.FeatureGoodbye,
			KeepaliveMS:  uint32(w.Keepalive.Milliseconds()),
		}); err != nil {
			return fmt.Errorf("write welcome: %w", err)
		}
	}
	fr := &frameReader{conn: conn, s: s, ctx: ctx}
	fr.buf = append(make([]byte, 0, max(64<<10, len(s.readAhead))), s.readAhead...)
	s.readAhead = nil
	var sent atomic.Uint64 // writes that reached the connection
	bw := bufio.NewWriterSize(countWrites{conn, &sent}, 64<<10)
	s.wmu.Lock()
	s.keepalives = w.Keepalive > 0
	var stopKeep, keepDone chan struct{}
	if s.keepalives {
		stopKeep, keepDone = make(chan struct{}), make(chan struct{})
		go s.keepalive(bw, &sent, w.Keepalive, stopKeep, keepDone)
	}
	err := s.loop(ctx, fr, bw)
	if stopKeep != nil {
		close(stopKeep)
		<-keepDone
	}
	if ferr := bw.Flush(); err == nil || errors.Is(err, ErrStopped) {
		if ferr != nil {
			err = fmt.Errorf("write replies: %w", ferr)
		}
	}
	s.wmu.Unlock()
	if errors.Is(err, ErrStopped) {
		s.readAhead = append([]byte(nil), fr.buf[fr.r:]...)
		s.boundary = true
	}
	if ctx.Err() != nil && !errors.Is(err, ErrStopped) {
		return ctx.Err()
	}
	return err
}

func (s *Session) loop(ctx context.Context, fr *frameReader, bw *bufio.Writer) error {
	x := &call{}
	for {
		if s.stopReq.Load() {
			return ErrStopped
		}
		if fr.buffered() < wire.RequestHeaderSize {
			// About to block on the network: send what is buffered.
			if err := bw.Flush(); err != nil {
				return fmt.Errorf("write replies: %w", err)
			}
		}
		hb, err := fr.peek(wire.RequestHeaderSize)
		if err != nil {
			return err
		}
		h, err := wire.DecodeRequestHeader(hb, s.maxFrame)
		if err != nil {
			return s.closeWith(bw, err)
		}
		if h.Async() && !h.Op.AsyncAllowed() && h.Op.Known() {
			return s.closeWith(bw, fmt.Errorf("%w: op %s (seq %d) cannot be asynchronous", wire.ErrProtocol, h.Op, h.Seq))
		}
		if err := checkDeferred(h); err != nil {
			return s.closeWith(bw, err)
		}
		if fr.buffered() < wire.RequestHeaderSize+int(h.Len) {
			if err := bw.Flush(); err != nil {
				return fmt.Errorf("write replies: %w", err)
			}
		}
		if _, err := fr.peek(wire.RequestHeaderSize + int(h.Len)); err != nil {
			return err
		}
		// The frame's header and arguments are in; from here on the frame
		// is finished even if Stop is called.
		args := fr.buf[fr.r+wire.RequestHeaderSize : fr.r+wire.RequestHeaderSize+int(h.Len)]
		fr.r += wire.RequestHeaderSize + int(h.Len)
		x.reset(h, args, fr.bulk(h.Bulk))
		if err := s.handle(ctx, x, bw); err != nil {
			return err
		}
		if x.bulkIn.n > 0 {
			// The op did not consume all its bulk (it failed early):
			// drain it so the stream stays framed.
			if _, err := io.Copy(io.Discard, &x.bulkIn); err != nil {
				return fmt.Errorf("read bulk of seq %d: %w", h.Seq, err)
			}
		}
		// No compaction here: peek moves the unprocessed tail to the
		// front only when the next frame does not fit, so a buffer full
		// of small frames is not copied once per frame.
	}
}

// handle executes one frame (or recognises it as a duplicate) and writes
// its reply.
func (s *Session) handle(ctx context.Context, x *call, bw *bufio.Writer) error {
	h := &x.h
	if h.Seq <= s.executed.Load() {
		return s.duplicate(ctx, x, bw)
	}
	if !h.Async() {
		// A test can end the connection here: the request is read and
		// not executed, and its client waits for the reply.
		if err := failpoint.Inject(ctx, "dispatch/sync"); err != nil {
			return err
		}
	}
	var err error
	if s.keepalives && !h.Op.BulkReply() {
		// The writer is at a frame boundary until the call returns
		// (an op with a bulk reply, a device-to-host copy, streams it as
		// it runs, so it keeps the writer): keepalives may go out
		// meanwhile.
		s.wmu.Unlock()
		if !h.Async() {
			// A test holds a long call here.
			err = failpoint.Inject(ctx, "dispatch/exec")
		}
		if err == nil {
			err = s.run(ctx, x, bw)
		}
		s.wmu.Lock()
	} else {
		err = s.run(ctx, x, bw)
	}
	if x.bulkIn.n > 0 {
		// The op failed before it consumed its payload, or the
		// connection broke while it streamed. A payload that cannot be
		// read in full means the frame never arrived: it does not count
		// as executed, and the client sends it again.
		if _, derr := io.Copy(io.Discard, &x.bulkIn); derr != nil {
			return fmt.Errorf("read bulk of seq %d: %w", h.Seq, derr)
		}
	}
	s.executed.Store(h.Seq)
	s.count(x)
	if errors.Is(err, errFatal) {
		return err
	}
	if h.Async() || h.Deferred() {
		if err != nil {
			s.log.Debug("async call failed; reported at the next sync call", "op", h.Op, "seq", h.Seq, "err", err)
			if _, ok := s.pending[x.c]; !ok {
				s.pending[x.c] = err
			}
		}
	}
	if !h.Async() && !x.replied {
		if err := s.reply(bw, x, err, true); err != nil {
			return err
		}
	}
	if h.Flags&wire.FlagAckRequest != 0 {
		return s.writeAck(bw)
	}
	return nil
}

// duplicate handles a request the session already executed: the client
// resent it after a reconnect because the reply was lost.
func (s *Session) duplicate(ctx context.Context, x *call, bw *bufio.Writer) error {
	h := &x.h
	if h.Async() {
		return nil
	}
	if h.Deferred() {
		if b := s.deferred.get(h.Seq); b != nil {
			// The copy's data as it was read the first time: device
			// memory may have changed since, by work queued after it.
			binaryPutU64(b[24:], s.executed.Load())
			_, err := bw.Write(b)
			return err
		}
	}
	if b := s.cache.get(h.Seq); b != nil {
		// Refresh the piggybacked ack.
		binaryPutU64(b[24:], s.executed.Load())
		_, err := bw.Write(b)
		return err
	}
	if h.Op.BulkReply() {
		// Bulk replies are not cached; reading device memory again is
		// what the client asked for.
		err := s.run(ctx, x, bw)
		if errors.Is(err, errFatal) {
			return err
		}
		if !x.replied {
			return s.reply(bw, x, err, false)
		}
		return nil
	}
	s.log.Warn("reply no longer cached for a resent request", "op", h.Op, "seq", h.Seq)
	return s.reply(bw, x, cu.Errorf(cu.ErrorUnknown, "reply of seq %d lost and no longer cached", h.Seq), false)
}

// run executes x, turning a panic of the backend into an error so that one
// hostile frame cannot take the worker down.
func (s *Session) run(ctx context.Context, x *call, bw *bufio.Writer) (err error) {
	defer func() {
		if p := recover(); p != nil {
			s.log.Error("backend panicked", "op", x.h.Op, "seq", x.h.Seq, "panic", p, "stack", string(debug.Stack()))
			err = cu.Errorf(cu.ErrorUnknown, "internal error executing %s", x.h.Op)
		}
	}()
	x.bw = bw
	x.s = s
	s.execMu.Lock()
	defer s.execMu.Unlock()
	return s.exec(ctx, x)
}

// reply writes a KindReply for x with err's CUDA result; on success the
// encoded outputs follow.
func (s *Session) reply(bw *bufio.Writer, x *call, err error, cache bool) error {
	res := cu.Code(err)
	payload := x.e.B
	if res != cu.Success {
		payload = nil
		if x.h.Op != wire.OpStreamQuery && x.h.Op != wire.OpEventQuery || res != cu.ErrorNotReady {
			s.log.Debug("call failed", "op", x.h.Op, "seq", x.h.Seq, "err", err)
		}
	}
	b := s.scratch[:0]
	b = append(b, make([]byte, wire.ReplyHeaderSize)...)
	rh := wire.ReplyHeader{Len: uint32(len(payload)), Kind: wire.KindReply, Result: uint32(res), Seq: x.h.Seq, Executed: s.executed.Load()}
	rh.Put(b)
	b = append(b, payload...)
	s.scratch = b
	if cache {
		s.cache.put(x.h.Seq, b)
	}
	if _, err := bw.Write(b); err != nil {
		return fmt.Errorf("write reply: %w", err)
	}
	return nil
}

func (s *Session) writeAck(bw *bufio.Writer) error {
	var b [wire.ReplyHeaderSize]byte
	rh := wire.ReplyHeader{Kind: wire.KindAck, Executed: s.executed.Load()}
	rh.Put(b[:])
	if _, err := bw.Write(b[:]); err != nil {
		return fmt.Errorf("write ack: %w", err)
	}
	return bw.Flush()
}

// closeWith tells the peer why its connection is being closed and returns
// the protocol error. The session itself survives: the client may
// reconnect.
func (s *Session) closeWith(bw *bufio.Writer, err error) error {
	s.log.Warn("closing client connection", "err", err)
	wire.WriteClosing(bw, err.Error())
	bw.Flush()
	return err
}

// takePending returns, for a synchronous call in context c, the failure
// of earlier asynchronous work in c (once), as CUDA reports errors of
// asynchronous work at the next call.
func (s *Session) takePending(x *call, c backend.Ctx) error {
	if x.h.Async() || x.h.Deferred() {
		return nil
	}
	if err, ok := s.pending[c]; ok {
		delete(s.pending, c)
		return err
	}
	return nil
}

func (s *Session) badArgs(x *call, err error) error {
	s.log.Warn("malformed arguments", "op", x.h.Op, "seq", x.h.Seq, "err", err)
	return cu.Errorf(cu.ErrorInvalidValue, "%s: malformed arguments: %v", x.h.Op, err)
}

func (s *Session) unknownOp(x *call) error {
	s.log.Warn("unknown op", "op", uint16(x.h.Op), "seq", x.h.Seq)
	return cu.Errorf(cu.ErrorNotSupported, "op %d is not supported by this server", uint16(x.h.Op))
}

// keepalive sends a keepalive frame each time a whole interval passes with
// nothing written while a call runs (wmu free): the client then knows the
// server is busy for it, not stalled. An idle Serve holds wmu, so a
// connection with no work in flight stays silent.
func (s *Session) keepalive(bw *bufio.Writer, sent *atomic.Uint64, every time.Duration, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	last := sent.Load()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		if n := sent.Load(); n != last {
			last = n
			continue
		}
		if !s.wmu.TryLock() {
			continue
		}
		err := wire.WriteKeepalive(bw, s.executed.Load())
		if err == nil {
			err = bw.Flush()
		}
		s.wmu.Unlock()
		if err != nil {
			return // the connection is failing; Serve finds out itself
		}
		last = sent.Load()
	}
}

// countWrites counts the writes that reach the connection.
type countWrites struct {
	net.Conn
	n *atomic.Uint64
}

func (c countWrites) Write(b []byte) (int, error) {
	c.n.Add(1)
	return c.Conn.Write(b)
}

// errFatal marks errors after which the connection's framing is lost (a
// bulk reply failed half-way).
var errFatal = errors.New("connection framing lost")

// call is the frame being executed. One is reused for every frame.
type call struct {
	h       wire.RequestHeader
	d       wire.Dec
	e       wire.Enc
	c       backend.Ctx // the op's context, for pending errors
	bulkIn  bulkReader
	bw      *bufio.Writer
	s       *Session
	replied bool // the op wrote its own reply (bulk out)
}

func (x *call) reset(h wire.RequestHeader, args []byte, br bulkReader) {
	x.h = h
	x.d = wire.Dec{B: args}
	x.e.B = x.e.B[:0]
	x.c = 0
	x.bulkIn = br
	x.replied = false
}

func encodeParams(e *wire.Enc, ps []backend.Param) {
	e.U32(uint32(len(ps)))
	for _, p := range ps {
		e.U32(p.Offset)
		e.U32(p.Size)
	}
}

func binaryPutU64(b []byte, v uint64) {
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// isTimeout reports a deadline expiry, which is how Stop and ctx interrupt
// a blocked read.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
