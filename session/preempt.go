package session

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

// Preemption, as the session table sees it. The table keeps the device's
// ledger (Config.DeviceBytes: what every session's worker was granted, as
// the quota service counts it) and asks a Preempter, package preempt's,
// to make room when a session's allocation would not fit. The Preempter
// picks the sessions that give way and drives the checkpoint pipeline;
// the table records the outcome (Preempted) and answers those sessions'
// clients with wire.StatusPreempted until they are resumed.

// Preempter makes room on the device and resumes preempted sessions.
type Preempter interface {
	// MakeRoom frees at least need bytes of device memory for session
	// id by preempting sessions of lower priority, or fails at once
	// (errs.ResourceExhausted) when they do not hold enough.
	MakeRoom(ctx context.Context, id string, need uint64) error
	// Freed is told that device memory was given back: preempted
	// sessions may fit again. It must not block.
	Freed()
}

// SetPreempter installs p; gpud calls it once, before clients arrive.
func (m *Manager) SetPreempter(p Preempter) {
	m.mu.Lock()
	m.preempter = p
	m.mu.Unlock()
}

// makeRoomTimeout bounds one allocation's wait for room.
const makeRoomTimeout = 5 * time.Minute

// freed tells the preempter that memory came back. The caller holds m.mu.
func (m *Manager) freed() {
	if m.preempter != nil {
		m.preempter.Freed()
	}
}

// deviceHeld is what the live sessions other than except hold on the
// device, as granted. The caller holds m.mu.
func (m *Manager) deviceHeld(except string) uint64 {
	var n uint64
	for id, s := range m.sessions {
		if id != except && s.live() {
			// A session waiting for room has it reserved: a resume
			// must not take it meanwhile.
			n += max(s.held, s.want)
		}
	}
	return n
}

// DeviceFree is what the device's ledger has left, and its size; both 0
// when the device is not accounted.
func (m *Manager) DeviceFree() (free, total uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cfg.DeviceBytes == 0 {
		return 0, 0
	}
	held := m.deviceHeld("")
	return m.cfg.DeviceBytes - min(held, m.cfg.DeviceBytes), m.cfg.DeviceBytes
}

// holdDevice checks that session id (s) may hold bytes on the device
// next to the others, asking the preempter for room when it would not
// fit. It returns "" when it may, or why not. The caller holds m.mu;
// it is released while the preempter works.
func (m *Manager) holdDevice(id string, s *Session, bytes uint64) string {
	if m.cfg.DeviceBytes == 0 || bytes <= s.held {
		return ""
	}
	for attempt := 0; ; attempt++ {
		others := m.deviceHeld(id)
		if others+bytes <= m.cfg.DeviceBytes {
			return ""
		}
		need := others + bytes - m.cfg.DeviceBytes
		if m.preempter == nil || attempt == 3 {
			return fmt.Sprintf("the device's %d bytes are held by other sessions (%d) and preemption did not free %d more",
				m.cfg.DeviceBytes, others, need)
		}
		p := m.preempter
		s.waiting, s.want = true, bytes
		m.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), makeRoomTimeout)
		err := p.MakeRoom(ctx, id, need)
		cancel()
		m.mu.Lock()
		s.waiting, s.want = false, 0
		if err != nil {
			return err.Error()
		}
		if cur, ok := m.sessions[id]; !ok || cur != s {
			return "the session ended while room was made for it"
		}
	}
}

// Candidate is a session as preemption weighs it.
type Candidate struct {
	ID       string
	Priority int32
	// Held is the device memory the session holds (as granted); for a
	// preempted one, what it held when it was preempted.
	Held uint64
	// ActiveAt is when it last executed calls; for a preempted one,
	// when it was preempted.
	ActiveAt time.Time
	// Image is the image a preempted session waits in.
	Image string
	// Preemptible: it runs here with a worker (running or detached),
	// holds memory and is not itself waiting for room.
	Preemptible bool
}

// Candidates returns the sessions that could give way for session id
// (the others, running or detached, holding memory), with id's priority.
// It refreshes the workers' figures first, for their activity.
func (m *Manager) Candidates(ctx context.Context, id string) (prio int32, out []Candidate, err error) {
	m.refreshStats(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok {
		return 0, nil, errNoSession(id)
	}
	for oid, o := range m.sessions {
		if oid == id {
			continue
		}
		c := Candidate{ID: oid, Priority: o.rec.Priority, Held: o.held, ActiveAt: o.activeAt}
		c.Preemptible = o.worker != nil && (o.rec.State == Running || o.rec.State == Detached) && !o.waiting && o.held > 0
		out = append(out, c)
	}
	return s.rec.Priority, out, nil
}

// PreemptedSessions returns the sessions waiting in their images.
func (m *Manager) PreemptedSessions() []Candidate {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Candidate
	for id, s := range m.sessions {
		if s.rec.State == Preempted {
			out = append(out, Candidate{ID: id, Priority: s.rec.Priority, Held: s.rec.PreemptedBytes, ActiveAt: s.rec.PreemptedAt, Image: s.rec.Image})
		}
	}
	return out
}

// Held is what session id holds on the device, as granted.
func (m *Manager) Held(id string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		return s.held
	}
	return 0
}

// Preempted records that the session's worker here was released for
// preemption: it waits in image, needing bytes of device memory to run
// again. gpud holds its client's socket for the grace period, then lets
// the client go to retry; every retry is answered "preempted", which the
// client waits through.
func (m *Manager) Preempted(id, image string, bytes uint64, by string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil {
		return err
	}
	s.worker = nil
	s.rec.WorkerPID = 0
	s.stats.MemInUse = 0
	s.held = 0
	s.rec.Image = image
	s.rec.PreemptedBytes = bytes
	s.rec.PreemptedAt = time.Now().UTC()
	s.rec.PreemptedBy = by
	if err := m.setState(s, Preempted); err != nil {
		return err
	}
	m.freed()
	return nil
}

// ResumedElsewhere records that a preempted session was restored on the
// host whose --listen is addr: its client is sent there.
func (m *Manager) ResumedElsewhere(id, addr string) error {
	if err := m.Moved(id, addr); err != nil {
		return err
	}
	return m.Transition(id, Stopped)
}

// PreemptedError answers the reconnect of a preempted session's client.
type PreemptedError struct{ ID string }

func (e *PreemptedError) Error() string {
	return fmt.Sprintf("session %s is preempted and waits for device memory; it resumes by itself", e.ID)
}

// Preempted marks the error for the listener (wire.StatusPreempted).
func (e *PreemptedError) Preempted() bool { return true }

// Attributes are a session's priority and labels (for its images).
func (m *Manager) Attributes(id string) (int32, api.Labels) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		return s.rec.Priority, maps.Clone(s.rec.Labels)
	}
	return 0, nil
}

// SetAttributes gives a restored session the priority and labels its
// image carries.
func (m *Manager) SetAttributes(id string, prio int32, labels api.Labels) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil {
		return err
	}
	if s.rec.Priority == prio && maps.Equal(s.rec.Labels, labels) {
		return nil
	}
	s.rec.Priority, s.rec.Labels = prio, maps.Clone(labels)
	m.persist(s)
	return nil
}

// preemptedImage is the image a preempted session waits in, else "".
func (s *Session) preemptedImage() string {
	if s.rec.State == Preempted {
		return s.rec.Image
	}
	return ""
}

// errNotPreempted refuses to act on a preempted session as if it ran.
func errNotPreempted(id string, st State) error {
	return errs.New(errs.FailedPrecondition, errs.Session(id), "session is %s, not preempted; only a preempted session can be resumed", st)
}

// CheckPreempted returns the image a preempted session waits in, or an
// error saying it is not preempted.
func (m *Manager) CheckPreempted(id string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, err := m.session(id)
	if err != nil {
		return "", err
	}
	if s.rec.State != Preempted {
		return "", errNotPreempted(id, s.rec.State)
	}
	return s.rec.Image, nil
}

// PreemptedBy is who preempted session id, or "".
func (m *Manager) PreemptedBy(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok && s.rec.State == Preempted {
		return s.rec.PreemptedBy
	}
	return ""
}

// PreemptedBytes is the device memory preempted session id needs back.
func (m *Manager) PreemptedBytes(id string) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		return s.rec.PreemptedBytes
	}
	return 0
}
