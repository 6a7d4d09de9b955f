// Package replicate keeps copies of a host's new images on k peers of the
// cluster, so that a session whose host dies can be restored from a copy
// elsewhere (gpud --replicas k).
//
// After an image is committed, a background loop picks k peers from the
// registry (up, same backend, a GPU of this host's model, a driver not
// older, most free device memory first), pushes each only the chunks it
// lacks with the chunk transfer migrations use (MissingChunks, then one
// import stream), and records each copy in the registry. A peer that is
// down or fails is replaced by the next candidate; an image still short
// of k copies is tried again with a growing pause, and a periodic scan
// picks up images whose replication a restart interrupted.
package replicate

import (
	"context"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/store"
)

// Registry is what replication needs of the cluster registry;
// *registry.Client is it.
type Registry interface {
	Hosts(ctx context.Context) ([]registry.Host, error)
	Copies(ctx context.Context, image string) ([]registry.Copy, error)
	AddCopy(ctx context.Context, c registry.Copy) error
}

// Pusher sends an image's missing chunks and manifest to a peer and
// returns the bytes sent; images.Push on the host's store is it.
type Pusher func(ctx context.Context, image string, peer *control.Client, progress func(done, total int64)) (int64, error)

// Config is a Replicator's setup.
type Config struct {
	// Self is this host as it registered: its name, backend, GPUs and
	// driver decide which peers are compatible.
	Self registry.Host
	// K is how many peers should hold each image this host commits.
	K        int
	Registry Registry
	Store    *store.Store
	// Push defaults to images.Push on Store.
	Push Pusher
	// Dial returns a control client for a peer's API address.
	Dial func(api string) *control.Client
	// Connected reports whether the registry is reachable now; nil:
	// always.
	Connected func() bool
	Metrics   *Metrics
	Log       *slog.Logger
	// Retry is the first pause before an image short of copies is tried
	// again (doubling to 32 times it); zero is 2 s. Scan is how often the
	// store is scanned for such images; zero is 30 s.
	Retry, Scan time.Duration
}

// Replicator is one host's replication loop.
type Replicator struct {
	cfg    Config
	kick   chan struct{}
	rescan chan struct{}

	mu      sync.Mutex
	queue   map[string]*pending // image -> its state, while short of copies
	done    map[string]bool     // images with K copies, or not ours
	running bool
}

type pending struct {
	next    time.Time
	backoff time.Duration
	tries   int
}

// New builds a replicator; Run starts it.
func New(cfg Config) *Replicator {
	if cfg.Retry <= 0 {
		cfg.Retry = 2 * time.Second
	}
	if cfg.Scan <= 0 {
		cfg.Scan = 30 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	if cfg.Push == nil {
		st := cfg.Store
		cfg.Push = func(ctx context.Context, image string, peer *control.Client, progress func(done, total int64)) (int64, error) {
			return images.Push(ctx, st, image, peer, progress)
		}
	}
	return &Replicator{cfg: cfg, kick: make(chan struct{}, 1), rescan: make(chan struct{}, 1), queue: map[string]*pending{}, done: map[string]bool{}}
}

// Committed queues a new image for replication; it returns at once.
func (r *Replicator) Committed(image string) {
	r.mu.Lock()
	if _, ok := r.queue[image]; !ok && !r.done[image] {
		r.queue[image] = &pending{next: time.Now(), backoff: r.cfg.Retry}
		r.cfg.Metrics.pending.Set(float64(len(r.queue)))
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Rescan asks Run to look for new images of this host in the store now
// (a checkpoint just committed one); it returns at once.
func (r *Replicator) Rescan() {
	select {
	case r.rescan <- struct{}{}:
	default:
	}
}

// Run replicates until ctx ends.
func (r *Replicator) Run(ctx context.Context) {
	scan := time.NewTicker(r.cfg.Scan)
	defer scan.Stop()
	r.scan(ctx)
	wait := time.NewTimer(0)
	defer wait.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.kick:
		case <-scan.C:
			r.scan(ctx)
		case <-r.rescan:
			r.scan(ctx)
		case <-wait.C:
		}
		next := r.round(ctx)
		if !wait.Stop() {
			select {
			case <-wait.C:
			default:
			}
		}
		if !next.IsZero() {
			wait.Reset(time.Until(next))
		}
	}
}

// scan queues this host's images that the registry does not yet record
// on K peers: those committed while the registry was away, or before a
// restart cut their replication short.
func (r *Replicator) scan(ctx context.Context) {
	list, err := images.List(ctx, r.cfg.Store)
	if err != nil {
		r.cfg.Log.Warn("replication: cannot list the store", "err", err)
		return
	}
	for _, im := range list {
		if im.Host != r.cfg.Self.Name {
			continue // a copy from a peer or a migration: its origin replicates it
		}
		r.mu.Lock()
		known := r.done[im.ID]
		r.mu.Unlock()
		if !known {
			r.Committed(im.ID)
		}
	}
}

// round works on every queued image that is due; it returns when the
// next one is due (zero: none queued).
func (r *Replicator) round(ctx context.Context) time.Time {
	if r.cfg.Connected != nil && !r.cfg.Connected() {
		return time.Now().Add(r.cfg.Retry)
	}
	now := time.Now()
	r.mu.Lock()
	var due []string
	for id, p := range r.queue {
		if !p.next.After(now) {
			due = append(due, id)
		}
	}
	r.mu.Unlock()
	sort.Strings(due)
	for _, id := range due {
		if ctx.Err() != nil {
			return time.Time{}
		}
		err := r.replicate(ctx, id)
		r.mu.Lock()
		p := r.queue[id]
		switch {
		case err == nil:
			delete(r.queue, id)
			r.done[id] = true
		case errs.IsNotFound(err):
			delete(r.queue, id) // removed meanwhile
		default:
			p.tries++
			p.next = time.Now().Add(p.backoff)
			r.cfg.Log.Warn("replication short of copies; will retry", "image", id, "tries", p.tries, "in", p.backoff, "err", err)
			if p.backoff < 32*r.cfg.Retry {
				p.backoff *= 2
			}
		}
		r.cfg.Metrics.pending.Set(float64(len(r.queue)))
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var next time.Time
	for _, p := range r.queue {
		if next.IsZero() || p.next.Before(next) {
			next = p.next
		}
	}
	return next
}

// replicate brings image to K copies on peers; nil once it has them.
func (r *Replicator) replicate(ctx context.Context, id string) error {
	m, err := images.Get(ctx, r.cfg.Store, id)
	if err != nil {
		return err
	}
	st, err := images.Stat(ctx, r.cfg.Store, id)
	if err != nil {
		return err
	}
	self := r.cfg.Self.Name
	if err := r.cfg.Registry.AddCopy(ctx, registry.Copy{Image: id, Host: self, Origin: m.Host == self, Session: m.Session, Bytes: st.Bytes}); err != nil {
		return err
	}
	have, err := r.cfg.Registry.Copies(ctx, id)
	if err != nil {
		return err
	}
	holds := map[string]bool{self: true}
	for _, c := range have {
		holds[c.Host] = true
	}
	need := r.cfg.K - (len(holds) - 1)
	if need <= 0 {
		return nil
	}
	hs, err := r.cfg.Registry.Hosts(ctx)
	if err != nil {
		return err
	}
	peers, why := registry.Candidates(r.cfg.Self, hs, holds)
	var failed []string
	for _, h := range peers {
		if need == 0 {
			break
		}
		sent, err := r.push(ctx, id, h)
		if errs.IsAlreadyExists(err) {
			err = nil // it has the image already (a migration's target)
		}
		if err != nil {
			failed = append(failed, h.Name+": "+err.Error())
			r.cfg.Metrics.images.WithLabelValues("failed").Inc()
			continue
		}
		if err := r.cfg.Registry.AddCopy(ctx, registry.Copy{Image: id, Host: h.Name, Session: m.Session, Bytes: st.Bytes, Sent: sent}); err != nil {
			return err
		}
		r.cfg.Metrics.images.WithLabelValues("ok").Inc()
		r.cfg.Log.Info("image replicated", "image", id, "session", m.Session, "to", h.Name, "sent_bytes", sent, "bytes", st.Bytes)
		need--
	}
	if need > 0 {
		return errs.New(errs.Unavailable, errs.Image(id), "replication: %d of %d copies missing; peers: %s", need, r.cfg.K,
			orNone(strings.Join(append(failed, why...), "; ")))
	}
	return nil
}

// push sends the image to one peer, counting the bytes as they go.
func (r *Replicator) push(ctx context.Context, id string, h registry.Host) (int64, error) {
	var last int64
	progress := func(done, _ int64) {
		if done > last {
			r.cfg.Metrics.bytes.Add(float64(done - last))
			last = done
		}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	n, err := r.cfg.Push(pctx, id, r.cfg.Dial(h.API), progress)
	if n > last {
		r.cfg.Metrics.bytes.Add(float64(n - last))
	}
	return n, err
}

func orNone(s string) string {
	if s == "" {
		return "no other host up"
	}
	return s
}

// Metrics are replication's Prometheus metrics.
type Metrics struct {
	bytes   prometheus.Counter
	images  *prometheus.CounterVec
	pending prometheus.Gauge
}

// NewMetrics creates them and registers them on reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		bytes: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpud_replication_sent_bytes_total",
			Help: "Image bytes this host pushed to peers as replicas (the chunks they lacked), counted as they are sent."}),
		images: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpud_replication_pushes_total",
			Help: "Replica pushes to peers by result (ok, failed)."}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpud_replication_pending_images",
			Help: "This host's images short of --replicas copies, waiting for a push or a retry."}),
	}
	for _, res := range []string{"ok", "failed"} {
		m.images.WithLabelValues(res)
	}
	if reg != nil {
		reg.MustRegister(m.bytes, m.images, m.pending)
	}
	return m
}
