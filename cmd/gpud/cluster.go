package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/migrate"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/registry/embedded"
	"github.com/gpuctl/gpuctl/replicate"
	"github.com/gpuctl/gpuctl/session"
	"github.com/gpuctl/gpuctl/store"
)

// registryMain is `gpud registry`: a single-member embedded etcd that
// gpuds and gpuctl point --registry at.
func registryMain(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("gpud registry", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c embedded.Config
	fs.StringVar(&c.DataDir, "data-dir", "", "`DIR` for etcd's data (required; not a gpud --state-dir)")
	fs.StringVar(&c.Listen, "listen", "", "client `HOST:PORT`, what --registry names (required)")
	fs.StringVar(&c.Peer, "peer", "", "peer `HOST:PORT` (default: --listen's port + 1)")
	fs.StringVar(&c.Metrics, "metrics", "", "`HOST:PORT` to serve etcd's own Prometheus metrics on (default: none)")
	fs.Int64Var(&c.QuotaBytes, "quota-bytes", embedded.DefaultQuotaBytes, "etcd's backend space quota, in bytes")
	fs.DurationVar(&c.Compaction, "compaction", embedded.DefaultCompaction, "history kept by periodic auto-compaction")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gpud registry --data-dir DIR --listen HOST:PORT [--peer HOST:PORT] [--metrics HOST:PORT] [--quota-bytes N] [--compaction DURATION]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if c.DataDir == "" || c.Listen == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "gpud registry: --data-dir and --listen are required, and nothing else; see gpud registry --help")
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	srv, err := embedded.Start(ctx, c)
	if err != nil {
		fmt.Fprintln(stderr, "gpud registry:", err)
		return 1
	}
	defer srv.Close()
	fmt.Fprintf(stderr, "gpud registry ready: --registry %s (data in %s, quota %d bytes)\n", srv.Endpoint(), c.DataDir, c.QuotaBytes)
	select {
	case <-ctx.Done():
		return 0
	case err := <-srv.Err():
		fmt.Fprintln(stderr, "gpud registry:", err)
		return 1
	}
}

// cluster is a gpud's membership of a cluster: its registry client, its
// lease, and the sessions whose ownership it keeps in step.
type cluster struct {
	r      *registry.Client
	member *registry.Member
	host   string
	log    *slog.Logger
	store  *store.Store

	mu sync.Mutex
	// claimed are sessions this host made live in the registry that a
	// restore may not have brought up: the reconciler sets them not live
	// when no worker serves them here.
	claimed map[string]bool
	// restoring are sessions whose restore here the registry admitted,
	// and when: until the restored session shows up (or restoreWindow
	// passes, a failed restore), the reconciler leaves their record live
	// here, though the session table has no live session (or only a
	// stopped record of an earlier copy) yet.
	restoring map[string]time.Time
	// liveHere are the sessions the last reconciliation round found
	// running here: one gone from the session table since (it ended:
	// its client exited, its grace ran out) is recorded as not live.
	liveHere map[string]bool
	// runDone is closed once the membership has ended: the lease is
	// revoked (or that was tried), so the registry client may close.
	runDone chan struct{}

	metrics *opsMetrics
	// replicas records this host's images in the registry and keeps
	// copies of its new ones on peers (gpud --replicas; none without).
	replicas *replicate.Replicator
}

// dialRegistry connects to --registry; an unreachable one fails start-up.
func dialRegistry(ctx context.Context, endpoints string, log *slog.Logger) (*registry.Client, error) {
	eps, err := registry.ParseEndpoints(endpoints)
	if err != nil {
		return nil, err
	}
	return registry.Dial(ctx, eps, registry.Options{Log: log})
}

// newCluster is this host's side of the cluster, before it joins.
func (d *daemon) newCluster(r *registry.Client) *cluster {
	c := &cluster{r: r, host: d.cfg.name, log: d.log, store: d.store, claimed: map[string]bool{}, metrics: d.ops}
	c.replicas = d.newReplicator(r)
	return c
}

// join registers this host and keeps it registered, and keeps the
// registry's ownership records in step with the sessions here, until ctx
// ends.
func (c *cluster) join(ctx context.Context, d *daemon, listen, apiAddr string) error {
	r := c.r
	h := d.self()
	h.API, h.Listen = apiAddr, listen
	m, err := r.Join(ctx, h, d.cfg.registryTTL, func(ctx context.Context) registry.Host {
		ss := d.manager.List(ctx)
		live := 0
		for _, s := range ss {
			if s.State != session.Stopped {
				live++
			}
		}
		return registry.Host{MemFreeBytes: d.memFree(ss), StoreBytes: storeBytes(d.cfg.stateDir), Sessions: live}
	})
	if err != nil {
		return err
	}
	c.member = m
	c.adoptLive(ctx)
	c.runDone = make(chan struct{})
	go func() { m.Run(ctx); close(c.runDone) }()
	go c.reconcile(ctx, d.manager)
	if c.replicas != nil {
		go c.replicas.Run(ctx)
	}
	return nil
}

// adoptLive hands the reconciler every session the registry records as
// live on this host: after a crash, sessions whose workers died with
// gpud are gone from the session table, and nothing else would ever
// record them as stopped; their records would say live here forever,
// refusing every restore of their images elsewhere and telling their
// clients to wait. Those the session table does not list are recorded
// as in their latest image here at the reconciler's first round.
func (c *cluster) adoptLive(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	os, err := c.r.Owners(ctx)
	if err != nil {
		c.log.Warn("registry: cannot list the sessions recorded live here; ones that died with an earlier gpud stay recorded live", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, o := range os {
		if o.Host == c.host && o.Live {
			c.claimed[o.Session] = true
		}
	}
}

// left waits, at most d, for the membership to end after gpud's context
// did: its lease is revoked then, so that the host reads down at once.
// gpud closes the registry client after this; closed first, the
// revocation failed and the host read up for the rest of its lease.
func (c *cluster) left(d time.Duration) {
	if c.runDone == nil {
		return
	}
	select {
	case <-c.runDone:
	case <-time.After(d):
		c.log.Warn("registry: the lease was not revoked in time; this host reads down when it runs out")
	}
}

// storeBytes is the size of the chunk store's packs.
func storeBytes(stateDir string) int64 {
	var n int64
	entries, _ := os.ReadDir(stateDir + "/blobs/packs")
	for _, e := range entries {
		if fi, err := e.Info(); err == nil {
			n += fi.Size()
		}
	}
	return n
}

// need refuses a cluster-wide operation while the registry is away.
func (c *cluster) need(subject, what string) error {
	if c.member == nil || !c.member.Connected() {
		return errs.New(errs.Unavailable, subject, "%s needs the cluster registry, which this host cannot reach now; sessions here go on, retry when it is back", what)
	}
	return nil
}

// admitRestore decides, before anything is restored, whether this host
// may run session id from image, and makes it the live owner if so:
//   - a session the registry does not know is claimed;
//   - one this host owns is marked live;
//   - one another host owns but does not run (it is in an image: a
//     preempted or migrated-away session, or one whose host died after
//     checkpointing it) is taken over;
//   - one live on another host is refused: restoring it here would run it
//     twice (migrate it instead);
//   - an image older than the epoch the registry has seen the session
//     reach (on any host) is refused: a newer copy has run since, and
//     restoring this one would take the session back in time.
//
// epoch is the image's (images.Meta.Epoch); the record then carries it.
func (c *cluster) admitRestore(ctx context.Context, id, image string, epoch uint64) error {
	subject := errs.Session(id)
	if err := c.need(subject, "a restore"); err != nil {
		return err
	}
	cur, err := c.r.Owner(ctx, id)
	switch {
	case errs.IsNotFound(err):
		if _, err = c.r.Claim(ctx, id, c.host, true, image, epoch); err != nil {
			return c.refused(err)
		}
	case err != nil:
		return errs.Wrap(err, errs.Unavailable, subject, "restore refused: the registry cannot say who owns it")
	case cur.Host != c.host && cur.Live:
		c.metrics.fenced.Inc()
		c.log.Warn("restore refused: session live on another host", "session", id, "owner", cur.Host, "token", cur.Token, "image", image)
		return errs.New(errs.FailedPrecondition, subject, "fenced: live on host %s (token %d); restoring it here would run it twice: migrate it from there, or checkpoint it there first", cur.Host, cur.Token)
	case epoch < cur.Epoch:
		c.metrics.fenced.Inc()
		c.log.Warn("restore refused: image older than the session's epoch in the registry", "session", id, "image", image,
			"image_epoch", epoch, "epoch", cur.Epoch, "owner", cur.Host, "latest", cur.Image)
		return errs.New(errs.FailedPrecondition, subject, "fenced: image %s holds epoch %d, and the session reached epoch %d since (on host %s); restore its latest image %s instead",
			image, epoch, cur.Epoch, cur.Host, orDash(cur.Image))
	default:
		if cur.Host != c.host {
			c.log.Info("taking over a session from its image", "session", id, "from", cur.Host, "token", cur.Token, "image", image)
		}
		if _, err := c.r.Transfer(ctx, id, cur.Host, c.host, cur.Token, true, image, epoch); err != nil {
			return c.refused(err)
		}
	}
	c.mu.Lock()
	c.claimed[id] = true
	if c.restoring == nil {
		c.restoring = map[string]time.Time{}
	}
	c.restoring[id] = time.Now()
	c.mu.Unlock()
	return nil
}

// restoreWindow bounds how long a restore admitted here keeps its record
// live before the session shows up here.
const restoreWindow = time.Minute

// inRestore reports whether a restore of id admitted here may still be
// running; done forgets it (the session is up, or the window passed).
func (c *cluster) inRestore(id string, done bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.restoring[id]
	if ok && (done || time.Since(at) > restoreWindow) {
		delete(c.restoring, id)
		return false
	}
	return ok
}

func (c *cluster) refused(err error) error {
	if errs.IsFailedPrecondition(err) || errs.IsAlreadyExists(err) {
		c.metrics.fenced.Inc()
	}
	return err
}

// Handover is migrate.Fence: the target becomes the owner, not live yet.
// Each registry call is bounded (fenceTimeout): the session is frozen
// meanwhile. A compare-and-swap the registry did not answer may or may
// not have happened: that error wraps migrate.ErrUnconfirmed.
func (c *cluster) Handover(ctx context.Context, id, to, image string) error {
	if err := c.need(errs.Session(id), "a migration"); err != nil {
		return err
	}
	if to == "" {
		return errs.New(errs.FailedPrecondition, errs.Session(id), "the target does not report its --name; it cannot own the session in the registry")
	}
	ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	cur, err := c.owned(ctx, id)
	if err != nil {
		return err
	}
	_, err = c.r.Transfer(ctx, id, c.host, to, cur.Token, false, image, cur.Epoch)
	if err != nil && !errs.IsFailedPrecondition(err) {
		return fmt.Errorf("%w: %w", migrate.ErrUnconfirmed, err)
	}
	return c.refused(err)
}

// fenceTimeout bounds each of a migration's ownership calls: the client
// stalls for them, and a registry that does not answer within it is as
// good as lost.
const fenceTimeout = 5 * time.Second

// Reclaim is migrate.Fence: take the session back from a target that did
// not restore it. A target that did (its restore marked it live) keeps it.
// A record still naming this host (a handover that did not happen) is
// kept, live. A host cut off from the registry cannot confirm any of it,
// and must not wait for the registry with the session frozen: it fails,
// and the migration leaves the session in its image.
func (c *cluster) Reclaim(ctx context.Context, id, to string) error {
	if err := c.need(errs.Session(id), "taking a session back"); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, fenceTimeout)
	defer cancel()
	cur, err := c.r.Owner(ctx, id)
	if err != nil {
		return err
	}
	if cur.Host == c.host {
		if !cur.Live {
			_, err = c.r.Transfer(ctx, id, c.host, c.host, cur.Token, true, cur.Image, cur.Epoch)
		}
		return c.refused(err)
	}
	if cur.Host != to || cur.Live {
		c.metrics.fenced.Inc()
		return errs.New(errs.FailedPrecondition, errs.Session(id), "fenced: owned by host %s (live %v, token %d) now; it stays there", cur.Host, cur.Live, cur.Token)
	}
	_, err = c.r.Transfer(ctx, id, to, c.host, cur.Token, true, cur.Image, cur.Epoch)
	return c.refused(err)
}

// owned reads the record of a session this host runs, claiming it when
// the registry has none yet (the reconciler has not run since it began).
func (c *cluster) owned(ctx context.Context, id string) (registry.Owner, error) {
	cur, err := c.r.Owner(ctx, id)
	if errs.IsNotFound(err) {
		return c.r.Claim(ctx, id, c.host, true, "", 0)
	}
	if err != nil {
		return cur, err
	}
	if cur.Host != c.host {
		c.metrics.fenced.Inc()
		return cur, errs.New(errs.FailedPrecondition, errs.Session(id), "fenced: owned by host %s (token %d), not this host", cur.Host, cur.Token)
	}
	return cur, nil
}

// reconcileEvery is how often the ownership records are brought in step.
const reconcileEvery = 2 * time.Second

// reconcile keeps the registry's records of this host's sessions true:
// a live session the registry does not know is claimed; one it records
// as live here that has stopped (checkpointed, preempted, its restore
// failed) is recorded as in its latest image; and a live session here
// that another host owns is ended, since only the owner may serve it.
func (c *cluster) reconcile(ctx context.Context, m *session.Manager) {
	t := time.NewTicker(reconcileEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.metrics.storeSize.Set(float64(storeBytes(c.store.Dir())))
		if !c.member.Connected() {
			c.metrics.connected.Set(0)
			continue
		}
		c.metrics.connected.Set(1)
		c.reconcileOnce(ctx, m)
		c.readCluster(ctx)
	}
}

func (c *cluster) reconcileOnce(ctx context.Context, m *session.Manager) {
	ctx, cancel := context.WithTimeout(ctx, reconcileEvery)
	defer cancel()
	seen, liveNow := map[string]bool{}, map[string]bool{}
	for _, s := range m.List(ctx) {
		seen[s.ID] = true
		switch s.State {
		case session.Running, session.Detached:
			liveNow[s.ID] = true
			c.inRestore(s.ID, true)
		case session.Stopped:
			if !c.inRestore(s.ID, false) { // an earlier copy's record, while it is restored again
				c.stopped(ctx, s.ID)
			}
			continue
		case session.Preempted:
			// It waits in its image, which another host may restore (and
			// so take it over) if this one goes down: recorded so, also
			// when it was preempted before its first claim. Not while a
			// restore admitted here (its resume) brings it up.
			if c.inRestore(s.ID, false) {
				continue
			}
			if _, err := c.r.Owner(ctx, s.ID); errs.IsNotFound(err) {
				img, epoch := latestImage(ctx, c.store, s.ID)
				_, _ = c.r.Claim(ctx, s.ID, c.host, false, img, epoch)
			} else {
				c.stopped(ctx, s.ID)
			}
			continue
		default:
			continue // a checkpoint or migration is deciding
		}
		cur, err := c.r.Owner(ctx, s.ID)
		switch {
		case errs.IsNotFound(err):
			if _, err := c.r.Claim(ctx, s.ID, c.host, true, "", s.Epoch); err != nil && !errs.IsAlreadyExists(err) {
				c.log.Debug("registry: claim failed", "session", s.ID, "err", err)
			}
		case err != nil:
		case cur.Host != c.host:
			c.metrics.fenced.Inc()
			c.log.Error("fenced: a session runs here that another host owns; ending it here", "session", s.ID, "owner", cur.Host, "token", cur.Token)
			m.Fence(s.ID, fmt.Sprintf("fenced: owned by host %s at token %d", cur.Host, cur.Token))
		case !cur.Live:
			_, _ = c.r.Transfer(ctx, s.ID, c.host, c.host, cur.Token, true, cur.Image, cur.Epoch)
		}
	}
	c.mu.Lock()
	var gone []string
	for id := range c.liveHere {
		if !seen[id] {
			gone = append(gone, id)
		}
	}
	c.liveHere = liveNow
	for id := range c.claimed {
		if at, ok := c.restoring[id]; !seen[id] && ok && time.Since(at) <= restoreWindow {
			continue // still restoring: ask again next time
		}
		if !seen[id] {
			gone = append(gone, id)
		}
		delete(c.claimed, id)
	}
	c.mu.Unlock()
	for _, id := range gone {
		c.stopped(ctx, id)
	}
}

// readCluster updates the cluster gauges.
func (c *cluster) readCluster(ctx context.Context) {
	if hs, err := c.r.Hosts(ctx); err == nil {
		n := map[string]int{}
		for _, h := range hs {
			n[h.State]++
		}
		for _, st := range []string{registry.StateUp, registry.StateDown} {
			c.metrics.hosts.WithLabelValues(st).Set(float64(n[st]))
		}
	}
	if os, err := c.r.Owners(ctx); err == nil {
		n := 0
		for _, o := range os {
			if o.Host == c.host {
				n++
			}
		}
		c.metrics.owned.Set(float64(n))
	}
}

// stopped records a session this host owns and no longer runs as living
// in its latest image here.
func (c *cluster) stopped(ctx context.Context, id string) {
	cur, err := c.r.Owner(ctx, id)
	if err != nil || cur.Host != c.host || !cur.Live {
		return
	}
	img, epoch := latestImage(ctx, c.store, id)
	if img == "" {
		img = cur.Image
	}
	_, _ = c.r.Transfer(ctx, id, c.host, c.host, cur.Token, false, img, max(epoch, cur.Epoch))
}

// latestImage is the newest image of a session in the store and the
// epoch it holds, or "".
func latestImage(ctx context.Context, st *store.Store, id string) (string, uint64) {
	if st == nil {
		return "", 0
	}
	list, err := images.List(ctx, st)
	if err != nil {
		return "", 0
	}
	var best string
	var at time.Time
	for _, im := range list {
		if im.Session == id && im.Created.After(at) {
			best, at = im.ID, im.Created
		}
	}
	if best == "" {
		return "", 0
	}
	m, err := images.Get(ctx, st, best)
	if err != nil {
		return best, 0
	}
	return best, m.Epoch
}

// admitImage is the restore's admission, before CRIU runs: the image
// must not be older than the session's epoch on this host (its worker
// epoch), and on a clustered host the registry must let this host run
// the session (cluster.admitRestore). The local check comes first: it
// changes nothing, while the registry's makes this host the owner.
func (d *daemon) admitImage(m images.Meta) error {
	if err := d.manager.Admit(m.Session, m.Epoch); err != nil {
		return err
	}
	if d.cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.cluster.admitRestore(ctx, m.Session, m.ID, m.Epoch)
}

// unadmitImage gives back what admitImage took when the restore fails
// after it: on a clustered host, the registry's record of the session as
// live here. Left live, the record would stand for a minute (the restore
// window) while nothing runs the session: a migration's source could not
// take it back, and no other host could restore it.
func (d *daemon) unadmitImage(m images.Meta) {
	if d.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.cluster.restoreFailed(ctx, m.Session, m.ID)
}

// adoptedImage ends, on a clustered host, the restore window of a session
// whose restore here succeeded: from now on the reconciliation rounds
// know it as running here or as ended.
func (d *daemon) adoptedImage(m images.Meta) {
	if d.cluster != nil {
		d.cluster.inRestore(m.Session, true)
	}
}

// restoreFailed records session id, whose restore here from image failed
// after the registry admitted it, as not live here: in that image, which
// this host holds.
func (c *cluster) restoreFailed(ctx context.Context, id, image string) {
	c.inRestore(id, true)
	c.mu.Lock()
	delete(c.claimed, id)
	c.mu.Unlock()
	cur, err := c.r.Owner(ctx, id)
	if err != nil || cur.Host != c.host || !cur.Live {
		return
	}
	if _, err := c.r.Transfer(ctx, id, c.host, c.host, cur.Token, false, image, cur.Epoch); err != nil {
		c.log.Warn("registry: a failed restore's session is still recorded live here", "session", id, "err", err)
		return
	}
	c.log.Info("restore failed; the session is recorded in its image here again", "session", id, "image", image)
}

// fence is the migration's view of the cluster; nil when standalone.
func (d *daemon) fence() migrate.Fence {
	if d.cluster == nil {
		return nil
	}
	return d.cluster
}

// sessionTable is the session table as the checkpoint service and
// migration use it: on a clustered host, a session released into its
// image is recorded so in the registry at once, so that another host may
// take it over from a copy of the image even if this host dies next.
func (d *daemon) sessionTable() checkpoint.Sessions {
	if d.cluster == nil {
		return d.manager
	}
	return clusterTable{d.manager, d.cluster}
}

type clusterTable struct {
	*session.Manager
	c *cluster
}

func (t clusterTable) Released(id string) error {
	err := t.Manager.Released(id)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	t.c.stopped(ctx, id)
	return err
}

// Begin is checkpoint.Sessions.Begin. A session younger than a
// reconciliation round has no owner record yet; it is claimed here,
// before it is quiesced, so that the image this checkpoint or migration
// stores is found through the registry even if this host dies before the
// session's next ownership change (after a restart the reconciler records
// it as living in that image). Best effort: without the registry the
// checkpoint goes on, as a standalone host's does.
func (t clusterTable) Begin(ctx context.Context, id string) (checkpoint.Worker, error) {
	if info, err := t.Manager.Get(id); err == nil && t.c.member != nil && t.c.member.Connected() &&
		(info.State == session.Running || info.State == session.Detached) {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		if _, err := t.c.r.Owner(cctx, id); errs.IsNotFound(err) {
			if _, err := t.c.r.Claim(cctx, id, t.c.host, true, "", info.Epoch); err != nil && !errs.IsAlreadyExists(err) {
				t.c.log.Warn("registry: claim before a checkpoint failed", "session", id, "err", err)
			}
		}
		cancel()
	}
	return t.Manager.Begin(ctx, id)
}
