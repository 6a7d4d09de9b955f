package session

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"github.com/gpuctl/gpuctl/ids"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/dispatch"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
	"github.com/gpuctl/gpuctl/remoting/wire"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/tenant"
)

// DefaultGrace is how long a detached session waits for its client.
const DefaultGrace = 30 * time.Second

// Config configures a Manager.
type Config struct {
	// Host is this host's name, shown in listings.
	Host string
	// Grace is how long a session whose client disconnected keeps its
	// worker for a reconnect; zero means DefaultGrace.
	Grace time.Duration
	// Worker is the template for starting workers; SessionID is filled in.
	Worker worker.Options
	// Records persists session records; nil keeps them in memory only.
	Records Records
	// Tenants are the host's tenants and their limits; nil knows none.
	Tenants Tenants
	// QuotaSocket names gpud's quota service (worker.QuotaServer), which
	// the workers of tenants with a memory limit ask before they hold
	// more; the Manager is its ledger. Empty: memory is not metered.
	QuotaSocket string
	// Keepalive is how often a client that asks for keepalives gets one
	// while its session is busy or quiesced; zero means
	// wire.DefaultKeepalive.
	Keepalive time.Duration
	// DeviceBytes is the device memory the host's sessions share. When
	// set, every session is metered (QuotaSocket must be set too) and an
	// allocation past it asks the Preempter (SetPreempter) for room, or
	// fails with CUDA_ERROR_OUT_OF_MEMORY. Zero: not accounted.
	DeviceBytes uint64
	// Reaper reaps adopted (restored) workers; may be nil.
	Reaper  *worker.Reaper
	Metrics *Metrics
	Log     *slog.Logger
}

// Manager owns the host's sessions.
type Manager struct {
	cfg Config
	log *slog.Logger
	rec records

	mu       sync.Mutex
	sessions map[string]*Session
	starting map[string]int // sessions being created, by tenant
	closed   bool
	wg       sync.WaitGroup // watchers

	// preempter makes room on the device; nil: nothing is preempted.
	preempter Preempter
}

// Session is one live session. Its fields are guarded by the Manager's
// mutex.
type Session struct {
	rec    Record
	worker *worker.Handle
	conn   *net.TCPConn // gpud's copy of the attached client's socket
	// overTLS: conn is a TLS connection. tlsState is its record layer
	// while gpud alone holds conn (a quiesce handed it back); nil while a
	// worker serves conn, when only the worker knows where it stands.
	overTLS  bool
	tlsState *tlsrec.State
	// timer ends a detached session after the grace period, and lets go
	// of a stopped session's client and later of the session.
	timer *time.Timer
	// timerGen tells the current timer from one stopped too late.
	timerGen *struct{ _ byte }
	// movedTo is where a migrated session went: a client that comes
	// back here is sent there.
	movedTo string
	// stats is the last report from the worker, for listings and metrics.
	stats worker.Stats
	// ending is set when gpud itself ends the worker, so its exit is not
	// taken for a crash.
	ending bool
	// held is the device memory the quota ledger counts for the session:
	// what its worker was last granted.
	held uint64
	// keepalive is the keepalive interval conn's client asked for (0:
	// none), and keeping the goroutine that sends them while gpud holds
	// conn for a quiesced session.
	keepalive time.Duration
	keeping   *keeper
	// midFrame: the worker quiesced without stopping conn at a frame
	// boundary, so conn can be neither written to nor served on again.
	midFrame bool
	// activeAt is when the session was last seen executing calls (a
	// listing's figures moved): preemption takes the least recently
	// active of one priority first.
	activeAt time.Time
	// waiting is set while the session's worker waits for gpud to make
	// room for an allocation: it is not preempted meanwhile.
	waiting bool
	// want is what a waiting session asked to hold; the ledger counts it
	// as taken until the answer.
	want uint64
	// exited: the client's program exited (it said goodbye) while a
	// checkpoint or migration held the session; it ends when the
	// session runs here again (goodbye.go).
	exited bool
}

// NewManager returns a manager. Records left by an earlier gpud run are
// loaded: their workers died with that gpud, so live states become
// stopped.
func NewManager(cfg Config) (*Manager, error) {
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	m := &Manager{cfg: cfg, log: log, rec: records{cfg.Records}, sessions: map[string]*Session{}, starting: map[string]int{}}
	recs, err := m.rec.list()
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.State == Preempted {
			// It waits in its image for the preempter to resume it.
			m.sessions[r.ID] = &Session{rec: r}
			continue
		}
		if r.State == Stopped {
			// It lives in an image: keep answering its client until its
			// retention ends.
			s := &Session{rec: r}
			m.sessions[r.ID] = s
			m.armTimer(s, max(time.Until(r.StoppedAt.Add(StoppedRetention)), time.Second))
			continue
		}
		log.Info("session's worker did not survive gpud's restart", "session", r.ID, "was", r.State)
		if err := m.rec.delete(r.ID); err != nil {
			return nil, err
		}
	}
	cfg.Metrics.sessions = m.countStates
	cfg.Metrics.live = m.liveTotals
	return m, nil
}

// newID is a new session's id (the one format package ids defines) and
// the secret only its client learns.
func newID() (id, secret string, err error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	return ids.NewSession(), hex.EncodeToString(b[:]), nil
}

func hashSecret(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// persist writes s's record; the caller holds m.mu.
func (m *Manager) persist(s *Session) {
	if err := m.rec.put(s.rec); err != nil {
		m.log.Error("persist session", "session", s.rec.ID, "err", err)
	}
}

// setState moves s to state to if the table allows it; the caller holds
// m.mu.
func (m *Manager) setState(s *Session, to State) error {
	if err := checkTransition(s.rec.ID, s.rec.State, to); err != nil {
		return err
	}
	m.log.Info("session state", "session", s.rec.ID, "from", s.rec.State, "to", to)
	s.rec.State = to
	switch to {
	case Detached:
		m.armTimer(s, m.cfg.Grace)
	case Preempted:
		if s.conn != nil {
			m.armTimer(s, m.cfg.Grace) // hold the client, then let it retry
		} else if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
	case Stopped:
		s.rec.StoppedAt = time.Now().UTC()
		if s.conn != nil {
			m.armTimer(s, m.cfg.Grace) // hold the client, then let it go
		} else {
			m.armTimer(s, StoppedRetention)
		}
	default:
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
	}
	m.persist(s)
	return nil
}

// StoppedRetention is how long a stopped session (one that lives in an
// image) stays listed, answering its client's reconnects with "retry"
// (or "moved"), before it is forgotten.
const StoppedRetention = 10 * time.Minute

// armTimer (re)starts the session's timer; the caller holds m.mu.
func (m *Manager) armTimer(s *Session, d time.Duration) {
	if s.timer != nil {
		s.timer.Stop()
	}
	id := s.rec.ID
	gen := new(struct{ _ byte }) // identifies this arming of the timer
	s.timerGen = gen
	s.timer = time.AfterFunc(d, func() { m.expire(id, gen) })
}

// expire acts on a session whose timer ran out: a detached session's
// client did not come back (end it); a stopped session has held its
// client long enough (let go of the socket) or been listed long enough
// (forget it).
func (m *Manager) expire(id string, gen *struct{ _ byte }) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if !ok || s.timerGen != gen {
		m.mu.Unlock()
		return
	}
	switch s.rec.State {
	case Detached:
		m.log.Info("client did not reconnect within the grace period; ending session", "session", id, "grace", m.cfg.Grace)
		m.mu.Unlock()
		m.end(id, "grace period expired")
		return
	case Stopped:
		if s.conn != nil {
			m.log.Info("session still in its image; letting its client go to retry", "session", id)
			m.closeConn(s)
			m.armTimer(s, StoppedRetention)
			m.mu.Unlock()
			return
		}
		m.mu.Unlock()
		m.forget(id, "stopped session's retention ended")
		return
	case Preempted:
		// Its client is answered "preempted" and waits; the session
		// stays until it is resumed.
		m.log.Info("preempted session still in its image; letting its client go to retry", "session", id)
		m.closeConn(s)
		s.timer = nil
	}
	m.mu.Unlock()
}

// end stops a session's worker and forgets the session.
func (m *Manager) end(id, why string) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if !ok {
		m.mu.Unlock()
		return
	}
	h := s.worker
	s.ending = true
	m.closeConn(s)
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	m.mu.Unlock()
	if h != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = h.Exit(ctx)
		cancel()
		m.cfg.Metrics.workerExits.WithLabelValues("ended").Inc()
	}
	m.forget(id, why)
}

// forget removes a session from the table and the store.
func (m *Manager) forget(id, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return
	}
	m.closeConn(s)
	if s.timer != nil {
		s.timer.Stop()
	}
	delete(m.sessions, id)
	if s.held > 0 {
		m.freed()
	}
	m.cfg.Metrics.addDone(totals{calls: s.stats.Executed, in: s.stats.BytesIn, out: s.stats.BytesOut})
	if err := m.rec.delete(id); err != nil {
		m.log.Error("delete session record", "session", id, "err", err)
	}
	m.log.Info("session ended", "session", id, "why", why)
}

func (m *Manager) closeConn(s *Session) {
	m.stopKeeping(s)
	if s.conn != nil {
		s.conn.Close()
		s.conn = nil
	}
	s.overTLS, s.tlsState, s.midFrame = false, nil, false
}

// keepaliveOf is the keepalive interval for a client with Hello h: none
// unless it asked for keepalives.
func (m *Manager) keepaliveOf(h *wire.Hello) time.Duration {
	if h == nil || h.Flags&wire.HelloKeepalive == 0 {
		return 0
	}
	if m.cfg.Keepalive > 0 {
		return m.cfg.Keepalive
	}
	return wire.DefaultKeepalive
}

// keeper sends keepalives on a client socket gpud holds while its session
// is quiesced (checkpointed, migrated), so that the client, which gives
// up on a silent connection, waits instead. On a TLS connection they are
// records sealed with the record layer the worker handed back, which
// moves on with them.
type keeper struct {
	stop chan struct{}
	done chan struct{}
	tc   *tlsrec.Conn // nil for plaintext
	err  error        // why a keepalive could not be written; read after done
}

// startKeeping starts a keeper on s's held socket when its client asked
// for keepalives; the caller holds m.mu, and the worker has stopped
// writing to the socket at a frame boundary.
func (m *Manager) startKeeping(s *Session) {
	if s.conn == nil || s.keepalive <= 0 || s.keeping != nil || s.midFrame {
		return
	}
	k := &keeper{stop: make(chan struct{}), done: make(chan struct{})}
	var w io.Writer = s.conn
	if s.overTLS {
		if s.tlsState == nil {
			return // nobody can speak on it; dropUnusable closes it
		}
		tc, err := tlsrec.New(s.conn, *s.tlsState)
		if err != nil {
			m.log.Warn("no keepalives for a quiesced TLS client", "session", s.rec.ID, "err", err)
			return
		}
		k.tc, w = tc, tc
	}
	s.keeping = k
	go func(conn *net.TCPConn, every time.Duration) {
		defer close(k.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-k.stop:
				return
			case <-t.C:
			}
			conn.SetWriteDeadline(time.Now().Add(every))
			err := wire.WriteKeepalive(w, 0)
			conn.SetWriteDeadline(time.Time{})
			if err != nil {
				k.err = err
				return
			}
		}
	}(s.conn, s.keepalive)
}

// stopKeeping stops s's keeper and waits for it, so that nothing else
// writes to the socket; a TLS connection's record layer then stands past
// the keepalives sent. A keepalive that failed may have left part of a
// frame on the wire: the socket is closed, and its client reconnects. The
// caller holds m.mu.
func (m *Manager) stopKeeping(s *Session) {
	k := s.keeping
	if k == nil {
		return
	}
	close(k.stop)
	<-k.done
	s.keeping = nil
	if k.tc != nil {
		st := k.tc.State()
		k.tc.Forget()
		s.tlsState = &st
	}
	if k.err != nil {
		m.log.Info("a keepalive to a quiesced client failed; closing its connection", "session", s.rec.ID, "err", k.err)
		m.closeConn(s)
	}
}

// watch follows one worker handle of a session: a client that went away
// detaches the session; a worker that died ends it. It stops caring once
// the session has moved on to another handle.
func (m *Manager) watch(id string, h *worker.Handle) {
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		for {
			select {
			case ev := <-h.Events():
				if ev.Ended && ev.Goodbye {
					m.clientExited(id, h, ev.Epoch)
				} else if ev.Ended {
					m.clientGone(id, h, ev.Err)
				}
			case <-h.Exited():
				m.workerExited(id, h)
				return
			}
		}
	}()
}

func (m *Manager) clientGone(id string, h *worker.Handle, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || s.worker != h || s.rec.State != Running {
		return
	}
	m.log.Info("client disconnected; keeping the session for a reconnect", "session", id, "err", why, "grace", m.cfg.Grace)
	m.closeConn(s)
	_ = m.setState(s, Detached)
}

func (m *Manager) workerExited(id string, h *worker.Handle) {
	m.mu.Lock()
	s, ok := m.sessions[id]
	if !ok || s.worker != h || s.ending {
		m.mu.Unlock()
		return
	}
	switch s.rec.State {
	case Checkpointing, Migrating:
		// The checkpoint pipeline released the worker on purpose and
		// decides the session's fate.
		s.worker = nil
		m.mu.Unlock()
		return
	}
	m.mu.Unlock()
	m.cfg.Metrics.workerExits.WithLabelValues("unexpected").Inc()
	m.log.Warn("worker exited", "session", id, "err", h.Wait())
	m.forget(id, "worker exited")
}

// Create starts a new session for a client that passed the handshake: a
// fresh id and secret and a new worker serving conn, which the worker
// greets with them. The session belongs to the principal ctx carries
// (tenant.FromContext); a tenant at its max_sessions is refused with an
// errs.ResourceExhausted error whose message the client prints. rec is
// conn's TLS record layer, nil for plaintext; hello is the client's (what
// it asked for: keepalives).
func (m *Manager) Create(ctx context.Context, conn *net.TCPConn, rec *tlsrec.State, hello *wire.Hello) (string, error) {
	owner := tenant.FromContext(ctx).Tenant
	attrs := wire.AttrsFromContext(ctx)
	labels, err := api.ParseLabels(attrs.Labels)
	if err != nil {
		return "", errs.Wrap(err, errs.InvalidArgument, "", "GPUCTL_LABELS")
	}
	id, secret, err := newID()
	if err != nil {
		return "", errs.Wrap(err, errs.Internal, "", "session id")
	}
	opts := m.cfg.Worker
	opts.SessionID = id
	if opts.Log == nil {
		opts.Log = m.log
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return "", errs.New(errs.Unavailable, "", "gpud is shutting down")
	}
	limits, err := m.admit(owner)
	if err != nil {
		m.mu.Unlock()
		return "", err
	}
	m.starting[owner]++ // counts against max_sessions while it starts
	m.wg.Add(1)         // shutdown waits for a worker being started
	m.mu.Unlock()
	defer m.wg.Done()
	started := false
	defer func() {
		if !started {
			m.mu.Lock()
			m.doneStarting(owner)
			m.mu.Unlock()
		}
	}()
	h, err := startWorker(ctx, opts)
	if err != nil {
		return "", err
	}
	m.cfg.Metrics.workerStarts.WithLabelValues("start").Inc()
	h.SetQuota(m.quotaFor(limits))
	s := &Session{
		rec: Record{
			ID: id, SecretHash: hashSecret(secret), State: Running,
			Client: conn.RemoteAddr().String(), Created: time.Now().UTC(),
			Backend: opts.Backend, Device: opts.Device, WorkerPID: h.PID(), Tenant: owner, Epoch: 1,
			Priority: attrs.Priority, Labels: labels,
		},
		worker:    h,
		conn:      conn,
		overTLS:   rec != nil,
		keepalive: m.keepaliveOf(hello),
	}
	s.activeAt = time.Now()
	m.mu.Lock()
	m.sessions[id] = s
	m.doneStarting(owner)
	started = true
	m.persist(s)
	m.mu.Unlock()
	m.watch(id, h)
	if err := h.Attach(ctx, conn, rec, dispatch.WelcomeInfo{SessionID: id, Secret: secret, Keepalive: s.keepalive}, false, 1); err != nil {
		m.end(id, "attach failed")
		return "", err
	}
	return id, nil
}

// errUnknown is the one answer to a resume that names no session of
// ours or presents the wrong secret: a client learns nothing about other
// sessions. It is the only errs.NotFound error Resume returns.
var errUnknown = errs.New(errs.NotFound, "", "no such session on this host")

// Resume re-attaches a reconnecting client to its session. A session that
// migrated away answers with a *MovedError; one this host does not know,
// or a wrong secret, with an errs.NotFound error; one that cannot take its
// client now (in an image, being checkpointed) with errs.Unavailable. rec
// is conn's TLS record layer, nil for plaintext; hello is the client's.
//
// The token of the handshake must be the session owner's (or the host
// token): a tenant's client cannot take over another's session even with
// its secret, and is answered as for an unknown one.
func (m *Manager) Resume(ctx context.Context, conn *net.TCPConn, rec *tlsrec.State, hello *wire.Hello) error {
	id, secret := hello.SessionID, hello.Secret
	who := tenant.FromContext(ctx)
	m.mu.Lock()
	s, ok := m.sessions[id]
	if !ok || subtle.ConstantTimeCompare(hashSecret(secret), s.rec.SecretHash) != 1 || !who.Owns(s.rec.Tenant) {
		m.mu.Unlock()
		return errUnknown
	}
	switch s.rec.State {
	case Running, Detached:
	case Stopped:
		moved := s.movedTo
		m.mu.Unlock()
		if moved != "" {
			return &MovedError{Addr: moved}
		}
		return errs.New(errs.Unavailable, errs.Session(id), "session is in an image until it is restored; retry")
	case Preempted:
		m.mu.Unlock()
		return &PreemptedError{ID: id}
	default:
		m.mu.Unlock()
		return errs.New(errs.Unavailable, errs.Session(id), "session is %s; retry shortly", s.rec.State)
	}
	h := s.worker
	if h == nil {
		m.mu.Unlock()
		return errUnknown
	}
	// A client that reconnects while its old socket still looks alive
	// (a cut link) replaces it.
	m.closeConn(s)
	s.conn, s.overTLS = conn, rec != nil
	s.keepalive = m.keepaliveOf(hello)
	s.rec.Client = conn.RemoteAddr().String()
	if s.rec.State == Detached {
		_ = m.setState(s, Running)
	} else {
		m.persist(s)
	}
	ka, epoch := s.keepalive, s.rec.Epoch
	m.mu.Unlock()
	if err := h.Attach(ctx, conn, rec, dispatch.WelcomeInfo{SessionID: id, Keepalive: ka}, false, epoch); err != nil {
		m.mu.Lock()
		if s.conn == conn {
			s.conn, s.overTLS = nil, false
			if s.rec.State == Running {
				_ = m.setState(s, Detached)
			}
		}
		m.mu.Unlock()
		return err
	}
	return nil
}

// MovedError answers a client whose session migrated away: it is to
// reconnect to Addr, the new host's --listen address.
type MovedError struct{ Addr string }

func (e *MovedError) Error() string { return "session moved to " + e.Addr }

// MovedTo is where the session went.
func (e *MovedError) MovedTo() string { return e.Addr }

// Info is a session as listings show it (api.Session on the wire).
type Info struct {
	ID        string
	State     State
	Host      string // this host's name
	Client    string // the attached client's address, if any
	Created   time.Time
	MemBytes  uint64 // device memory the worker last reported in use
	Device    string
	Backend   string
	WorkerPID int    // 0 when no worker serves the session here
	Tenant    string // the owner; empty for the administrator
	Priority  int32
	Labels    api.Labels
	Image     string // the image a preempted session waits in
	// AllocBytes is what the client's allocations hold, as the worker
	// last reported it: what a tenant's memory limit counts.
	AllocBytes uint64
	Epoch      uint64 // see Record.Epoch
}

// refreshStats asks each live worker for its counters, briefly: a busy
// worker keeps its last known figures.
func (m *Manager) refreshStats(ctx context.Context) {
	m.mu.Lock()
	type item struct {
		id string
		h  *worker.Handle
	}
	var live []item
	for id, s := range m.sessions {
		if s.worker != nil && (s.rec.State == Running || s.rec.State == Detached) {
			live = append(live, item{id, s.worker})
		}
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, it := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			st, err := it.h.Stats(sctx)
			cancel()
			if err != nil {
				return
			}
			m.mu.Lock()
			if s, ok := m.sessions[it.id]; ok && s.worker == it.h {
				if st.Executed != s.stats.Executed {
					s.activeAt = time.Now()
				}
				s.stats = st
			}
			m.mu.Unlock()
		}()
	}
	wg.Wait()
}

func (m *Manager) liveTotals() totals {
	m.refreshStats(context.Background())
	m.mu.Lock()
	defer m.mu.Unlock()
	var t totals
	for _, s := range m.sessions {
		t.calls += s.stats.Executed
		t.in += s.stats.BytesIn
		t.out += s.stats.BytesOut
		t.mem += s.stats.MemInUse
	}
	return t
}

// List returns the sessions, oldest first, with each worker's current
// device memory use.
func (m *Manager) List(ctx context.Context) []Info {
	m.refreshStats(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Info, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s.info(m.cfg.Host))
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (s *Session) info(host string) Info {
	return Info{
		ID: s.rec.ID, State: s.rec.State, Host: host, Client: s.rec.Client, Created: s.rec.Created,
		MemBytes: s.stats.MemInUse, Device: s.rec.Device, Backend: s.rec.Backend, WorkerPID: s.rec.WorkerPID,
		Tenant: s.rec.Tenant, AllocBytes: s.stats.AllocBytes, Epoch: s.rec.Epoch, Priority: s.rec.Priority, Labels: s.rec.Labels,
		Image: s.preemptedImage(),
	}
}

// Get returns a session's listing.
func (m *Manager) Get(id string) (Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return Info{}, errNoSession(id)
	}
	return s.info(m.cfg.Host), nil
}

// Transition moves a session to another state, as the state machine
// allows; the checkpoint and migration pipelines drive it.
func (m *Manager) Transition(id string, to State) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return errNoSession(id)
	}
	return m.setState(s, to)
}

func (m *Manager) countStates() map[State]int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[State]int{}
	for _, s := range m.sessions {
		n[s.rec.State]++
	}
	return n
}

// Shutdown ends every session: workers are told to exit (killed if they
// do not), client sockets closed. New sessions are refused from the start.
// Stopped sessions keep their records, so a restarted gpud still answers
// their clients.
func (m *Manager) Shutdown(ctx context.Context) {
	m.mu.Lock()
	m.closed = true
	var ids []string
	for id, s := range m.sessions {
		if s.rec.State == Stopped || s.rec.State == Preempted {
			m.closeConn(s)
			if s.timer != nil {
				s.timer.Stop()
			}
			continue
		}
		ids = append(ids, id)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.end(id, "gpud shutting down")
		}()
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { m.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// startWorker starts a session's worker, trying again for a while when the
// NVIDIA driver refuses cuInit with CUDA_ERROR_OPERATING_SYSTEM. On the
// H200 (driver 580) it does so for any new process while another process
// on the host is CRIU-restored but not yet restored on the GPU, a window
// every restore and migration opens; the driver caches a failed cuInit for
// the life of a process, so only a new worker can succeed.
func startWorker(ctx context.Context, opts worker.Options) (*worker.Handle, error) {
	const patience = 15 * time.Second
	t0 := time.Now()
	for n := 0; ; n++ {
		h, err := worker.Start(ctx, opts)
		if err == nil || !strings.Contains(err.Error(), cu.ErrorOperatingSystem.Name()) {
			if err == nil && n > 0 {
				opts.Log.Info("the driver took a new worker again", "session", opts.SessionID, "waited_ms", time.Since(t0).Milliseconds())
			}
			return h, err
		}
		if time.Since(t0) > patience {
			return h, fmt.Errorf("the NVIDIA driver refused new CUDA processes for %s (another process on this host may be CRIU-restored but not yet restored on the GPU, or killed during a driver checkpoint step); try again later: %w", patience, err)
		}
		if n == 0 {
			opts.Log.Warn("the NVIDIA driver refuses new CUDA processes for now; trying again for a while", "session", opts.SessionID, "for", patience, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(250 * time.Millisecond):
		}
	}
}
