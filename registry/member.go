package registry

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gpuctl/gpuctl/errs"
)

// Member keeps one host registered: its record, and its live part under a
// lease that Run renews. A registry lost while it runs is retried until it
// returns; meanwhile Connected reports false, so that cluster-wide
// operations can be refused while the host's own sessions go on.
type Member struct {
	r    *Client
	host Host
	ttl  time.Duration
	// Live reports the host's live part; Run writes it when it changes.
	live func(ctx context.Context) Host

	mu        sync.Mutex
	connected bool
	lease     clientv3.LeaseID
	last      live // the live part last written, Seen aside
}

// Join registers host (its static record now, and the live part under a
// fresh lease of ttl, zero meaning DefaultTTL). live, called at every
// renewal, reports the live part. Run keeps it registered.
func (r *Client) Join(ctx context.Context, host Host, ttl time.Duration, live func(ctx context.Context) Host) (*Member, error) {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	m := &Member{r: r, host: host, ttl: ttl, live: live}
	b, _ := json.Marshal(host)
	if _, err := r.c.Put(ctx, r.hostKey(host.Name), string(b)); err != nil {
		return nil, unavailable(err, errs.Host(host.Name), "register")
	}
	if err := m.grant(ctx); err != nil {
		return nil, err
	}
	return m, nil
}

// grant takes a new lease and writes the live part under it.
func (m *Member) grant(ctx context.Context) error {
	lr, err := m.r.c.Grant(ctx, int64(m.ttl/time.Second))
	if err != nil {
		return unavailable(err, errs.Host(m.host.Name), "take a lease")
	}
	if err := m.putLive(ctx, lr.ID, true); err != nil {
		return err
	}
	m.mu.Lock()
	m.lease, m.connected = lr.ID, true
	m.mu.Unlock()
	return nil
}

// putLive writes the live part under lease; unless force, only when it
// changed (a renewal alone is no write to etcd's store).
func (m *Member) putLive(ctx context.Context, lease clientv3.LeaseID, force bool) error {
	h := m.host
	if m.live != nil {
		h = m.live(ctx)
	}
	l := live{MemFreeBytes: h.MemFreeBytes, StoreBytes: h.StoreBytes, Sessions: h.Sessions}
	m.mu.Lock()
	same := l == m.last
	m.mu.Unlock()
	if same && !force {
		return nil
	}
	l.Seen = time.Now().UTC()
	b, _ := json.Marshal(l)
	if _, err := m.r.c.Put(ctx, m.r.liveKey(m.host.Name), string(b), clientv3.WithLease(lease)); err != nil {
		return unavailable(err, errs.Host(m.host.Name), "write the live record")
	}
	l.Seen = time.Time{}
	m.mu.Lock()
	m.last = l
	m.mu.Unlock()
	return nil
}

// Connected reports whether the host's lease was renewed lately.
func (m *Member) Connected() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.connected
}

// Run renews the lease every third of its TTL and rewrites the live part,
// until ctx ends; then it revokes the lease, so that the host shows down
// at once. A lost registry is retried every second; the host comes back
// up under a new lease when it answers.
func (m *Member) Run(ctx context.Context) {
	tick := time.NewTicker(m.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			m.mu.Lock()
			lease := m.lease
			m.mu.Unlock()
			rctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, _ = m.r.c.Revoke(rctx, lease)
			cancel()
			return
		case <-tick.C:
		}
		m.mu.Lock()
		lease, was := m.lease, m.connected
		m.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, m.ttl/3)
		err := func() error {
			if !was {
				return m.grant(cctx)
			}
			if _, err := m.r.c.KeepAliveOnce(cctx, lease); err != nil {
				// An expired lease (the host was cut off too long) is
				// replaced; anything else is the registry being away.
				if gerr := m.grant(cctx); gerr != nil {
					return err
				}
				return nil
			}
			return m.putLive(cctx, lease, false)
		}()
		cancel()
		if err != nil {
			m.mu.Lock()
			m.connected = false
			m.mu.Unlock()
			if was {
				m.r.log.Warn("registry unreachable; sessions go on here, cluster-wide operations are refused until it returns", "host", m.host.Name, "err", err)
			}
			continue
		}
		if !was {
			m.r.log.Info("registry reachable again", "host", m.host.Name)
		}
	}
}
