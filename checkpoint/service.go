package checkpoint

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/images"
)

// Sessions is gpud's session table as the checkpoint and migration routes
// drive it. Its methods move the session through the state machine
// (running|detached -> quiescing -> checkpointing -> ...); a transition
// the machine refuses is an errs.FailedPrecondition error.
type Sessions interface {
	// Authorize returns nil when the caller in ctx may act on session id
	// (see package tenant), and otherwise the very error a session that
	// is not here gets, so that a tenant learns nothing of others'.
	Authorize(ctx context.Context, id string) error
	// Begin claims a running or detached session for a checkpoint
	// (-> quiescing) and returns its worker, adapted so that Resume hands
	// it the client socket gpud kept.
	Begin(ctx context.Context, id string) (Worker, error)
	// Dumped records that the session is in an image (-> checkpointing).
	Dumped(id string) error
	// Resumed records that the session runs here again, served by w (a
	// checkpoint that left it running, or a rollback).
	Resumed(id string, w Worker) error
	// Migrating records that another host is restoring the session.
	Migrating(id string) error
	// Moved tells the session's client that the session now lives at
	// addr (a "moved" notice on the client socket gpud holds).
	Moved(id string, addr string) error
	// Released records that the session's worker here is gone: it lives
	// in its image or on another host (-> stopped).
	Released(id string) error
	// LastImage is the session's most recent image on this host, or "".
	LastImage(ctx context.Context, id string) (string, error)
	// Owner is the tenant that owns the session, and so its images; ""
	// for the administrator.
	Owner(id string) string
}

// attributes is a session table that knows sessions' priorities and
// labels, which their images keep (images.Meta).
type attributes interface {
	Attributes(id string) (int32, api.Labels)
}

// Service checkpoints sessions on request; gpud builds one and registers
// its routes.
type Service struct {
	Pipeline *Pipeline
	Sessions Sessions
	Log      *slog.Logger
	// OnStep, when set, observes each step's duration (metrics).
	OnStep func(step string, d time.Duration)

	mu   sync.Mutex
	busy map[string]bool // sessions with a checkpoint or migration in progress
}

// Register adds POST /v1/sessions/{id}/checkpoint to mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.Handle(api.RouteCheckpoint, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		var req api.CheckpointRequest
		if r.ContentLength != 0 {
			if err := control.DecodeJSON(r, &req); err != nil {
				return err
			}
		}
		res, err := s.Checkpoint(r.Context(), control.PathID(r), req)
		if err != nil {
			return err
		}
		control.Note(r.Context(), slog.String("image", res.Image))
		control.WriteJSON(w, res)
		return nil
	}))
}

// Claim marks a session busy for one checkpoint or migration; the
// returned func frees it. A second claim is refused.
func (s *Service) Claim(id string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy == nil {
		s.busy = map[string]bool{}
	}
	if s.busy[id] {
		return nil, errs.New(errs.FailedPrecondition, errs.Session(id), "a checkpoint or migration of this session is already in progress")
	}
	s.busy[id] = true
	return func() {
		s.mu.Lock()
		delete(s.busy, id)
		s.mu.Unlock()
	}, nil
}

// Checkpoint stores the session in an image; with req.LeaveRunning the
// session goes on running here, otherwise its worker is released.
func (s *Service) Checkpoint(ctx context.Context, id string, req api.CheckpointRequest) (*api.CheckpointReply, error) {
	fr, err := s.freeze(ctx, id, req.LeaveRunning)
	if err != nil {
		return nil, err
	}
	if fr.Early {
		return fr.Result.reply(), nil // resumed before the store step
	}
	if req.LeaveRunning {
		w, err := fr.Resume(ctx)
		if w != nil {
			if rerr := s.Sessions.Resumed(id, w); err == nil {
				err = rerr
			}
		}
		if err != nil {
			return nil, errs.Wrap(err, errs.KindOf(err), "", "image %s is stored, but the session did not resume", fr.Image)
		}
		fr.StallMS = fr.DurationMS
		return fr.Result.reply(), nil
	}
	fr.Stash = true // a restore here reloads from host memory
	if err := fr.Release(ctx); err != nil {
		return nil, err
	}
	if err := s.Sessions.Released(id); err != nil {
		s.log().Warn("session record not updated after release", "session", id, "err", err)
	}
	return fr.Result.reply(), nil
}

// reply is the result as the API reports it.
func (r *Result) reply() *api.CheckpointReply {
	return &api.CheckpointReply{Image: r.Image, Session: r.Session, Bytes: r.Bytes, StoredBytes: r.StoredBytes,
		DurationMS: r.DurationMS, Steps: StepTimings(r.Steps), Nonce: r.Nonce,
		StallMS: r.StallMS, MemBytes: r.MemBytes, MemSentBytes: r.MemSentBytes, MemCopiedBytes: r.MemCopiedBytes, ProcessOf: r.ProcessOf}
}

// Freeze claims the session, runs the pipeline and records the session as
// checkpointed; on failure the session is running again. The caller must
// Resume or Release the result.
func (s *Service) Freeze(ctx context.Context, id string) (*Frozen, error) {
	return s.freeze(ctx, id, false)
}

// FreezeOptions change a Freeze.
type FreezeOptions struct {
	// Claimed: the caller holds Claim(id) already (a migration that
	// pre-copied the session's memory first).
	Claimed bool
	// MemBase is Request.MemBase.
	MemBase *devstore.Table
	// Saved is Request.Saved.
	Saved func(snap *devstore.Snapshot)
	// Stored is Request.Stored.
	Stored images.ChunkObserver
	// Dumped is Request.Dumped.
	Dumped func(dir string, meta images.Meta)
	// MemComplete is Request.MemComplete.
	MemComplete func(snap *devstore.Snapshot) error
	// DeferStore is Request.DeferStore: the caller stores the image
	// (Frozen.Store).
	DeferStore bool
	// MemInto and MemMirror are Request.MemInto and Request.MemMirror.
	MemInto   *os.File
	MemMirror uint64
	// ReuseImage is Request.ReuseImage.
	ReuseImage *images.Manifest
}

// ReusableDump returns the session's last image when a checkpoint now
// might reuse its dump (it is in this host's store, holds the session's
// last save and names its dump's nonce), or nil. Whether the worker is
// still what the dump holds is known only once it is quiesced.
func (s *Service) ReusableDump(ctx context.Context, id string) (*images.Manifest, error) {
	p := s.Pipeline
	if p.Mem == nil || p.NoReuse {
		return nil, nil
	}
	parent, err := s.Sessions.LastImage(ctx, id)
	if err != nil {
		return nil, err
	}
	return p.lastDump(ctx, Request{Session: id}, p.Mem.Base(ctx, id, parent)), nil
}

// CheckoutProcess writes the files of image m's dump (every file but its
// device memory) into dir, which exists and is empty: a migration's
// target restores the session from them ahead of the freeze.
func (s *Service) CheckoutProcess(ctx context.Context, m *images.Manifest, dir string) error {
	_, err := images.CheckoutExcept(ctx, s.Pipeline.Mem.Store, m.ID, dir, func(path string) bool {
		return path == devmem.DataFile || path == devmem.LayoutFile
	})
	return err
}

// FreezeWith is Freeze with options.
func (s *Service) FreezeWith(ctx context.Context, id string, o FreezeOptions) (*Frozen, error) {
	return s.freezeWith(ctx, id, false, o)
}

// freeze is Freeze; with early, a session whose worker saves its own
// device memory is resumed before its image is stored (Result.Early).
func (s *Service) freeze(ctx context.Context, id string, early bool) (*Frozen, error) {
	return s.freezeWith(ctx, id, early, FreezeOptions{})
}

func (s *Service) freezeWith(ctx context.Context, id string, early bool, o FreezeOptions) (*Frozen, error) {
	if err := ids.CheckSession(id); err != nil {
		return nil, err
	}
	// Before anything else answers: even "busy" would tell a tenant that
	// another's session exists.
	if err := s.Sessions.Authorize(ctx, id); err != nil {
		return nil, err
	}
	if !o.Claimed {
		free, err := s.Claim(id)
		if err != nil {
			return nil, err
		}
		defer free()
	}
	parent, err := s.Sessions.LastImage(ctx, id)
	if err != nil {
		return nil, err
	}
	w, err := s.Sessions.Begin(ctx, id)
	if err != nil {
		return nil, err
	}
	cur := w
	resumed := false
	req := Request{Session: id, Worker: w, Parent: parent, Tenant: s.Sessions.Owner(id),
		Reattached: func(nw Worker) { cur = nw }, ResumeEarly: early, MemBase: o.MemBase, Saved: o.Saved, Stored: o.Stored, Dumped: o.Dumped,
		MemComplete: o.MemComplete, DeferStore: o.DeferStore, MemInto: o.MemInto, MemMirror: o.MemMirror, ReuseImage: o.ReuseImage,
		Resumed: func(nw Worker) {
			cur, resumed = nw, true
			if err := s.Sessions.Resumed(id, nw); err != nil {
				s.log().Error("session record not updated after an early resume", "session", id, "err", err)
			}
		}}
	if a, ok := s.Sessions.(attributes); ok {
		req.Priority, req.Labels = a.Attributes(id)
	}
	fr, err := s.Pipeline.Checkpoint(ctx, req)
	if resumed {
		// The session runs again whatever the store step did.
		return fr, err
	}
	if err != nil {
		// The pipeline resumed the worker, perhaps through a new handle.
		if rerr := s.Sessions.Resumed(id, cur); rerr != nil {
			s.log().Error("session record not restored after a failed checkpoint", "session", id, "err", rerr)
		}
		return nil, err
	}
	for _, t := range fr.Steps {
		if s.OnStep != nil {
			s.OnStep(t.Step, t.Duration)
		}
	}
	if err := s.Sessions.Dumped(id); err != nil {
		s.log().Warn("session record not updated after dump", "session", id, "err", err)
	}
	return fr, nil
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}
