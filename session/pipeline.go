package session

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
	"github.com/gpuctl/gpuctl/remoting/wire"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/restore"
)

// The Manager is the session table of the checkpoint, migration and
// restore pipelines: it implements checkpoint.Sessions,
// checkpoint.Reattacher and restore.Adopter.
var (
	_ checkpoint.Sessions   = (*Manager)(nil)
	_ checkpoint.Reattacher = (*Manager)(nil)
	_ restore.Adopter       = (*Manager)(nil)
)

// sessionWorker adapts a worker handle to checkpoint.Worker: Resume hands
// the worker the client socket gpud kept, if the session has one.
type sessionWorker struct {
	m  *Manager
	id string
	h  *worker.Handle
}

func (w *sessionWorker) PID() int                                   { return w.h.PID() }
func (w *sessionWorker) Detach(ctx context.Context, n string) error { return w.h.Detach(ctx, n) }

// Quiesce stops the worker. A TLS client's record layer comes back with
// it, for gpud to hold with the socket. While the session is quiesced gpud
// keeps the client alive on that socket, if the client asked for that and
// the connection stopped at a frame boundary; one that did not is never
// written to or served on again (dropUnusable).
func (w *sessionWorker) Quiesce(ctx context.Context) error {
	q, err := w.h.QuiesceAt(ctx)
	w.m.mu.Lock()
	if s, ok := w.m.sessions[w.id]; ok && s.worker == w.h && s.conn != nil {
		s.tlsState = q.TLS
		s.midFrame = err == nil && !q.Boundary
		if err == nil && q.Boundary {
			w.m.startKeeping(s)
		}
	}
	w.m.mu.Unlock()
	return err
}

func (w *sessionWorker) Resume(ctx context.Context) error {
	w.m.mu.Lock()
	conn, rec := w.m.heldClient(w.id)
	epoch := w.m.epochOf(w.id)
	w.m.mu.Unlock()
	err := w.h.Resume(ctx, conn, rec, epoch)
	if errors.Is(err, worker.ErrConnDropped) {
		// The worker runs without its client: let the client go, so that
		// it reconnects and resends what the worker never executed.
		w.m.mu.Lock()
		if s, ok := w.m.sessions[w.id]; ok && s.conn == conn {
			w.m.closeConn(s)
			if s.rec.State == Running {
				_ = w.m.setState(s, Detached)
			}
		}
		w.m.mu.Unlock()
		w.m.log.Warn("client connection not served on after a checkpoint; the client reconnects", "session", w.id)
		return nil
	}
	if err != nil {
		return err
	}
	w.m.mu.Lock()
	if s, ok := w.m.sessions[w.id]; ok && s.conn == conn {
		s.tlsState, s.midFrame = nil, false // the worker carries on now
	}
	w.m.mu.Unlock()
	return nil
}

// SaveMem and ReloadMem make the worker a checkpoint.MemWorker.
func (w *sessionWorker) SaveMem(ctx context.Context, req devmem.SaveRequest) (*os.File, devmem.Saved, error) {
	return w.h.SaveMem(ctx, req)
}

func (w *sessionWorker) ReloadMem(ctx context.Context, f *os.File, off, n int64) error {
	return w.h.ReloadMem(ctx, f, off, n)
}

// PatchMem makes the worker a checkpoint.MemPatcher.
func (w *sessionWorker) PatchMem(ctx context.Context, f *os.File, off, n int64, want []byte) error {
	return w.h.PatchMem(ctx, f, off, n, want)
}

// ReuseDump and ImportState make the worker a checkpoint.Reuser and a
// checkpoint.StateImporter.
func (w *sessionWorker) ReuseDump(ctx context.Context, nonce string) (*os.File, string, error) {
	return w.h.ReuseDump(ctx, nonce)
}

func (w *sessionWorker) ImportState(ctx context.Context, f *os.File, epoch uint64) error {
	return w.h.ImportState(ctx, f, epoch)
}

// ParkMem and UnparkMem make the worker a checkpoint.MemParker.
func (w *sessionWorker) ParkMem(ctx context.Context) ([]*os.File, devmem.Parked, error) {
	return w.h.ParkMem(ctx)
}

func (w *sessionWorker) UnparkMem(ctx context.Context, files []*os.File, req devmem.UnparkRequest) error {
	return w.h.UnparkMem(ctx, files, req)
}

// MemBytes makes the worker a checkpoint.MemSizer: the device memory its
// session holds, as the worker counts it.
func (w *sessionWorker) MemBytes(ctx context.Context) (int64, error) {
	st, err := w.h.Stats(ctx)
	return int64(st.MemInUse), err
}

// PrecopyMem runs a pre-copy round on the running worker (a live
// migration, package precopy).
func (w *sessionWorker) PrecopyMem(ctx context.Context, req devmem.PrecopyRequest) (*os.File, devmem.Saved, error) {
	return w.h.PrecopyMem(ctx, req)
}

// Live is the worker of a running or detached session, for work that
// leaves the session running (a migration's pre-copy); unlike Begin it
// changes nothing.
func (m *Manager) Live(id string) (checkpoint.Worker, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil {
		return nil, err
	}
	if s.worker == nil || (s.rec.State != Running && s.rec.State != Detached) {
		return nil, errs.New(errs.FailedPrecondition, errs.Session(id), "session is %s, not running on this host", s.rec.State)
	}
	return &sessionWorker{m: m, id: id, h: s.worker}, nil
}

// Handle is the underlying worker handle.
func (w *sessionWorker) Handle() *worker.Handle { return w.h }

// Epoch is the session's current epoch, which a checkpoint records in its
// image.
func (w *sessionWorker) Epoch() uint64 {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	return w.m.epochOf(w.id)
}

// Fence moves the session and its worker to the next epoch: the worker
// goes on past an image just stored of it, which keeps the old epoch and
// can then never serve while this worker does. A worker that is not at
// the session's epoch (a stale copy: the original thawed after its
// session moved on) refuses, and so does its session here.
func (w *sessionWorker) Fence(ctx context.Context) error {
	w.m.mu.Lock()
	from := w.m.epochOf(w.id)
	w.m.mu.Unlock()
	if err := w.h.Claim(ctx, from, from+1); err != nil {
		return errs.Wrap(err, errs.FailedPrecondition, errs.Session(w.id), "epoch %d", from)
	}
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	if s, ok := w.m.sessions[w.id]; ok && s.rec.Epoch == from {
		s.rec.Epoch = from + 1
		w.m.persist(s)
	}
	return nil
}

func (m *Manager) session(id string) (*Session, error) {
	s, ok := m.sessions[id]
	if !ok {
		return nil, errNoSession(id)
	}
	return s, nil
}

// epochOf is the session's current epoch, or 0; the caller holds m.mu.
func (m *Manager) epochOf(id string) uint64 {
	if s, ok := m.sessions[id]; ok {
		return s.rec.Epoch
	}
	return 0
}

// heldClient is gpud's copy of the session's client socket and, for TLS,
// its record layer; nil when gpud holds none or none that can be served
// on. The worker takes the socket back: gpud's keepalives on it stop. The
// caller holds m.mu.
func (m *Manager) heldClient(id string) (*net.TCPConn, *tlsrec.State) {
	s, ok := m.sessions[id]
	if !ok {
		return nil, nil
	}
	m.stopKeeping(s)
	m.dropUnusable(s)
	return s.conn, s.tlsState
}

// dropUnusable closes a held socket that nobody can speak on any more,
// so that its client reconnects (and is greeted, and resends): one whose
// worker did not stop at a frame boundary (part of a frame may be on the
// wire, or read and lost), or a TLS one whose record layer gpud does not
// know (a quiesce that failed before handing it back). The caller holds
// m.mu.
func (m *Manager) dropUnusable(s *Session) {
	switch {
	case s.conn == nil:
	case s.midFrame:
		m.log.Warn("the client connection did not stop at a frame boundary; closing it so that the client reconnects", "session", s.rec.ID)
		m.closeConn(s)
	case s.overTLS && s.tlsState == nil:
		m.log.Warn("the client's TLS record layer was not handed back; closing its connection so that it reconnects", "session", s.rec.ID)
		m.closeConn(s)
	}
}

// Begin claims a running or detached session for a checkpoint.
func (m *Manager) Begin(ctx context.Context, id string) (checkpoint.Worker, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil {
		return nil, err
	}
	if s.worker == nil {
		return nil, errs.New(errs.FailedPrecondition, errs.Session(id), "session has no worker on this host")
	}
	if err := m.setState(s, Quiescing); err != nil {
		return nil, err
	}
	return &sessionWorker{m: m, id: id, h: s.worker}, nil
}

// Dumped records that the session is in an image.
func (m *Manager) Dumped(id string) error { return m.Transition(id, Checkpointing) }

// Migrating records that another host is restoring the session.
func (m *Manager) Migrating(id string) error { return m.Transition(id, Migrating) }

// Resumed records that the session runs here again, served by w.
func (m *Manager) Resumed(id string, w checkpoint.Worker) error {
	sw, ok := w.(*sessionWorker)
	if !ok {
		return errs.New(errs.Internal, errs.Session(id), "resumed with a worker gpud did not make")
	}
	m.mu.Lock()
	s, err := m.session(id)
	if err != nil {
		m.mu.Unlock()
		return err
	}
	changed := s.worker != sw.h
	s.worker = sw.h
	s.rec.WorkerPID = sw.h.PID()
	to := Running
	if s.conn == nil {
		to = Detached
	}
	err = nil
	if s.rec.State != to {
		err = m.setState(s, to)
	} else {
		m.persist(s)
	}
	exited := s.exited
	m.mu.Unlock()
	if changed {
		m.watch(id, sw.h)
	}
	if exited {
		m.endExited(id)
	}
	return err
}

// Moved sends the session's client a "moved to addr" notice on the socket
// gpud kept, then lets go of it: the client reconnects there.
func (m *Manager) Moved(id, addr string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil {
		return err
	}
	s.movedTo = addr
	// The copy here is superseded by the one the target adopted (which
	// claimed the next epoch): the frozen worker here can never serve
	// again, even if something thawed it.
	s.rec.Epoch++
	m.persist(s)
	m.stopKeeping(s)
	m.dropUnusable(s)
	if s.conn == nil {
		return nil // no client attached: a reconnect here is sent there
	}
	var w io.Writer = s.conn
	if s.overTLS {
		tc, err := tlsrec.New(s.conn, *s.tlsState)
		if err != nil {
			m.closeConn(s)
			return errs.Wrap(err, errs.Internal, errs.Session(id), "the client's TLS record layer")
		}
		defer tc.Forget()
		w = tc
	}
	err = wire.WriteMoved(w, addr)
	conn := s.conn
	s.conn = nil
	m.closeConn(s)
	lingerClose(conn)
	return errs.Wrap(err, errs.Unavailable, errs.Session(id), "tell the client it moved to %s", addr)
}

// lingerMax bounds how long a moved client's socket is read after the
// notice.
const lingerMax = 5 * time.Second

// lingerClose closes a client's socket after the moved notice: it stops
// writing, then reads and drops what the client had sent ahead (requests
// the quiesced worker never read) until the client closes its side or
// lingerMax passes. Closing with those bytes unread would reset the
// connection, and a reset can destroy the notice before the client reads
// it: a migration that takes milliseconds catches the client mid-send.
func lingerClose(c *net.TCPConn) {
	if err := c.CloseWrite(); err != nil {
		c.Close()
		return
	}
	go func() {
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(lingerMax))
		_, _ = io.Copy(io.Discard, c)
	}()
}

// Released records that the session's worker here is gone: the session
// lives in its image or on another host. It stays listed as stopped for
// StoppedRetention; gpud holds its client's socket for the grace period
// (the client stalls, as it would during a long call), so that a restore
// here picks the client up where it stopped, and a client that comes back
// later is told to retry (or, after a migration, where to go).
func (m *Manager) Released(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil {
		return err
	}
	s.worker = nil
	s.rec.WorkerPID = 0
	s.stats.MemInUse = 0
	if s.held > 0 {
		s.held = 0
		m.freed()
	}
	return m.setState(s, Stopped)
}

// SetImage records image as what live session id was restored from, when
// it has none yet: a session a memory pre-copy brought here was adopted
// before its image existed, and the image it arrived in (pushed after)
// is the parent of its next checkpoint. It reports whether it did.
func (m *Manager) SetImage(id, image string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil || s.rec.Image != "" || s.worker == nil {
		return false
	}
	s.rec.Image = image
	m.persist(s)
	return true
}

// LastImage is the image the session was last restored from here, or "".
func (m *Manager) LastImage(_ context.Context, id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil {
		return "", err
	}
	return s.rec.Image, nil
}

// Admit says whether an image of session id taken at epoch may be
// restored here: not while the session runs here (a stopped or
// preempted session waits in its image), and not when the
// session has reached a later epoch here since the image was taken (a
// newer copy ran; this one would run the session twice or rewind it).
// Both are refused before anything is restored, and again by Adopt.
func (m *Manager) Admit(id string, epoch uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return nil
	}
	if s.live() {
		return errs.New(errs.AlreadyExists, errs.Session(id), "session is already live on this host")
	}
	if epoch < s.rec.Epoch {
		return errs.New(errs.FailedPrecondition, errs.Session(id),
			"fenced: the image holds epoch %d and the session reached epoch %d here since; a newer copy has run, and restoring this one would run the session twice: restore the session's latest image", epoch, s.rec.Epoch)
	}
	return nil
}

// Reattach takes control of a detached worker (the original after a
// checkpoint, or a restored copy) through the nonce's socket.
func (m *Manager) Reattach(ctx context.Context, pid int, nonce string) (checkpoint.Worker, error) {
	m.mu.Lock()
	var reaped <-chan struct{}
	for _, s := range m.sessions {
		if s.worker != nil && s.worker.PID() == pid {
			reaped = s.worker.Exited() // still our own child: its first handle reaps it
		}
	}
	m.mu.Unlock()
	if reaped == nil && m.cfg.Reaper != nil {
		// Not a process gpud started (a CRIU restore, reparented to gpud
		// as subreaper): the reaper collects it.
		reaped = m.cfg.Reaper.Adopt(pid)
	}
	opts := m.cfg.Worker
	if opts.Log == nil {
		opts.Log = m.log
	}
	h, err := worker.Reattach(ctx, pid, nonce, reaped, opts)
	if err != nil {
		return nil, err
	}
	m.cfg.Metrics.workerStarts.WithLabelValues("reattach").Inc()
	st, err := h.Stats(ctx)
	if err != nil {
		return nil, err
	}
	// A session of this host (a checkpoint that left it running, or one
	// that failed) stays metered as it was; a restored one is set up by
	// Adopt.
	m.mu.Lock()
	if s, ok := m.sessions[st.SessionID]; ok {
		limits, _ := m.limits(s.rec.Tenant)
		h.SetQuota(m.quotaFor(limits))
	}
	m.mu.Unlock()
	return &sessionWorker{m: m, id: st.SessionID, h: h}, nil
}

// Adopt registers a restored session, detached and waiting for its client,
// served by w (from Reattach). The worker is resumed (its backend's
// in-process hook) without a client; the client's reconnect attaches.
//
// The session belongs to owner, the tenant that owns its image (empty
// for the administrator). This host must know that tenant, and the
// session must fit the tenant's limits here (max_sessions, and its
// allocations within max_mem_bytes); otherwise it is refused before it
// is registered, and the caller ends the worker.
func (m *Manager) Adopt(ctx context.Context, id string, w checkpoint.Worker, image, owner string) error {
	sw, ok := w.(*sessionWorker)
	if !ok {
		return errs.New(errs.Internal, errs.Session(id), "adopt: a worker gpud did not make")
	}
	// Each part is in a migration's downtime: the log line says where
	// its time went.
	t0 := time.Now()
	var lap []any
	mark := func(name string) {
		now := time.Now()
		lap = append(lap, name+"_ms", now.Sub(t0).Milliseconds())
		t0 = now
	}
	st, err := sw.h.Stats(ctx)
	if err != nil {
		return err
	}
	mark("stats")
	if st.SessionID != id {
		return errs.New(errs.DataLoss, errs.Session(id), "the restored worker serves session %q", st.SessionID)
	}
	if len(st.SecretSHA256) != 32 {
		return errs.New(errs.DataLoss, errs.Session(id), "the restored worker holds no session secret")
	}
	// Fence: the restored worker holds the epoch of its image. An image
	// older than the session's epoch here was taken before a newer copy
	// ran; restoring it would run the session twice (or rewind it). The
	// restored worker claims the next epoch, so that the image, restored
	// again, is refused in turn.
	if err := m.Admit(id, st.Epoch); err != nil {
		return err
	}
	m.mu.Lock()
	next := max(st.Epoch, m.epochOf(id)) + 1
	m.mu.Unlock()
	if err := sw.h.Claim(ctx, st.Epoch, next); err != nil {
		return errs.Wrap(err, errs.FailedPrecondition, errs.Session(id), "restored worker")
	}
	mark("claim")
	m.mu.Lock()
	limits, err := m.admit(owner)
	if err == nil {
		err = m.fits(owner, limits, id, st.AllocBytes)
	}
	if err != nil {
		m.mu.Unlock()
		return errs.Wrap(err, errs.KindOf(err), errs.Session(id), "cannot run here")
	}
	var (
		held    *net.TCPConn
		heldTLS bool
		heldRec *tlsrec.State
		ka      time.Duration
	)
	var prio int32
	var labels api.Labels
	if old, dup := m.sessions[id]; dup {
		prio, labels = old.rec.Priority, old.rec.Labels
		if old.live() {
			m.mu.Unlock()
			return errs.New(errs.AlreadyExists, errs.Session(id), "session is already live on this host")
		}
		// Restored where it was checkpointed: take over the stopped
		// entry and the client socket it may still hold, with its TLS
		// record layer.
		m.stopKeeping(old)
		m.dropUnusable(old)
		held, heldTLS, heldRec, ka = old.conn, old.overTLS, old.tlsState, old.keepalive
		old.conn, old.overTLS, old.tlsState = nil, false, nil
		if old.timer != nil {
			old.timer.Stop()
		}
	}
	if m.closed {
		m.mu.Unlock()
		if held != nil {
			held.Close()
		}
		return errs.New(errs.Unavailable, errs.Session(id), "gpud is shutting down")
	}
	state := Detached
	if held != nil {
		state = Running
	}
	s := &Session{
		rec: Record{
			ID: id, SecretHash: bytes.Clone(st.SecretSHA256), State: state, Created: time.Now().UTC(),
			Backend: m.cfg.Worker.Backend, Device: m.cfg.Worker.Device, WorkerPID: sw.h.PID(), Image: image,
			Tenant: owner, Epoch: next, Priority: prio, Labels: labels,
		},
		worker:    sw.h,
		conn:      held,
		overTLS:   heldTLS,
		tlsState:  heldRec,
		keepalive: ka,
		stats:     st,
		held:      st.AllocBytes,
	}
	s.activeAt = time.Now()
	sw.h.SetQuota(m.quotaFor(limits))
	if held != nil {
		s.rec.Client = held.RemoteAddr().String()
	}
	m.sessions[id] = s
	if state == Detached {
		m.armTimer(s, m.cfg.Grace)
	}
	m.persist(s)
	m.mu.Unlock()
	mark("record")
	m.watch(id, sw.h)
	// Resume the backend; a held client is served again on its own
	// socket, with no greeting: it never left.
	if err := sw.Resume(ctx); err != nil {
		m.end(id, "resume after restore failed")
		return err
	}
	mark("resume")
	m.log.Info("restored session adopted; waiting for its client", append([]any{"session", id, "image", image, "worker_pid", sw.h.PID()}, lap...)...)
	return nil
}
