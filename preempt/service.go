package preempt

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/migrate"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/restore"
	"github.com/gpuctl/gpuctl/session"
)

// Reasons a session was preempted, as logs and metrics name them.
const (
	ReasonMemory  = "memory"  // gpud made room for a session of higher priority
	ReasonRequest = "request" // gpuctl preempt (a scheduler)
)

// Service preempts and resumes sessions; gpud builds one, installs it as
// the session table's Preempter, runs its resumer and registers its
// routes.
type Service struct {
	Sessions   *session.Manager
	Checkpoint *checkpoint.Service
	Restore    *restore.Service
	// Push sends an image's missing chunks to another host (resume --on).
	Push migrate.Pusher
	// Token and TLS reach other hosts' control APIs, as a migration does.
	Token string
	TLS   *tls.Config
	// API is this gpud's --api address, reported by a resume here.
	API string
	// Backend is this host's; a host resumed on must run the same.
	Backend string
	// CheckTarget, when set, refuses a host whose GPUs cannot run this
	// host's images (migrate.Service.CheckTarget).
	CheckTarget func(target backend.HostInfo) error
	Metrics     *Metrics
	Log         *slog.Logger

	// mu makes one preemption decision at a time, so that two sessions
	// short of memory do not both preempt for the same room.
	mu sync.Mutex
	// kick wakes the resumer (Run) when memory comes back.
	kick chan struct{}
	once sync.Once
}

// Metrics counts preemption decisions.
type Metrics struct {
	preempted *prometheus.CounterVec
	refused   prometheus.Counter
	resumed   *prometheus.CounterVec
	failed    *prometheus.CounterVec
	stall     prometheus.Histogram
}

// NewMetrics registers preemption's metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		preempted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_preemptions_total",
			Help: "Sessions preempted, by reason: memory (for a session of higher priority) or request (gpuctl preempt).",
		}, []string{"reason"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpud_preemptions_refused_total",
			Help: "Allocations that did not fit and for which sessions of lower priority did not hold enough memory: nothing was preempted and the allocation failed.",
		}),
		resumed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_preempted_resumes_total",
			Help: "Preempted sessions resumed, by who asked: gpud (room again) or request (gpuctl resume, here or elsewhere).",
		}, []string{"by"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpud_preemption_failures_total",
			Help: "Preemptions and resumes that failed (the session stayed where it was), by operation.",
		}, []string{"op"}),
		stall: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gpud_preemption_stall_seconds",
			Help:    "How long a preemption's checkpoint took, from quiesce to the worker's release.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}),
	}
	if reg != nil {
		reg.MustRegister(m.preempted, m.refused, m.resumed, m.failed, m.stall)
	}
	return m
}

func (s *Service) metrics() *Metrics {
	s.once.Do(func() {
		if s.Metrics == nil {
			s.Metrics = NewMetrics(nil)
		}
		s.kick = make(chan struct{}, 1)
	})
	return s.Metrics
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

var _ session.Preempter = (*Service)(nil)

// MakeRoom frees need bytes for session id by preempting sessions of
// lower priority (session.Preempter).
func (s *Service) MakeRoom(ctx context.Context, id string, need uint64) error {
	s.metrics()
	s.mu.Lock()
	defer s.mu.Unlock()
	prio, cands, err := s.Sessions.Candidates(ctx, id)
	if err != nil {
		return err
	}
	victims, err := Victims(prio, need, cands)
	if err != nil {
		s.Metrics.refused.Inc()
		s.log().Info("preemption: allocation cannot be made to fit; nothing preempted", "session", id, "priority", prio, "need", need, "why", err)
		return errs.Wrap(err, errs.ResourceExhausted, errs.Session(id), "device memory is full")
	}
	var freed uint64
	for _, v := range victims {
		s.log().Info("preemption: preempting a session of lower priority", "victim", v.ID, "victim_priority", v.Priority,
			"victim_bytes", v.Held, "victim_active_at", v.ActiveAt, "for", id, "priority", prio, "need", need, "reason", ReasonMemory)
		if _, err := s.preempt(ctx, v.ID, ReasonMemory); err != nil {
			s.log().Warn("preemption: victim could not be preempted; it keeps running", "victim", v.ID, "err", err)
			continue
		}
		freed += v.Held
	}
	if freed < need {
		return errs.New(errs.ResourceExhausted, errs.Session(id), "preemption freed %d of the %d bytes needed", freed, need)
	}
	return nil
}

// Freed wakes the resumer (session.Preempter).
func (s *Service) Freed() {
	s.metrics()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// preempt checkpoints session id and releases its worker: it waits in its
// image, preempted. On failure (a deadline in ctx included) the
// checkpoint is rolled back and the session keeps running.
func (s *Service) preempt(ctx context.Context, id, reason string) (*api.PreemptReply, error) {
	t0 := time.Now()
	held := s.Sessions.Held(id)
	if held == 0 {
		// Not metered (no device ledger): what the worker last reported.
		if info, err := s.Sessions.Get(id); err == nil {
			held = info.AllocBytes
		}
	}
	fr, err := s.Checkpoint.Freeze(ctx, id)
	if err != nil {
		s.Metrics.failed.WithLabelValues("preempt").Inc()
		return nil, err
	}
	// Stored: the rest cannot be rolled back and is quick.
	rctx := context.WithoutCancel(ctx)
	if err := fr.Release(rctx); err != nil {
		s.Metrics.failed.WithLabelValues("preempt").Inc()
		return nil, err
	}
	stall := time.Since(t0)
	if err := s.Sessions.Preempted(id, fr.Image, held, reason); err != nil {
		return nil, err
	}
	s.Metrics.preempted.WithLabelValues(reason).Inc()
	s.Metrics.stall.Observe(stall.Seconds())
	s.log().Info("session preempted", "session", id, "image", fr.Image, "bytes", held, "stall_ms", stall.Milliseconds(), "reason", reason)
	return &api.PreemptReply{Session: id, Image: fr.Image, Bytes: fr.Bytes, StallMS: stall.Milliseconds(), MemBytes: held}, nil
}

// Preempt preempts session id on request within deadline (0: none).
func (s *Service) Preempt(ctx context.Context, id string, deadline time.Duration) (*api.PreemptReply, error) {
	s.metrics()
	if err := ids.CheckSession(id); err != nil {
		return nil, err
	}
	if deadline < 0 {
		return nil, errs.New(errs.InvalidArgument, errs.Session(id), "deadline %v: want a positive duration", deadline)
	}
	if err := s.Sessions.Authorize(ctx, id); err != nil {
		return nil, err
	}
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, deadline)
		defer cancel()
	}
	res, err := s.preempt(ctx, id, ReasonRequest)
	if err != nil && deadline > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, errs.New(errs.Unavailable, errs.Session(id),
			"the checkpoint could not finish within the %v deadline and was rolled back; the session keeps running (give a longer --deadline)", deadline)
	}
	return res, err
}

// Resume restores preempted session id from its image: here (on == ""),
// or on the gpud whose --api is on, whose client is then sent there.
func (s *Service) Resume(ctx context.Context, id, on string) (*api.ResumeReply, error) {
	s.metrics()
	t0 := time.Now()
	if err := ids.CheckSession(id); err != nil {
		return nil, err
	}
	if err := s.Sessions.Authorize(ctx, id); err != nil {
		return nil, err
	}
	image, err := s.Sessions.CheckPreempted(id)
	if err != nil {
		return nil, err
	}
	need := s.Sessions.PreemptedBytes(id)
	if on == "" || on == s.API {
		if free, total := s.Sessions.DeviceFree(); total > 0 && need > free {
			return nil, errs.New(errs.ResourceExhausted, errs.Session(id),
				"it needs %d MiB of device memory and this host has %d MiB free; resume it on another host (--on) or later", need>>20, free>>20)
		}
		rr, err := s.Restore.Restore(ctx, image)
		if err != nil {
			s.Metrics.failed.WithLabelValues("resume").Inc()
			return nil, err
		}
		s.Metrics.resumed.WithLabelValues(ReasonRequest).Inc()
		return &api.ResumeReply{Session: id, Host: s.API, Listen: rr.Listen, Image: image, DurationMS: time.Since(t0).Milliseconds()}, nil
	}
	listen, err := s.resumeOn(ctx, id, image, need, on)
	if err != nil {
		s.Metrics.failed.WithLabelValues("resume").Inc()
		return nil, err
	}
	s.Metrics.resumed.WithLabelValues(ReasonRequest).Inc()
	s.log().Info("preempted session resumed on another host", "session", id, "on", on, "listen", listen, "image", image)
	return &api.ResumeReply{Session: id, Host: on, Listen: listen, Image: image, DurationMS: time.Since(t0).Milliseconds()}, nil
}

// resumeOn restores the image on another host: check that it can run it,
// send the chunks it lacks, restore there, and send the client there.
func (s *Service) resumeOn(ctx context.Context, id, image string, need uint64, on string) (string, error) {
	target := control.NewClient(on, s.Token, control.WithTLS(s.TLS))
	host := errs.Host(on)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	hi, err := target.Host(pctx)
	cancel()
	if err != nil {
		if errs.KindOf(err) == errs.Unknown {
			return "", errs.Wrap(err, errs.Unavailable, host, "did not answer")
		}
		return "", errs.Wrap(err, errs.KindOf(err), host, "cannot resume the session there")
	}
	switch {
	case s.Backend != "" && hi.Backend != s.Backend:
		return "", errs.New(errs.FailedPrecondition, host, "runs the %s backend and the session's image is of %s; resume it on a %s host", hi.Backend, s.Backend, s.Backend)
	case len(hi.GPUs) == 0:
		return "", errs.New(errs.ResourceExhausted, host, "reports no GPUs to run the session on")
	case hi.MemFreeBytes != nil && need > *hi.MemFreeBytes:
		return "", errs.New(errs.ResourceExhausted, host, "has %d MiB of device memory free and session %s needs %d MiB; free memory there or pick another host",
			*hi.MemFreeBytes>>20, id, need>>20)
	}
	if s.CheckTarget != nil {
		if err := s.CheckTarget(hi.HostInfo); err != nil {
			return "", errs.Wrap(err, errs.KindOf(err), host, "cannot run the session's image (incompatible GPU)")
		}
	}
	if _, err := s.Push.Push(ctx, image, target); err != nil {
		return "", errs.Wrap(err, errs.KindOf(err), host, "send image %s", image)
	}
	rr, err := target.Restore(ctx, image)
	if err != nil {
		return "", errs.Wrap(err, errs.KindOf(err), host, "restore there")
	}
	listen := rr.Listen
	if listen == "" {
		listen = hi.Listen
	}
	if err := s.Sessions.ResumedElsewhere(id, listen); err != nil {
		s.log().Warn("session resumed elsewhere but not recorded here", "session", id, "on", on, "err", err)
	}
	return listen, nil
}

// Run resumes the sessions gpud preempted itself, highest priority
// first, whenever memory comes back (and every interval, for memory that
// came back unannounced), until ctx ends. Sessions preempted on request
// wait for gpuctl resume.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	s.metrics()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		s.resumeFitting(ctx)
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-t.C:
		}
	}
}

func (s *Service) resumeFitting(ctx context.Context) {
	var mine []session.Candidate
	for _, c := range s.Sessions.PreemptedSessions() {
		if s.Sessions.PreemptedBy(c.ID) == ReasonMemory {
			mine = append(mine, c)
		}
	}
	if len(mine) == 0 {
		return
	}
	// One decision at a time: a resume must not race a preemption for
	// the same room.
	s.mu.Lock()
	defer s.mu.Unlock()
	free, total := s.Sessions.DeviceFree()
	if total == 0 {
		return
	}
	for _, c := range ResumeOrder(free, mine) {
		if ctx.Err() != nil {
			return
		}
		s.log().Info("preemption: resuming a preempted session; it fits again", "session", c.ID, "priority", c.Priority, "bytes", c.Held, "image", c.Image)
		if _, err := s.Restore.Restore(ctx, c.Image); err != nil {
			s.Metrics.failed.WithLabelValues("resume").Inc()
			s.log().Warn("preemption: resume failed; trying again later", "session", c.ID, "image", c.Image, "err", err)
			return
		}
		s.Metrics.resumed.WithLabelValues("gpud").Inc()
	}
}

// Register adds POST /v1/sessions/{id}/preempt and /resume to mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.Handle(api.RoutePreempt, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		var req api.PreemptRequest
		if r.ContentLength != 0 {
			if err := control.DecodeJSON(r, &req); err != nil {
				return err
			}
		}
		res, err := s.Preempt(r.Context(), control.PathID(r), time.Duration(req.DeadlineMS)*time.Millisecond)
		if err != nil {
			return err
		}
		control.Note(r.Context(), slog.String("image", res.Image))
		control.WriteJSON(w, res)
		return nil
	}))
	mux.Handle(api.RouteResume, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		var req api.ResumeRequest
		if r.ContentLength != 0 {
			if err := control.DecodeJSON(r, &req); err != nil {
				return err
			}
		}
		res, err := s.Resume(r.Context(), control.PathID(r), req.On)
		if err != nil {
			return err
		}
		control.Note(r.Context(), slog.String("host", res.Host))
		control.WriteJSON(w, res)
		return nil
	}))
}
