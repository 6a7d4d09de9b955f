package worker

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/procmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/dispatch"
	"github.com/gpuctl/gpuctl/remoting/modcache"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
)

// ControlFD is the descriptor on which a worker finds its control socket.
const ControlFD = 3

// Main is the body of `gpud worker` and returns its exit status. The
// worker is PID 1 of its own PID namespace, serves one session, and is
// driven entirely over the control socket on fd 3.
func Main(args []string) int {
	// Before anything opens a file: the driver needs this namespace's own
	// /proc, and CRIU needs every descriptor to live in this namespace.
	if err := InitNamespace(true); err != nil {
		fmt.Fprintln(os.Stderr, "gpud worker:", err)
		return 5
	}
	fs := flag.NewFlagSet("gpud worker", flag.ContinueOnError)
	var o Options
	fs.StringVar(&o.Backend, "backend", BackendEmulated, "device backend")
	fs.StringVar(&o.Device, "device", "0", "host device")
	fs.StringVar(&o.SessionID, "session", "", "session id")
	fs.Uint64Var(&o.EmulatedMemBytes, "emulated-mem", 0, "emulated device size in bytes")
	fs.StringVar(&o.Seed, "seed", "", "emulated device UUID seed")
	fs.BoolVar(&o.CUDAPlainMemory, "cuda-plain-memory", false, "cuda: cuMemAlloc from the driver's allocator")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	// SIGUSR2 is how gpud calls a detached worker back; subscribe before
	// anything can send it. SIGTERM/SIGINT are ignored: gpud ends a
	// worker over the control socket or with SIGKILL.
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, unix.SIGUSR2)
	signal.Ignore(unix.SIGTERM, unix.SIGINT, unix.SIGHUP, unix.SIGPIPE)

	f := os.NewFile(ControlFD, "control")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return 3
	}
	ctrl, ok := fc.(*net.UnixConn)
	if !ok {
		return 3
	}
	w := &worker{opts: o, usr2: usr2, thread: newThread()}
	w.log = slog.New(&eventHandler{w: w, level: slog.LevelInfo})
	w.setCtrl(ctrl)
	var openErr error
	w.thread.run(func() { w.dev, openErr = open(o, w.log) })
	if openErr != nil {
		// Report it as the answer to gpud's first request.
		var req request
		if _, err := recvMsg(ctrl, &req); err == nil {
			_ = w.send(reply{ID: req.ID, Err: "open backend: " + openErr.Error()}, -1)
		}
		// Exit only once gpud has read the answer and hung up (or after a
		// bound): a worker gone first could leave gpud with "connection
		// closed" instead of the reason.
		_ = ctrl.SetReadDeadline(time.Now().Add(5 * time.Second))
		for {
			if _, err := recvMsg(ctrl, &req); err != nil {
				break
			}
		}
		return 4
	}
	w.meter = newMeter(w.dev, w.log)
	w.sess = dispatch.NewSession(w.meter, w.log)
	return w.run()
}

// thread runs functions on one locked OS thread: a real driver binds its
// contexts to the thread that made them, so every backend call, including
// the whole of Serve, happens here.
type thread struct{ work chan func() }

func newThread() *thread {
	t := &thread{work: make(chan func())}
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the worker
		for f := range t.work {
			f()
		}
	}()
	return t
}

// run executes f on the thread and waits for it.
func (t *thread) run(f func()) {
	done := make(chan struct{})
	t.work <- func() { f(); close(done) }
	<-done
}

type worker struct {
	opts Options
	dev  backend.Device
	// meter is dev as the session's calls reach it: it counts device
	// memory and asks gpud before a metered session holds more.
	meter  *meter
	sess   *dispatch.Session
	log    *slog.Logger
	thread *thread
	usr2   chan os.Signal

	mu   sync.Mutex
	ctrl *net.UnixConn // nil while detached
	// sendMu keeps a message's packets together (sendFiles).
	sendMu sync.Mutex

	// serving is non-nil while Serve runs; it yields Serve's result once.
	serving chan error
	conn    net.Conn
	// tls is the served client's TLS record layer (nil for plaintext);
	// handback is its state when Serve stopped at a frame boundary, for
	// the quiesce reply.
	tls      *tlsrec.Conn
	handback *tlsrec.State

	bytesIn, bytesOut atomic.Uint64
	welcome           dispatch.WelcomeInfo
	cancel            context.CancelFunc
	// secretHash is the SHA-256 of the session's secret, kept for a host
	// that restores this worker from an image.
	secretHash []byte
	// modCache is the module cache in use, as gpud last named it.
	modCache moduleCache
	// mem remembers the hashes of the device memory saved last.
	mem *devmem.Tracker
	// snapTimer drops a snapshot kept by an unpark that no save came
	// for (memUnpark).
	snapTimer *time.Timer
	// epoch is the session's epoch this worker serves under: gpud must
	// hand it with every attach and resume, and moves it with a claim.
	// It lives in the worker's memory, so a copy restored from an image
	// carries the epoch of its image and can be told apart from a newer
	// copy of the session.
	epoch uint64
	// mapped is the worker's mappings at the last quiesce.
	mapped procmem.Snapshot
	// quiesced is what the worker was at the last quiesce, dumped at the
	// last detach, for the dump of dumpNonce (reuse.go).
	quiesced, dumped stateMark
	dumpNonce        string
}

// useModuleCache points the session at the module cache gpud names (a
// restored worker may run on another host than the one that started it);
// nil leaves the cache as it is. A cache that cannot be opened is turned
// off: modules are then uploaded every time, nothing fails.
func (w *worker) useModuleCache(mc *moduleCache) {
	if mc == nil || *mc == w.modCache {
		return
	}
	w.modCache = *mc
	if mc.Dir == "" {
		w.sess.SetModuleCache(nil)
		return
	}
	c, err := modcache.Open(mc.Dir, mc.Bytes, w.log)
	if err != nil {
		w.log.Warn("module cache unavailable; modules are uploaded every time", "err", err)
		w.sess.SetModuleCache(nil)
		return
	}
	w.sess.SetModuleCache(c)
}

// fence checks the epoch gpud handed for an attach or resume. A worker
// that has none yet (new) takes it.
func (w *worker) fence(epoch uint64) error {
	switch {
	case epoch == w.epoch:
		return nil
	case w.epoch == 0 && epoch != 0:
		w.epoch = epoch
		return nil
	}
	return fmt.Errorf("fenced: this worker serves epoch %d of session %s and was handed epoch %d; a newer copy of the session exists, and this one must not serve", w.epoch, w.opts.SessionID, epoch)
}

// claim moves the worker from epoch from to epoch to: after a checkpoint
// that leaves it running (its image keeps from) or a restore (the image's
// epoch was from). A worker at another epoch is a stale copy and refuses.
func (w *worker) claim(from, to uint64) error {
	if to <= from {
		return fmt.Errorf("claim from epoch %d to %d: the epoch only grows", from, to)
	}
	if w.epoch != from {
		return fmt.Errorf("fenced: this worker holds epoch %d of session %s, not %d; a newer copy of the session exists, and this one must not serve", w.epoch, w.opts.SessionID, from)
	}
	w.epoch = to
	return nil
}

func (w *worker) setCtrl(c *net.UnixConn) {
	w.mu.Lock()
	w.ctrl = c
	w.mu.Unlock()
}

// send writes one message to gpud; while detached it is dropped.
func (w *worker) send(r reply, fd int) error {
	if fd < 0 {
		return w.sendFiles(r, nil)
	}
	return w.sendFiles(r, []int{fd})
}

// sendFiles sends r with fds (see sendFiles), counting them in r.
func (w *worker) sendFiles(r reply, fds []int) error {
	w.mu.Lock()
	c := w.ctrl
	w.mu.Unlock()
	if c == nil {
		return net.ErrClosed
	}
	if len(fds) > 1 {
		r.Files = len(fds)
	}
	w.sendMu.Lock()
	defer w.sendMu.Unlock()
	return sendFiles(c, r, fds)
}

// run serves control requests until gpud says exit or goes away.
func (w *worker) run() int {
	for {
		w.mu.Lock()
		c := w.ctrl
		w.mu.Unlock()
		var req request
		fs, err := recvMsg(c, &req)
		var f *os.File
		if len(fs) > 0 {
			f = fs[0]
			if req.Op != opMemUnpark {
				closeFiles(fs[1:]) // only memunpark takes several
			}
		}
		if err != nil {
			// gpud is gone (it would have killed us) or broke the
			// protocol: nobody can drive this session any more.
			w.shutdown()
			return 5
		}
		r := reply{ID: req.ID}
		switch req.Op {
		case opAttach:
			if err = w.fence(req.Epoch); err == nil {
				w.useModuleCache(req.ModuleCache)
				w.meter.configure(req.Quota)
				err = w.attach(f, req.TLS, req.Welcome, req.Resume)
			}
		case opQuiesce:
			r.Seq, r.TLS, err = w.quiesce()
			r.Boundary = w.sess.Resumable()
		case opResume:
			if err = w.fence(req.Epoch); err == nil {
				w.useModuleCache(req.ModuleCache)
				w.meter.configure(req.Quota)
				r.Dropped, err = w.resume(f, req.TLS)
			}
		case opClaim:
			err = w.claim(req.From, req.To)
		case opStats:
			r.Stats = w.stats()
		case opMemSave:
			var mf *os.File
			mf, r.Mem, err = w.memSave(req.MemSave, f)
			if err == nil {
				err = w.send(r, int(mf.Fd()))
				mf.Close()
				if f != nil {
					f.Close()
				}
				if err != nil {
					w.shutdown()
					return 5
				}
				continue
			}
		case opMemPrecopy:
			var mf *os.File
			mf, r.Mem, err = w.memPrecopy(req.MemPrecopy, f)
			if err == nil {
				err = w.send(r, int(mf.Fd()))
				mf.Close()
				if f != nil {
					f.Close()
				}
				if err != nil {
					w.shutdown()
					return 5
				}
				continue
			}
		case opMemReload:
			err = w.memReload(f, req.MemLayout)
		case opMemPatch:
			err = w.memPatch(f, req.MemLayout, req.MemPatch)
		case opMemPark:
			var files []*os.File
			files, r.Parked, err = w.memPark()
			if err == nil {
				fds := make([]int, len(files))
				for i, pf := range files {
					fds[i] = int(pf.Fd())
				}
				err = w.sendFiles(r, fds)
				closeFiles(files) // gpud holds the memory now
				if err != nil {
					// gpud never got them: the memory is gone with them.
					w.shutdown()
					return 5
				}
				continue
			}
		case opMemUnpark:
			err = w.memUnpark(req.MemUnpark, fs)
			closeFiles(fs)
			f = nil
		case opDetach:
			if err = checkNonce(req.Nonce); err == nil {
				// The dump follows: no memfd mapping of a save or a
				// reload may still be there for CRIU to find.
				if w.mem != nil {
					w.mem.Settle()
				}
				w.dropZeroPages()
				w.dumped, w.dumpNonce = w.quiesced, req.Nonce
				_ = w.send(r, -1)
				w.detach(req.Nonce)
				continue
			}
		case opReuse:
			var sf *os.File
			sf, r.Reason, err = w.reuse(req.Nonce)
			if sf != nil {
				r.State = true
				err = w.send(r, int(sf.Fd()))
				sf.Close()
				if f != nil {
					f.Close()
				}
				if err != nil {
					w.shutdown()
					return 5
				}
				continue
			}
		case opImport:
			err = w.importState(f, req.Epoch)
		case opExit:
			w.shutdown()
			_ = w.send(r, -1)
			return 0
		default:
			err = fmt.Errorf("unknown operation %q", req.Op)
		}
		if f != nil {
			f.Close() // consumed (dup'ed) by attach/resume, or unwanted
		}
		if err != nil {
			r.Err = err.Error()
		}
		if err := w.send(r, -1); err != nil {
			w.shutdown()
			return 5
		}
	}
}

// serve starts Serve on the call thread for the socket in f, carrying on
// its TLS record layer from rec when the connection is TLS.
func (w *worker) serve(f *os.File, rec *tlsrec.State, resume bool) error {
	if w.serving != nil {
		return errors.New("already serving a client; quiesce first")
	}
	if f == nil {
		return errors.New("no client socket passed")
	}
	nc, err := net.FileConn(f)
	if err != nil {
		return fmt.Errorf("client socket: %w", err)
	}
	w.tls, w.handback = nil, nil
	if rec != nil {
		tc, err := tlsrec.New(nc, *rec)
		if err != nil {
			nc.Close()
			return fmt.Errorf("client socket's TLS state: %w", err)
		}
		tc.ReadAhead() // the socket comes back to gpud only between records
		w.tls, nc = tc, tc
	}
	conn := &countingConn{Conn: nc, in: &w.bytesIn, out: &w.bytesOut}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	w.serving, w.conn, w.cancel = done, conn, cancel
	welcome := w.welcome
	epoch := w.epoch // the epoch this connection is served under
	go w.thread.run(func() {
		err := w.sess.Serve(ctx, conn, welcome, resume)
		done <- err
	})
	// A client that goes away by itself is reported to gpud, and the
	// worker's copy of its socket is closed at once so the client sees the
	// end even while gpud still holds its own copy. A quiesce collects the
	// result instead.
	go func() {
		err := <-done
		done <- err // leave it for endServe
		if !errors.Is(err, dispatch.ErrStopped) {
			conn.Close()
			msg := ""
			if err != nil && !errors.Is(err, net.ErrClosed) && !errors.Is(err, io.EOF) {
				msg = err.Error()
			}
			ev := reply{Event: evEnded, Err: msg}
			if errors.Is(err, dispatch.ErrGoodbye) {
				ev.Err, ev.Goodbye, ev.Epoch = "", true, epoch
			}
			_ = w.send(ev, -1)
		}
	}()
	return nil
}

func (w *worker) attach(f *os.File, rec *tlsrec.State, welcome *dispatch.WelcomeInfo, resume bool) error {
	if welcome != nil {
		w.welcome = *welcome
		if welcome.Secret != "" {
			sum := sha256.Sum256([]byte(welcome.Secret))
			w.secretHash = sum[:]
		}
	}
	if w.serving != nil {
		// The previous client is gone but its Serve may not have noticed
		// yet (a reconnect racing the old socket's close): end it first.
		w.endServe()
	}
	return w.serve(f, rec, resume)
}

// endServe stops a running Serve, waits for it, and closes the worker's
// copy of the client socket.
func (w *worker) endServe() error {
	if w.serving == nil {
		return nil
	}
	// Serve runs on its own goroutine and forgets a Stop that came before
	// it started, so ask again until it returns.
	var err error
	deadline := time.After(10 * time.Second)
	retry := time.NewTicker(5 * time.Millisecond)
	defer retry.Stop()
	w.sess.Stop()
wait:
	for {
		select {
		case err = <-w.serving:
			break wait
		case <-retry.C:
			w.sess.Stop()
		case <-deadline:
			// Stop interrupts a read, not a write blocked on a client that
			// no longer reads: cut the socket under it.
			w.log.Warn("serve did not stop at a frame boundary; closing the client socket")
			w.cancel()
			w.conn.Close()
			err = <-w.serving
			break wait
		}
	}
	w.serving = nil
	w.cancel()
	if w.tls != nil {
		if errors.Is(err, dispatch.ErrStopped) {
			// Stopped between frames: what the record layer has opened
			// but Serve has not read joins Serve's read-ahead, and the
			// rest of the record layer goes back to gpud with the socket.
			w.sess.Unread(w.tls.Drain())
			st := w.tls.State()
			w.handback = &st
		}
		w.tls.Forget()
		w.tls = nil
	}
	w.conn.Close()
	w.conn = nil
	if err != nil && !errors.Is(err, dispatch.ErrStopped) {
		return err
	}
	return nil
}

func (w *worker) quiesce() (uint64, *tlsrec.State, error) {
	if err := w.endServe(); err != nil {
		w.log.Info("client connection ended during quiesce", "err", err)
	}
	// A quiesced worker may be dumped next: it must hold no file open (a
	// module being written to the cache is one) and no socket.
	w.sess.FlushModuleCache()
	w.meter.hangUp()
	rec := w.handback
	w.handback = nil
	// What is mapped before the driver's checkpoint, to tell its copy of
	// the device state apart at the detach (dropZeroPages).
	mapped, merr := procmem.Take()
	if merr != nil {
		w.log.Warn("the worker's mappings could not be read; its dump keeps the zero pages of a driver checkpoint", "err", merr)
	}
	w.mapped = mapped
	var err error
	if s, ok := w.dev.(backend.Suspender); ok {
		w.thread.run(func() { err = s.Suspend(context.Background()) })
	}
	w.quiesced = w.mark()
	return w.sess.ExecutedSeq(), rec, err
}

// resume undoes quiesce. The client socket f is served on, carrying on its
// TLS record layer from rec, only when the last Serve stopped at a frame
// boundary; otherwise it is not served (dropped reports that) and gpud
// lets the client reconnect.
func (w *worker) resume(f *os.File, rec *tlsrec.State) (dropped bool, err error) {
	if s, ok := w.dev.(backend.Suspender); ok {
		w.thread.run(func() { err = s.Resume(context.Background()) })
	}
	if err != nil || f == nil {
		return false, err
	}
	if !w.sess.Resumable() {
		w.log.Warn("the client connection did not stop at a frame boundary; not serving it on, the client reconnects")
		return true, nil
	}
	return false, w.serve(f, rec, true)
}

func (w *worker) stats() *Stats {
	st := &Stats{Serving: w.serving != nil, Executed: w.sess.ExecutedSeq(),
		BytesIn: w.bytesIn.Load(), BytesOut: w.bytesOut.Load(),
		SessionID: w.opts.SessionID, SecretSHA256: w.secretHash, AllocBytes: w.meter.Allocated(), Epoch: w.epoch}
	st.MemInUse = st.AllocBytes
	if m, ok := w.dev.(interface{ MemInUse() uint64 }); ok {
		st.MemInUse = m.MemInUse()
	}
	return st
}

// dropZeroPages drops the zero pages of what was mapped since the
// quiesce: after a driver checkpoint, the driver's copy of the contexts'
// state, hundreds of MiB of mostly zeros that CRIU would otherwise dump
// and restore.
func (w *worker) dropZeroPages() {
	before := w.mapped
	w.mapped = nil
	if before == nil {
		return
	}
	t0 := time.Now()
	d, err := procmem.Drop(context.Background(), before)
	if err != nil {
		w.log.Warn("zero pages could not all be dropped; the dump holds the rest", "err", err)
	}
	if d.Regions > 0 {
		w.log.Info("zero pages dropped before the dump", "regions", d.Regions,
			"resident_mb", d.Scanned>>20, "zero_mb", d.Zero>>20, "took_ms", time.Since(t0).Milliseconds())
	}
}

// detach drops the control connection and waits for SIGUSR2, then dials
// the nonce's abstract socket. In between the worker holds no socket at
// all, which is when CRIU dumps it.
func (w *worker) detach(nonce string) {
	w.mu.Lock()
	c := w.ctrl
	w.ctrl = nil
	w.mu.Unlock()
	c.Close()
	for {
		<-w.usr2
		nc, err := dialBack(nonce)
		if err == nil {
			w.setCtrl(nc)
			return
		}
		// Nobody listening (a stray signal): keep waiting.
	}
}

// dialBack dials gpud's attach socket, retrying briefly: the signal may
// arrive a moment before the listener is visible.
func dialBack(nonce string) (*net.UnixConn, error) {
	var err error
	for i := 0; i < 50; i++ {
		var c *net.UnixConn
		if c, err = net.DialUnix("unixpacket", nil, AttachAddr(nonce)); err == nil {
			return c, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, err
}

// shutdown ends the session and releases the device.
func (w *worker) shutdown() {
	_ = w.endServe()
	w.thread.run(func() { _ = w.meter.Close() })
}

// eventHandler forwards the worker's log records to gpud, which writes
// them to its log with the session attached; a worker has no stderr.
type eventHandler struct {
	w     *worker
	level slog.Level
	attrs []slog.Attr
}

func (h *eventHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *eventHandler) Handle(_ context.Context, r slog.Record) error {
	rec := LogRecord{Level: r.Level.String(), Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.String()
		return true
	})
	_ = h.w.send(reply{Event: evLog, Log: &rec}, -1)
	return nil
}

func (h *eventHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &eventHandler{w: h.w, level: h.level, attrs: append(append([]slog.Attr(nil), h.attrs...), as...)}
}

func (h *eventHandler) WithGroup(string) slog.Handler { return h }

// countingConn counts a client's traffic for gpud's metrics.
type countingConn struct {
	net.Conn
	in, out *atomic.Uint64
}

func (c *countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(uint64(n))
	return n, err
}

func (c *countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(uint64(n))
	return n, err
}
