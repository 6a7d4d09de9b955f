package session

import (
	"context"
	"fmt"
	"sort"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/tenant"
)

// Tenants are the host's tenants as the session table sees them: their
// limits, by name. *tenant.Set is gpud's.
type Tenants interface {
	// Limits returns a tenant's limits; ok is false for a tenant this
	// host does not know.
	Limits(name string) (l tenant.Limits, ok bool)
}

// The Manager is the ledger of gpud's quota service.
var _ worker.Ledger = (*Manager)(nil)

// errNoSession is the one answer to a question about a session that is
// not here, or not the caller's: a tenant cannot tell the two apart.
func errNoSession(id string) error {
	return errs.New(errs.NotFound, errs.Session(id), "no such session on this host")
}

// live reports whether s has a worker here, or is getting one back: what
// counts against max_sessions.
func (s *Session) live() bool { return s.rec.State != Stopped && s.rec.State != Preempted }

// limits returns owner's limits; the administrator has none. The caller
// holds m.mu.
func (m *Manager) limits(owner string) (tenant.Limits, bool) {
	if owner == "" {
		return tenant.Limits{}, true
	}
	if m.cfg.Tenants == nil {
		return tenant.Limits{}, false
	}
	return m.cfg.Tenants.Limits(owner)
}

// admit checks that owner may have one more live session here, and
// returns its limits. The caller holds m.mu.
func (m *Manager) admit(owner string) (tenant.Limits, error) {
	l, ok := m.limits(owner)
	if !ok {
		return l, errs.New(errs.FailedPrecondition, "", "tenant %q is not known on this host; add it (with the same token file) to gpud's --tenants file", owner)
	}
	if l.MaxSessions == 0 {
		return l, nil
	}
	n := m.starting[owner]
	for _, s := range m.sessions {
		if s.rec.Tenant == owner && s.live() {
			n++
		}
	}
	if n >= l.MaxSessions {
		return l, errs.New(errs.ResourceExhausted, "", "tenant %q already has %d live session(s) on this host, its max_sessions; end one before starting another", owner, n)
	}
	return l, nil
}

// doneStarting ends the count of a session being created. The caller
// holds m.mu.
func (m *Manager) doneStarting(owner string) {
	if m.starting[owner]--; m.starting[owner] <= 0 {
		delete(m.starting, owner)
	}
}

// fits checks that session id, holding bytes of allocations, stays within
// owner's memory limit next to its other sessions here. The caller holds
// m.mu.
func (m *Manager) fits(owner string, l tenant.Limits, id string, bytes uint64) error {
	if l.MaxMemBytes == 0 {
		return nil
	}
	others := m.heldBy(owner, id)
	if others+bytes > l.MaxMemBytes {
		return errs.New(errs.ResourceExhausted, "", "it holds %d bytes of device memory and tenant %q has %d of its max_mem_bytes (%d) left here",
			bytes, owner, l.MaxMemBytes-min(others, l.MaxMemBytes), l.MaxMemBytes)
	}
	return nil
}

// heldBy is what owner's sessions other than except hold. The caller
// holds m.mu.
func (m *Manager) heldBy(owner, except string) uint64 {
	var n uint64
	for sid, s := range m.sessions {
		if sid != except && s.rec.Tenant == owner {
			n += s.held
		}
	}
	return n
}

// quotaFor is the quota service a session with these limits is metered
// against, or "" when its memory is not limited.
func (m *Manager) quotaFor(l tenant.Limits) string {
	if l.MaxMemBytes == 0 && m.cfg.DeviceBytes == 0 {
		return ""
	}
	return m.cfg.QuotaSocket
}

// Hold is the quota service's question from a metered worker (its PID):
// may its session hold bytes in all? Giving memory back is always
// granted; holding more only while the tenant's sessions here stay
// within its max_mem_bytes.
func (m *Manager) Hold(pid int, bytes uint64) worker.QuotaGrant {
	m.mu.Lock()
	defer m.mu.Unlock()
	var (
		id string
		s  *Session
	)
	for sid, x := range m.sessions {
		if x.worker != nil && x.worker.PID() == pid {
			id, s = sid, x
			break
		}
	}
	if s == nil {
		return worker.QuotaGrant{Reason: fmt.Sprintf("process %d serves no session of this host", pid)}
	}
	l, _ := m.limits(s.rec.Tenant)
	others := m.heldBy(s.rec.Tenant, id)
	if bytes > s.held && l.MaxMemBytes > 0 && others+bytes > l.MaxMemBytes {
		m.log.Info("device memory limit reached", "session", id, "tenant", s.rec.Tenant, "asked", bytes, "held", s.held,
			"tenant_held", others+s.held, "limit", l.MaxMemBytes)
		return worker.QuotaGrant{Limit: l.MaxMemBytes, Held: others + s.held,
			Reason: fmt.Sprintf("tenant %q would hold %d of its %d bytes", s.rec.Tenant, others+bytes, l.MaxMemBytes)}
	}
	if why := m.holdDevice(id, s, bytes); why != "" {
		m.log.Info("device memory full", "session", id, "asked", bytes, "held", s.held, "why", why)
		return worker.QuotaGrant{Held: m.deviceHeld(""), Reason: why}
	}
	if bytes < s.held {
		defer m.freed()
	}
	s.held = bytes
	return worker.QuotaGrant{OK: true, Limit: l.MaxMemBytes, Held: m.heldBy(s.rec.Tenant, id) + bytes}
}

// Authorize answers whether the caller in ctx may act on session id: nil
// if the session is here and the caller owns it (the administrator owns
// every session), else the same not-found error a missing session gets.
func (m *Manager) Authorize(ctx context.Context, id string) error {
	who := tenant.FromContext(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok && who.Owns(s.rec.Tenant) {
		return nil
	}
	return errNoSession(id)
}

// Owner is the tenant that owns session id ("" for the administrator's
// or an unknown session).
func (m *Manager) Owner(id string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		return s.rec.Tenant
	}
	return ""
}

// Usage is what one tenant holds on this host.
type Usage struct {
	Tenant   string
	Sessions int // live sessions
	// MemBytes is what its sessions' allocations hold: for a tenant with
	// a memory limit, what the ledger counts against it.
	MemBytes uint64
}

// Usage reports each tenant's live sessions and device memory, by name;
// the administrator's sessions are left out. Figures of sessions not
// metered are as of the last listing.
func (m *Manager) Usage() []Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	by := map[string]*Usage{}
	for _, s := range m.sessions {
		if s.rec.Tenant == "" || !s.live() {
			continue
		}
		u := by[s.rec.Tenant]
		if u == nil {
			u = &Usage{Tenant: s.rec.Tenant}
			by[s.rec.Tenant] = u
		}
		u.Sessions++
		if l, _ := m.limits(s.rec.Tenant); l.MaxMemBytes > 0 {
			u.MemBytes += s.held
		} else {
			u.MemBytes += s.stats.AllocBytes
		}
	}
	out := make([]Usage, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}
