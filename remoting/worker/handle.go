package worker

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpuctl/gpuctl/childproc"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/dispatch"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
)

// Options describe the worker to start.
type Options struct {
	// Backend is "emulated" or "cuda" (already resolved from "auto").
	Backend string
	// Device is the host GPU the session uses: an ordinal or, for cuda, a
	// UUID.
	Device string
	// SessionID names the session, for logs.
	SessionID string
	// EmulatedMemBytes sizes an emulated device; zero is the default.
	EmulatedMemBytes uint64
	// Seed makes an emulated device's UUID stable (gpud passes its name).
	Seed string
	// Exe is the gpud binary to re-execute; empty means this process's
	// own executable.
	Exe string
	// Log receives the worker's log lines and gpud-side diagnostics.
	Log *slog.Logger
	// Spawner forks workers from a thread that lives as long as gpud, so
	// that their PDEATHSIG fires only when gpud exits. Nil forks from the
	// calling thread (tests).
	Spawner *Spawner
	// ModuleCacheDir is the host's module cache (package modcache),
	// shared by its sessions, and ModuleCacheBytes its bound; an empty
	// directory turns the cache off. A worker learns them with every
	// client it is handed, so a worker restored on another host uses
	// that host's cache.
	ModuleCacheDir   string
	ModuleCacheBytes int64
	// CUDAPlainMemory has a cuda worker serve cuMemAlloc from the
	// driver's allocator (cuda.Options.PlainMemory).
	CUDAPlainMemory bool
}

// Event is an unsolicited report from a worker.
type Event struct {
	// Ended is set when the worker's client went away; Err says why
	// (empty for a clean close).
	Ended bool
	Err   string
	// Goodbye: the client ended the connection with a goodbye (its
	// program exited normally) rather than going away; Epoch is the
	// epoch the worker served it under.
	Goodbye bool
	Epoch   uint64
}

// Handle is gpud's side of one worker process.
type Handle struct {
	pid      int
	cmd      *exec.Cmd // nil for a worker adopted with Reattach
	log      *slog.Logger
	sess     string
	modCache *moduleCache

	// sendMu keeps a request's packets together (sendFiles).
	sendMu  sync.Mutex
	mu      sync.Mutex
	quota   string // gpud's quota service, when the session is metered
	ctrl    *net.UnixConn
	nextID  uint64
	pending map[uint64]chan reply
	ctrlErr error         // why the control connection ended, once it has
	ctrlEnd chan struct{} // closed when the current connection's reader ends

	events chan Event
	exited chan struct{} // closed when the process is gone
	exit   error
}

// Start launches a worker: a re-execution of gpud as `gpud worker`, as PID 1
// of a new PID namespace, in its own process group, with stdio on
// /dev/null and no inherited descriptor but the control socket (fd 3).
func Start(ctx context.Context, opts Options) (*Handle, error) {
	subj := errs.Session(opts.SessionID)
	exe := opts.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, errs.Wrap(err, errs.Internal, subj, "locate gpud's binary")
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, subj, "control socket")
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "control"), os.NewFile(uintptr(fds[1]), "control-worker")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, subj, "control socket")
	}
	args := []string{"worker", "--backend", opts.Backend, "--device", opts.Device, "--session", opts.SessionID}
	if opts.EmulatedMemBytes != 0 {
		args = append(args, "--emulated-mem", fmt.Sprint(opts.EmulatedMemBytes))
	}
	if opts.Seed != "" {
		args = append(args, "--seed", opts.Seed)
	}
	if opts.CUDAPlainMemory {
		args = append(args, "--cuda-plain-memory")
	}
	cmd := Command(exe, nil, args...)
	cmd.ExtraFiles = []*os.File{theirs}
	if err := opts.Spawner.start(cmd); err != nil {
		fc.Close()
		return nil, errs.Wrap(err, errs.Unavailable, subj, "start worker process")
	}
	h := newHandle(cmd.Process.Pid, fc.(*net.UnixConn), opts)
	h.cmd = cmd
	go func() {
		err := cmd.Wait()
		h.setExited(err)
	}()
	// The worker says it is ready (its backend opened) with a first stats
	// reply; a backend that cannot open fails here, not at first call.
	if _, err := h.Stats(ctx); err != nil {
		h.Kill()
		<-h.exited
		return nil, errs.Wrap(err, errs.Unavailable, subj, "worker did not come up")
	}
	return h, nil
}

// workerEnv passes the worker only what it needs from gpud's environment.
func newHandle(pid int, ctrl *net.UnixConn, opts Options) *Handle {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var mc *moduleCache
	if opts.ModuleCacheDir != "" {
		mc = &moduleCache{Dir: opts.ModuleCacheDir, Bytes: opts.ModuleCacheBytes}
	}
	h := &Handle{
		modCache: mc,
		pid:      pid,
		log:      log.With("session", opts.SessionID, "worker_pid", pid),
		sess:     opts.SessionID,
		pending:  map[uint64]chan reply{},
		events:   make(chan Event, 16),
		exited:   make(chan struct{}),
	}
	h.setCtrl(ctrl)
	return h
}

// setCtrl installs a control connection and starts reading it.
func (h *Handle) setCtrl(c *net.UnixConn) {
	end := make(chan struct{})
	h.mu.Lock()
	h.ctrl, h.ctrlErr, h.ctrlEnd = c, nil, end
	h.mu.Unlock()
	go h.readLoop(c, end)
}

func (h *Handle) readLoop(c *net.UnixConn, end chan struct{}) {
	defer close(end)
	for {
		var r reply
		fs, err := recvMsg(c, &r)
		if len(fs) > 0 && (r.ID == 0 || (r.Mem == nil && r.Parked == nil && !r.State)) {
			closeFiles(fs) // only memsave, mempark and reuse replies carry descriptors
			fs = nil
		}
		if len(fs) > 0 {
			r.file, r.files = fs[0], fs
		}
		if err != nil {
			h.ctrlDown(c, err)
			return
		}
		if r.ID == 0 {
			if r.Event == evLog && r.Log != nil {
				h.logRecord(r.Log)
				continue
			}
			if r.Event == evEnded {
				select {
				case h.events <- Event{Ended: true, Err: r.Err, Goodbye: r.Goodbye, Epoch: r.Epoch}:
				default:
					h.log.Warn("worker event dropped", "event", r.Event)
				}
			}
			continue
		}
		h.mu.Lock()
		ch := h.pending[r.ID]
		delete(h.pending, r.ID)
		h.mu.Unlock()
		if ch != nil {
			ch <- r
		} else {
			closeFiles(r.files) // its caller gave up
		}
	}
}

// ctrlDown fails every request waiting on connection c.
func (h *Handle) ctrlDown(c *net.UnixConn, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctrl != c {
		return // an older connection, already replaced
	}
	h.ctrlErr = err
	for id, ch := range h.pending {
		close(ch)
		delete(h.pending, id)
	}
}

func (h *Handle) setExited(err error) {
	h.mu.Lock()
	c := h.ctrl
	h.mu.Unlock()
	if c != nil {
		c.Close()
	}
	h.exit = err
	close(h.exited)
}

// Events delivers the worker's unsolicited reports (its client went
// away). It is never closed; watch Exited too.
func (h *Handle) Events() <-chan Event { return h.events }

// Exited is closed when the worker process is gone.
func (h *Handle) Exited() <-chan struct{} { return h.exited }

// PID is the worker's PID in gpud's PID namespace.
func (h *Handle) PID() int { return h.pid }

// call sends one request, with fd attached when fd >= 0, and waits for
// its reply.
func (h *Handle) call(ctx context.Context, req request, fd int) (reply, error) {
	if fd < 0 {
		return h.callFiles(ctx, req, nil)
	}
	return h.callFiles(ctx, req, []int{fd})
}

// callFiles is call with several descriptors (sendFiles).
func (h *Handle) callFiles(ctx context.Context, req request, fds []int) (reply, error) {
	if len(fds) > 1 {
		req.Files = len(fds)
	}
	subj := errs.Session(h.sess)
	h.mu.Lock()
	c := h.ctrl
	if c == nil || h.ctrlErr != nil {
		err := h.ctrlErr
		h.mu.Unlock()
		return reply{}, errs.Wrap(orClosed(err), errs.Unavailable, subj, "worker control connection is down")
	}
	h.nextID++
	req.ID = h.nextID
	ch := make(chan reply, 1)
	h.pending[req.ID] = ch
	h.mu.Unlock()
	h.sendMu.Lock()
	err := sendFiles(c, req, fds)
	h.sendMu.Unlock()
	if err != nil {
		h.mu.Lock()
		delete(h.pending, req.ID)
		h.mu.Unlock()
		return reply{}, errs.Wrap(err, errs.Unavailable, subj, "send %s to worker", req.Op)
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return reply{}, errs.New(errs.Unavailable, subj, "worker closed its control connection during %s", req.Op)
		}
		if r.Err != "" {
			return r, errs.New(errs.FailedPrecondition, subj, "worker: %s: %s", req.Op, r.Err)
		}
		return r, nil
	case <-ctx.Done():
		h.mu.Lock()
		delete(h.pending, req.ID)
		h.mu.Unlock()
		return reply{}, errs.Wrap(ctx.Err(), errs.Unavailable, subj, "waiting for worker to %s", req.Op)
	case <-h.exited:
		return reply{}, errs.New(errs.Unavailable, subj, "worker exited during %s: %v", req.Op, h.exit)
	}
}

func orClosed(err error) error {
	if err == nil {
		return net.ErrClosed
	}
	return err
}

// withConnFD runs fn with conn's descriptor; the kernel duplicates it into
// the worker when it rides a control message, and gpud keeps its own.
func withConnFD(conn syscall.Conn, fn func(fd int) error) error {
	rc, err := conn.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// SetQuota meters the session against gpud's quota service of that name
// (QuotaServer.Name), or stops metering it for "". It takes effect with
// the next Attach or Resume, when the worker is not serving.
func (h *Handle) SetQuota(name string) {
	h.mu.Lock()
	h.quota = name
	h.mu.Unlock()
}

func (h *Handle) quotaName() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.quota
}

// Attach hands the client's socket to the worker, which serves it; rec is
// the connection's TLS record layer (nil for plaintext), which the worker
// carries on from. resume=false: a new connection (a new session, or a
// client that reconnected), which the worker greets with a Welcome
// carrying welcome's fields and the last executed sequence number.
// resume=true: the socket the worker served before a Quiesce, which needs
// no greeting. epoch is the session's current epoch: a worker at another
// one refuses (fenced), and a new worker takes it.
func (h *Handle) Attach(ctx context.Context, conn *net.TCPConn, rec *tlsrec.State, welcome dispatch.WelcomeInfo, resume bool, epoch uint64) error {
	return withConnFD(conn, func(fd int) error {
		_, err := h.call(ctx, request{Op: opAttach, Welcome: &welcome, Resume: resume, ModuleCache: h.modCache, Quota: h.quotaName(), TLS: rec, Epoch: epoch}, fd)
		return err
	})
}

// Claim moves the worker from epoch from to epoch to. gpud claims the next
// epoch for a worker that goes on after an image of it was stored (a
// checkpoint that leaves it running) and for a worker restored from an
// image: copies at an older epoch (that image, restored; the original,
// thawed after its session moved on) then refuse to serve. A worker not at
// from refuses the claim.
func (h *Handle) Claim(ctx context.Context, from, to uint64) error {
	_, err := h.call(ctx, request{Op: opClaim, From: from, To: to}, -1)
	return err
}

// Quiesce stops the worker at a frame boundary, suspends its device and
// makes it drop its copy of the client socket. Stats then reports the
// last request sequence number the worker executed. For a TLS client it
// returns the connection's record layer where the worker left it: the
// socket's next holder (gpud writing a "moved" notice, or a worker
// resumed on it) carries on from there.
func (h *Handle) Quiesce(ctx context.Context) (*tlsrec.State, error) {
	q, err := h.QuiesceAt(ctx)
	return q.TLS, err
}

// Quiesced is what a Quiesce reports about the client connection.
type Quiesced struct {
	// Boundary: the connection stopped at a frame boundary (or none was
	// being served). Only then may gpud write to its copy of the socket
	// (keepalives, a moved notice) and hand it back with Resume.
	Boundary bool
	// TLS is a TLS connection's record layer where the worker left it
	// (nil for plaintext, and for a connection not stopped at a boundary).
	TLS *tlsrec.State
}

// QuiesceAt is Quiesce, and also reports whether the client connection
// stopped at a frame boundary.
func (h *Handle) QuiesceAt(ctx context.Context) (Quiesced, error) {
	r, err := h.call(ctx, request{Op: opQuiesce}, -1)
	return Quiesced{Boundary: r.Boundary, TLS: r.TLS}, err
}

// ErrConnDropped is returned by Resume when the worker resumed but did not
// serve the socket passed: the connection had not stopped at a frame
// boundary (its Serve ended with an error). The caller closes its copy so
// that the client reconnects, is greeted and resends.
var ErrConnDropped = errors.New("the worker did not serve the client socket on: it had not stopped at a frame boundary")

// Resume undoes Quiesce: the worker runs its backend's Resume hook and,
// when conn is non-nil, serves conn again without a greeting (it is the
// socket gpud kept open while the client stalled), carrying on its TLS
// record layer from rec; see ErrConnDropped. A client that instead
// reconnected on a new socket is handed over with Attach. epoch is checked
// as by Attach.
func (h *Handle) Resume(ctx context.Context, conn *net.TCPConn, rec *tlsrec.State, epoch uint64) error {
	q := h.quotaName()
	if conn == nil {
		_, err := h.call(ctx, request{Op: opResume, ModuleCache: h.modCache, Quota: q, Epoch: epoch}, -1)
		return err
	}
	return withConnFD(conn, func(fd int) error {
		r, err := h.call(ctx, request{Op: opResume, Resume: true, ModuleCache: h.modCache, Quota: q, TLS: rec, Epoch: epoch}, fd)
		if err == nil && r.Dropped {
			return ErrConnDropped
		}
		return err
	})
}

// Stats asks the worker for its counters.
func (h *Handle) Stats(ctx context.Context) (Stats, error) {
	r, err := h.call(ctx, request{Op: opStats}, -1)
	if err != nil || r.Stats == nil {
		return Stats{}, err
	}
	return *r.Stats, nil
}

// Detach makes the worker close its control connection and wait for
// SIGUSR2, after which it dials @gpuctl-attach-<nonce>. A quiesced,
// detached worker holds no sockets: CRIU can dump it.
func (h *Handle) Detach(ctx context.Context, nonce string) error {
	if err := checkNonce(nonce); err != nil {
		return errs.Wrap(err, errs.InvalidArgument, errs.Session(h.sess), "detach")
	}
	if _, err := h.call(ctx, request{Op: opDetach, Nonce: nonce}, -1); err != nil {
		return err
	}
	h.mu.Lock()
	c, end := h.ctrl, h.ctrlEnd
	h.mu.Unlock()
	// The worker closes its end after replying; only then does it hold no
	// socket, which is what the caller (about to dump it) relies on.
	var err error
	select {
	case <-end:
	case <-ctx.Done():
		err = errs.Wrap(ctx.Err(), errs.Unavailable, errs.Session(h.sess), "worker did not close its control connection")
	case <-h.exited:
		err = errs.New(errs.Unavailable, errs.Session(h.sess), "worker exited while detaching")
	}
	h.mu.Lock()
	h.ctrl, h.ctrlErr = nil, errors.New("detached")
	h.mu.Unlock()
	c.Close()
	return err
}

func checkNonce(nonce string) error {
	if nonce == "" || len(nonce) > 64 {
		return fmt.Errorf("nonce must be 1 to 64 characters, got %d", len(nonce))
	}
	for _, r := range nonce {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("nonce %q: only letters, digits, '-' and '_'", nonce)
		}
	}
	return nil
}

// AttachAddr is the abstract unix socket a detached worker dials.
func AttachAddr(nonce string) *net.UnixAddr {
	return &net.UnixAddr{Name: "@gpuctl-attach-" + nonce, Net: "unixpacket"}
}

// reattachTimeout bounds how long Reattach waits for the worker to dial.
const reattachTimeout = 10 * time.Second

// Reattach takes control of a detached worker: after a CRIU restore (the
// restored process is reparented to gpud, the subreaper) or after a
// checkpoint that leaves the session running. It listens on the nonce's
// abstract socket, sends SIGUSR2 to pid and accepts the worker's call.
//
// A worker that is not gpud's own child (restored by CRIU) is reaped by
// gpud's reaper, not by the Handle; reaped, when non-nil, is closed when
// the process is gone.
func Reattach(ctx context.Context, pid int, nonce string, reaped <-chan struct{}, opts Options) (*Handle, error) {
	subj := errs.Session(opts.SessionID)
	if err := checkNonce(nonce); err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, subj, "reattach")
	}
	ln, err := net.ListenUnix("unixpacket", AttachAddr(nonce))
	if err != nil {
		return nil, errs.Wrap(err, errs.Unavailable, subj, "listen for the worker")
	}
	defer ln.Close()
	if err := unix.Kill(pid, unix.SIGUSR2); err != nil {
		return nil, errs.Wrap(err, errs.Unavailable, subj, "signal worker %d", pid)
	}
	deadline := time.Now().Add(reattachTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = ln.SetDeadline(deadline)
	c, err := ln.AcceptUnix()
	if err != nil {
		return nil, errs.Wrap(err, errs.Unavailable, subj, "worker %d did not dial back", pid)
	}
	if err := checkPeer(c, pid); err != nil {
		c.Close()
		return nil, errs.Wrap(err, errs.Unavailable, subj, "reattach")
	}
	h := newHandle(pid, c, opts)
	go func() {
		if reaped == nil {
			// Poll for the process; it is not our child to wait for.
			for !gone(pid) {
				time.Sleep(200 * time.Millisecond)
			}
		} else {
			<-reaped
		}
		h.setExited(errors.New("worker exited"))
	}()
	if _, err := h.Stats(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return h, nil
}

// checkPeer makes sure the process that dialled the attach socket is the
// worker we signalled, so another process in the namespace cannot take
// over the session.
func checkPeer(c *net.UnixConn, pid int) error {
	var cred *unix.Ucred
	err := withConnFD(c, func(fd int) error {
		var err error
		cred, err = unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		return err
	})
	if err != nil {
		return err
	}
	if int(cred.Pid) != pid {
		return fmt.Errorf("attach socket dialled by pid %d, expected %d", cred.Pid, pid)
	}
	return nil
}

// Exit asks the worker to release its device and exit, and waits for it;
// after timeout it is killed.
func (h *Handle) Exit(ctx context.Context) error {
	_, err := h.call(ctx, request{Op: opExit}, -1)
	select {
	case <-h.exited:
		return nil
	case <-time.After(5 * time.Second):
	case <-ctx.Done():
	}
	h.Kill()
	<-h.exited
	return err
}

// Kill ends the worker at once. As PID 1 of its namespace it ignores
// every signal it does not handle, so this is SIGKILL.
func (h *Handle) Kill() {
	select {
	case <-h.exited:
		return
	default:
	}
	// Between the check above and here the reaper may have reaped the
	// worker and its PID gone to another process: signal only our child.
	_ = childproc.Kill(h.pid)
}

// Wait blocks until the worker is gone.
func (h *Handle) Wait() error {
	<-h.exited
	return h.exit
}

// logRecord writes a worker's forwarded log line to gpud's log.
func (h *Handle) logRecord(r *LogRecord) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(r.Level)); err != nil {
		lvl = slog.LevelInfo
	}
	args := make([]any, 0, 2*len(r.Attrs))
	for k, v := range r.Attrs {
		args = append(args, k, v)
	}
	h.log.Log(context.Background(), lvl, "worker: "+r.Msg, args...)
}

// SaveMem asks the worker to save its device memory (package devmem) and
// returns the memfd holding it. The worker must be quiesced. A worker
// whose backend cannot save its memory answers with an error. req.Into,
// when set, goes along as a descriptor; the caller keeps its own.
func (h *Handle) SaveMem(ctx context.Context, req devmem.SaveRequest) (*os.File, devmem.Saved, error) {
	fd := -1
	if req.Into != nil {
		fd = int(req.Into.Fd())
	}
	r, err := h.call(ctx, request{Op: opMemSave, MemSave: &req}, fd)
	if err != nil {
		if r.file != nil {
			r.file.Close()
		}
		return nil, devmem.Saved{}, err
	}
	if r.Mem == nil || r.file == nil {
		return nil, devmem.Saved{}, errs.New(errs.Internal, errs.Session(h.sess), "worker: memsave: no memory file in the reply")
	}
	return r.file, *r.Mem, nil
}

// ReloadMem asks the worker to back its device memory again and copy it
// from f, whose layout is at layoutOff (layoutLen bytes).
func (h *Handle) ReloadMem(ctx context.Context, f *os.File, layoutOff, layoutLen int64) error {
	_, err := h.call(ctx, request{Op: opMemReload, MemLayout: &[2]int64{layoutOff, layoutLen}}, int(f.Fd()))
	return err
}

// PatchMem asks the quiesced worker to copy the blocks want marks (one
// bit per block) from the save in f into its device memory, which holds
// an earlier save of the same regions.
func (h *Handle) PatchMem(ctx context.Context, f *os.File, layoutOff, layoutLen int64, want []byte) error {
	_, err := h.call(ctx, request{Op: opMemPatch, MemLayout: &[2]int64{layoutOff, layoutLen}, MemPatch: want}, int(f.Fd()))
	return err
}

// PrecopyMem asks the worker for a pre-copy round (package devmem): the
// device memory that changed since round req.Base, read while the session
// runs, in a memfd. A worker whose backend cannot save its memory answers
// with an error.
func (h *Handle) PrecopyMem(ctx context.Context, req devmem.PrecopyRequest) (*os.File, devmem.Saved, error) {
	fd := -1
	if req.Into != nil {
		fd = int(req.Into.Fd())
	}
	r, err := h.call(ctx, request{Op: opMemPrecopy, MemPrecopy: &req}, fd)
	if err != nil {
		if r.file != nil {
			r.file.Close()
		}
		return nil, devmem.Saved{}, err
	}
	if r.Mem == nil || r.file == nil {
		return nil, devmem.Saved{}, errs.New(errs.Internal, errs.Session(h.sess), "worker: memprecopy: no memory file in the reply")
	}
	return r.file, *r.Mem, nil
}

// ParkMem asks the quiesced worker to park its device memory
// (devmem.Tracker.Park) and returns the descriptors that now hold it; the
// caller must give them back with UnparkMem, or close them, which frees
// the memory. A backend that cannot park answers with an error and has
// changed nothing.
func (h *Handle) ParkMem(ctx context.Context) ([]*os.File, devmem.Parked, error) {
	r, err := h.call(ctx, request{Op: opMemPark}, -1)
	if err != nil {
		closeFiles(r.files)
		return nil, devmem.Parked{}, err
	}
	if r.Parked == nil || len(r.files) != r.Parked.Files {
		closeFiles(r.files)
		return nil, devmem.Parked{}, errs.New(errs.Internal, errs.Session(h.sess), "worker: mempark: %d descriptors in the reply", len(r.files))
	}
	return r.files, *r.Parked, nil
}

// UnparkMem gives parked memory back to the quiesced worker; the caller
// keeps files (the worker maps its own copies).
func (h *Handle) UnparkMem(ctx context.Context, files []*os.File, req devmem.UnparkRequest) error {
	fds := make([]int, len(files))
	for i, f := range files {
		fds[i] = int(f.Fd())
	}
	_, err := h.callFiles(ctx, request{Op: opMemUnpark, MemUnpark: &req}, fds)
	return err
}

// ReuseDump asks the quiesced worker whether it is, but for its device
// memory and protocol state, what it was when dumped for nonce (reuse.go).
// It returns that protocol state in a memfd, or nil and why not.
func (h *Handle) ReuseDump(ctx context.Context, nonce string) (*os.File, string, error) {
	r, err := h.call(ctx, request{Op: opReuse, Nonce: nonce}, -1)
	if err != nil {
		if r.file != nil {
			r.file.Close()
		}
		return nil, "", err
	}
	if r.file == nil && r.Reason == "" {
		return nil, "", errs.New(errs.Internal, errs.Session(h.sess), "worker: reuse: neither a protocol state nor a reason in the reply")
	}
	return r.file, r.Reason, nil
}

// ImportState puts the protocol state in f (what ReuseDump returned,
// stored with an image) into a worker restored from the dump it reused,
// and moves the worker to the image's epoch.
func (h *Handle) ImportState(ctx context.Context, f *os.File, epoch uint64) error {
	_, err := h.call(ctx, request{Op: opImport, Epoch: epoch}, int(f.Fd()))
	return err
}
