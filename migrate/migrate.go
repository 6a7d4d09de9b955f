// Package migrate moves a live session from this host (A) to another
// gpud (B) while its client keeps running:
//
//	precheck  B answers GET /v1/host, runs the same backend, has GPUs,
//	          knows the session's tenant by the same token and has room
//	          for the session within the tenant's limits
//	precopy   the session's device memory goes to B while it runs
//	ahead     B restores the session's last image's dump, while it still
//	          runs here, when a freeze may reuse that dump
//	freeze    the checkpoint pipeline on A: quiesce, suspend, detach, dump,
//	          store; A's worker stays alive, frozen     (undo: resume on A)
//	migrating the session is marked as being restored elsewhere
//	push      the chunks of the image that B lacks go to B
//	transfer  in a cluster, B becomes the session's owner in the registry
//	          (compare-and-swap on the fencing token)  (undo: take it back;
//	          when that cannot be confirmed the session stays in its image
//	          and is not resumed here: A's frozen worker is released and
//	          the client sent to B, to wait there until it is restored)
//	handover  only when A and B share one namespace of abstract unix
//	          socket names (two gpuds in one network namespace, as in a
//	          test on one machine): A's frozen worker is released, because
//	          the driver's sockets restored on B would collide with its
//	          (undo: restore the image on A)
//	restore   B restores the image and adopts the session, which waits
//	          for its client
//	moved     A tells the client, on the socket A holds, that the session
//	          now lives at B's --listen address; the client reconnects there
//	release   A's frozen worker is killed
//
// With pre-copy (package precopy), the rounds before the freeze send the
// session's device memory to B while it runs, and B stages it in memory
// (package stage) laid out as the worker's memory file; the blocks the
// freeze's save copies go to B while CRIU dumps, so B's restore reads
// almost nothing from its store. When B restored the session's last
// image's dump ahead (prepareAhead) and the freeze reuses that dump, the
// freeze hands over only the changed blocks and the protocol state.
//
// Any failure up to "restore" leaves the session running on A, and the
// error names the step and the host. Once B has adopted the session the
// migration is committed: nothing after it is undone, because undoing
// would leave the session running on both hosts. A moved notice that
// cannot be written (the client's link is down) is only logged; the
// client, when it reconnects here, is sent to B. The client-visible stall
// (downtime_ms) runs from the start of quiesce to the moved notice; the
// client's reconnect to B adds one round trip and a handshake.
package migrate

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/migrate/precopy"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/store"
)

// Pusher sends an image's chunks that the target lacks, then its manifest.
type Pusher interface {
	Push(ctx context.Context, image string, to *control.Client) (PushStats, error)
}

// PushStats says what crossed the network.
type PushStats struct {
	Chunks int   `json:"chunks"`
	Bytes  int64 `json:"bytes"`
}

// Service migrates sessions from this host; gpud builds one and registers
// its route.
type Service struct {
	Checkpoint *checkpoint.Service
	Push       Pusher
	// Token is presented to the target; hosts that migrate to each other
	// share one token file.
	Token string
	// TLS, when set, is how the target's API is reached: over HTTPS,
	// verifying its certificate (gpud --tls-ca). Nil is plain HTTP.
	TLS *tls.Config
	// Backend is this host's backend; the target must run the same.
	Backend string
	// CheckTarget, when set, refuses a target that cannot run this host's
	// sessions (cuda: cuda.RestoreHook{Host: target}.Check on the
	// manifest GPUs and driver); it runs before the session is touched.
	CheckTarget func(target backend.HostInfo) error
	// SocketNS names this host's namespace of abstract unix socket names
	// (SocketNamespace); a target reporting the same one gets the handover
	// step.
	SocketNS string
	// SessionBytes reports the device memory a session holds, which the
	// target must have free; nil skips that check.
	SessionBytes func(ctx context.Context, id string) (uint64, error)
	// SessionTenancy tells whose a session is; nil treats every session
	// as the administrator's. The target must know a tenant's session's
	// owner by the same token (the client reconnects there with it) and
	// have room for it within the tenant's limits there; the image keeps
	// its owner on the way.
	SessionTenancy func(ctx context.Context, id string) (Tenancy, error)
	// RestoreHere restores an image on this host; it undoes a handover.
	RestoreHere func(ctx context.Context, image string) error
	// Fence, when set (a host in a cluster), moves the session's
	// ownership in the registry to the target before the target restores
	// it, and a failed migration takes it back before the session may
	// resume here.
	Fence Fence
	// OnMigrated, when set, is told of each migration that succeeded
	// (for metrics).
	OnMigrated func(*api.MigrateReply)
	// PrecheckTimeout bounds the target's health check; zero means 3 s.
	PrecheckTimeout time.Duration
	Log             *slog.Logger
	// Precopy, when set, sends a session's device memory to the target
	// while it runs, before the freeze (package precopy); nil, or a
	// session it returns no worker for, moves by stop-and-copy.
	Precopy *Precopy
	// NoPrepare keeps the target from restoring the session from the
	// dump ahead of its image (see preparing); it implies
	// DurablePrecopy.
	NoPrepare bool
	// DurablePrecopy stores every pre-copy round on both hosts instead
	// of a memory pre-copy (precopy.Copier.Memory), which is used
	// wherever the target is prepared (outside a cluster's registry and
	// the handover).
	DurablePrecopy bool
	// ClientWait bounds how long a migration waits, after the moved
	// notice, to see the client served on the target (downtime_ms ends
	// there); zero means 5 s.
	ClientWait time.Duration
}

// Precopy is how this host pre-copies: from its store, with a running
// session's worker.
type Precopy struct {
	Store *store.Store
	// Worker is the running session's worker, or nil when it cannot
	// pre-copy (its backend leaves device memory to the driver).
	Worker func(ctx context.Context, id string) (precopy.Worker, error)
	Policy precopy.Policy
}

// Fence is the cluster registry as a migration uses it: the session's
// ownership goes with it, by compare-and-swap on the fencing token.
type Fence interface {
	// Handover makes host to (its name) the session's owner, not live,
	// with its image there; an error leaves this host the owner.
	Handover(ctx context.Context, id, to, image string) error
	// Reclaim takes the session back from to after a failed restore
	// there (or a handover that may not have happened). An error means
	// the registry could not confirm it: the session may run there, so
	// it must not resume here.
	Reclaim(ctx context.Context, id, to string) error
}

// ErrUnconfirmed is wrapped by a Fence.Handover error when the registry
// did not answer the change: it may have been made. The migration then
// takes the session back (Reclaim) before it may resume here.
var ErrUnconfirmed = errors.New("the registry did not confirm the ownership change")

// Tenancy is what a migration needs to know about a session's owner.
type Tenancy struct {
	// Tenant owns the session; empty for the administrator.
	Tenant string
	// Fingerprint is the tenant's token fingerprint here (see
	// api.Tenant.TokenFingerprint).
	Fingerprint string
	// AllocBytes is what the session's allocations hold: what counts
	// against the tenant's memory limit.
	AllocBytes uint64
}

// Register adds POST /v1/sessions/{id}/migrate to mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.Handle(api.RouteMigrate, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		var req api.MigrateRequest
		if err := control.DecodeJSON(r, &req); err != nil {
			return err
		}
		control.Note(r.Context(), slog.String("to", req.To))
		res, err := s.Migrate(r.Context(), control.PathID(r), req.To)
		if err != nil {
			return err
		}
		control.WriteJSON(w, res)
		return nil
	}))
}

// Migrate moves session id to the gpud whose API is at to.
func (s *Service) Migrate(ctx context.Context, id, to string) (*api.MigrateReply, error) {
	t0 := time.Now()
	if err := ids.CheckSession(id); err != nil {
		return nil, err
	}
	if to == "" {
		return nil, errs.New(errs.InvalidArgument, errs.Session(id), "no target: pass --to HOST:PORT, the target gpud's --api address")
	}
	target := control.NewClient(to, s.Token, control.WithTLS(s.TLS))
	host := errs.Host(to)
	res := &api.MigrateReply{Session: id, To: to}
	var (
		fr       *checkpoint.Frozen
		listen   string
		shared   bool      // A and B share abstract socket names
		released bool      // A's frozen worker is gone (handover)
		tq       time.Time // quiesce began: the client stalls from here
		toName   string    // the target's --name, as the registry knows it
		fenced   bool      // ownership moved to the target and was not taken back
	)
	sess := s.Checkpoint.Sessions
	var (
		pc     *precopy.Copier
		stream *precopy.Stream // the process image's chunks, sent while they are stored
		prep   *preparing      // the target's restore of the dump, ahead of the image
		// memory: a memory pre-copy, whose target adopts the session
		// from its staging before any image exists; saveGen is the
		// freeze's save, which its staging must hold.
		memory  bool
		saveGen uint64
		// aheadOf is the session's last image when the target restored
		// the session from its dump before the freeze (prepareAhead).
		aheadOf *images.Manifest
	)
	defer func() {
		if stream != nil {
			stream.Wait() // the freeze or a step before the push failed
		}
	}()
	defer func() {
		if prep != nil {
			prep.cancel()
			_ = prep.wait()
		}
	}()
	unclaim := func() {}
	defer func() { unclaim() }()
	defer func() {
		if pc != nil {
			pc.Close(context.WithoutCancel(ctx))
		}
	}()
	steps := []checkpoint.Step{
		{Name: "precheck", Do: func(ctx context.Context) error {
			var err error
			listen, shared, toName, err = s.precheck(ctx, id, target)
			if err != nil {
				return err
			}
			// From here to the end no checkpoint of the session starts.
			free, err := s.Checkpoint.Claim(id)
			if err != nil {
				return err
			}
			unclaim = free
			return nil
		}},
		{Name: "precopy", Do: func(ctx context.Context) error {
			if s.Precopy == nil || s.Precopy.Worker == nil {
				return nil
			}
			w, err := s.Precopy.Worker(ctx, id)
			if err != nil || w == nil {
				return err
			}
			pc = &precopy.Copier{Store: s.Precopy.Store, Target: target, Session: id, Policy: s.Precopy.Policy, Log: s.log(),
				Memory: s.prepares(shared) && !s.DurablePrecopy}
			res.Rounds, err = pc.Run(ctx, w)
			res.Memory = pc.InMemory()
			for _, r := range res.Rounds {
				res.SentBytes += r.SentBytes
			}
			return err
		}},
		{Name: "ahead",
			// Only where the target adopts the session from its staging:
			// the freeze then need not send a dump at all. gpud
			// --reuse-dump=false turns it off (ReusableDump finds none).
			Skip: func() bool {
				return pc == nil || !pc.InMemory() || pc.Base() == nil || !s.prepares(shared)
			},
			Do: func(ctx context.Context) error {
				m, err := s.Checkpoint.ReusableDump(ctx, id)
				if err != nil || m == nil {
					return nil // nothing to restore ahead: the freeze dumps
				}
				p, err := s.prepareAhead(ctx, target, id, m, pc.Base().Gen())
				if err != nil {
					// Costs only the time: the freeze dumps the worker.
					res.AheadError = err.Error()
					s.log().Info("the target did not restore the session ahead of the freeze; the freeze dumps it", "session", id, "target", to, "image", m.ID, "err", err)
					return nil
				}
				prep, aheadOf = p, m
				return nil
			}},
		{Name: "freeze",
			Do: func(ctx context.Context) error {
				tq = time.Now()
				var err error
				var base *devstore.Table
				if pc != nil {
					base = pc.Base()
					memory = base != nil && pc.InMemory()
				}
				opts := checkpoint.FreezeOptions{Claimed: true, MemBase: base, ReuseImage: aheadOf}
				if base != nil {
					// The blocks changed since the last round go to the
					// target while CRIU dumps the worker.
					opts.Saved = func(snap *devstore.Snapshot) {
						saveGen = snap.Layout.Gen
						pc.Last(ctx, snap)
					}
				}
				if memory {
					// Neither store has the rounds' blocks: the save is
					// completed from the mirror, and the image stored
					// once the target runs the session.
					opts.MemComplete, opts.DeferStore = pc.MemComplete, true
					// The save writes into the mirror's pages, there
					// already: no memfd is faulted in while the client
					// waits, and the save comes out complete.
					opts.MemInto, opts.MemMirror = pc.Mirror()
				} else {
					// The process image's chunks go while they are stored.
					stream = precopy.StartStream(ctx, target)
					opts.Stored = stream.Observe
				}
				if base != nil && s.prepares(shared) {
					// And the target restores the dump meanwhile. The
					// hook runs after the save step started Last, whose
					// sending StagedGen must wait for.
					opts.Dumped = func(dir string, meta images.Meta) {
						gen := pc.StagedGen()
						if memory {
							// The target restores the process while
							// the freeze's last blocks arrive, and
							// waits for them only to reload
							// (restore.Restorer.AwaitStaged).
							gen = func() uint64 { return saveGen }
						}
						prep = s.startPrepare(ctx, target, id, dir, meta, gen)
					}
				}
				fr, err = s.Checkpoint.FreezeWith(ctx, id, opts)
				if err != nil {
					return err // the deferred Wait ends the stream
				}
				if !fr.Quiesced.IsZero() {
					// The freeze prepared its save while the client was
					// still served: its pause began at the quiesce.
					tq = fr.Quiesced
				}
				res.Image, res.Bytes = fr.Image, fr.Bytes
				res.FreezeSteps = checkpoint.StepTimings(fr.Steps)
				return nil
			},
			Undo: func(ctx context.Context) error {
				if released {
					return nil // the handover's undo brought the session back
				}
				if fenced {
					s.abandon(ctx, id, fr, listen)
					return errs.New(errs.FailedPrecondition, errs.Session(id), "not resumed here: the registry may have it owned by %s; it lives in image %s, and its client was sent there to wait for it", toName, fr.Image)
				}
				w, err := fr.Resume(ctx)
				if w != nil {
					if rerr := sess.Resumed(id, w); err == nil {
						err = rerr
					}
				}
				return err
			}},
		{Name: "migrating", Do: func(ctx context.Context) error { return sess.Migrating(id) }},
		{Name: "push", Do: func(ctx context.Context) error {
			if pc != nil {
				n, err := pc.WaitLast()
				res.SentBytes += n
				if err != nil {
					return errs.Wrap(err, errs.KindOf(err), host, "send the freeze's changed device memory")
				}
			}
			if memory {
				return nil // the image follows the adoption
			}
			streamed, skipped, serr := stream.Wait()
			res.SentBytes += streamed
			res.StreamedBytes = streamed
			if serr != nil || skipped > 0 {
				s.log().Debug("the push sends what the stream did not", "session", id, "target", to, "streamed", streamed, "skipped", skipped, "err", serr)
			}
			return s.push(ctx, fr.Image, target, res)
		}},
		{Name: "transfer",
			Do: func(ctx context.Context) error {
				if s.Fence == nil {
					return nil
				}
				if err := s.Fence.Handover(ctx, id, toName, fr.Image); err != nil {
					if errors.Is(err, ErrUnconfirmed) {
						// The target may own it now: resume here only
						// once the registry says this host owns it.
						if rerr := s.Fence.Reclaim(ctx, id, toName); rerr != nil {
							fenced = true
						}
					}
					return err
				}
				fenced = true
				return nil
			},
			Undo: func(ctx context.Context) error {
				if !fenced {
					return nil
				}
				if err := s.Fence.Reclaim(ctx, id, toName); err != nil {
					return err
				}
				fenced = false
				return nil
			}},
		{Name: "handover",
			Do: func(ctx context.Context) error {
				if !shared {
					return nil
				}
				released = true
				if err := fr.Release(ctx); err != nil {
					return err
				}
				// The session lives only in its image now: stopped here,
				// so that the undo can restore it here.
				return sess.Released(id)
			},
			Undo: func(ctx context.Context) error {
				if !released {
					return nil
				}
				if s.RestoreHere == nil {
					return errs.New(errs.FailedPrecondition, errs.Session(id), "released for a handover and cannot be restored here; restore image %s", fr.Image)
				}
				return s.RestoreHere(ctx, fr.Image)
			}},
		{Name: "restore", Do: func(ctx context.Context) error {
			if prep != nil {
				// The target's restore of the image waits for the
				// prepare, then adopts what it prepared, or restores from
				// its store when it prepared nothing.
				prep.whenSent()
				defer func() {
					if err := prep.wait(); err != nil {
						s.log().Info("the target did not restore the session ahead of its image; it restored it from its store", "session", id, "target", to, "err", err)
					}
				}()
			}
			var rr *api.RestoreReply
			var err error
			if memory && aheadOf != nil && fr.ProcessOf != "" {
				// The freeze reused the dump the target restored ahead:
				// it takes the changed blocks and the protocol state.
				res.Ahead = aheadOf.ID
				rr, err = target.AdoptPrepared(ctx, id, api.AdoptRequest{Nonce: fr.Nonce, Gen: saveGen, State: fr.State(), Epoch: fr.Epoch})
			} else if memory {
				if prep == nil || !prep.sentAll() || prep.failed() {
					perr := errors.New("the dump was not sent")
					if prep != nil && prep.failed() {
						perr = prep.wait()
					}
					return errs.Wrap(perr, errs.FailedPrecondition, host, "restore there from the staged device memory")
				}
				rr, err = target.AdoptPrepared(ctx, id, api.AdoptRequest{Nonce: prep.nonce, Gen: saveGen})
			} else if prep != nil && prep.sentAll() && !prep.failed() {
				rr, err = target.RestorePrepared(ctx, fr.Image, id, prep.nonce)
			} else {
				rr, err = target.Restore(ctx, fr.Image)
			}
			if err != nil {
				return errs.Wrap(err, errs.KindOf(err), host, "restore there")
			}
			if rr.Session != id {
				return errs.New(errs.Internal, host, "restored session %q, expected %q", rr.Session, id)
			}
			res.TargetSteps = rr.Steps
			if rr.Listen != "" {
				listen = rr.Listen
			}
			if listen == "" {
				return errs.New(errs.FailedPrecondition, host, "the target does not report its --listen address; upgrade its gpud")
			}
			return nil
		}},
	}
	timings, err := checkpoint.Run(ctx, s.log(), "migrate", errs.Session(id), steps)
	if err != nil {
		if prep != nil {
			// Ended before the drop below, which kills what it prepared.
			prep.cancel()
			_ = prep.wait()
		}
		if pc != nil {
			// No restore there takes what the rounds staged.
			pc.Unstage(context.WithoutCancel(ctx))
		}
		res.Steps = checkpoint.StepTimings(timings)
		return nil, err
	}
	// B has adopted the session: from here on nothing is undone, or the
	// session would run on both hosts. A client that cannot be told now
	// (its link is down) is sent to B when it comes back here.
	t0m := time.Now()
	err = sess.Moved(id, listen)
	if err == nil {
		// A test makes the notice fail here.
		err = failpoint.Inject(ctx, "migrate/moved")
	}
	if err != nil {
		s.log().Warn("the client was not told where its session went; it is redirected when it reconnects here",
			"session", id, "to", listen, "err", err)
		// The migration stands; its audit line says the client was not
		// told.
		control.Note(ctx, slog.Bool("client_told", false))
	}
	told := err == nil
	timings = append(timings, checkpoint.Timing{Step: "moved", Duration: time.Since(t0m)})
	res.Steps = checkpoint.StepTimings(timings)
	res.DowntimeMS = time.Since(tq).Milliseconds()
	res.Listen = listen
	// The client's stall ends when the target serves it: wait for it to
	// attach there (it reconnects on the moved notice). A client that does
	// not come back in time leaves the stall measured to the notice.
	awaitClient := func() {
		if at, ok := s.awaitClient(ctx, target, id); told && ok {
			res.DowntimeMS = at.Sub(tq).Milliseconds()
		}
	}
	if memory {
		// The image is made from the frozen worker's save, after the
		// client runs on the target: it is not part of the downtime.
		awaitClient()
		s.storeAfter(ctx, id, fr, target, res)
	}
	// The session lives on the target now; what is left here is a frozen
	// copy that must not run again.
	if !released {
		if err := fr.Release(ctx); err != nil {
			s.log().Error("frozen worker not released after migration", "session", id, "err", err)
		}
		if err := sess.Released(id); err != nil {
			s.log().Warn("session record not updated after migration", "session", id, "err", err)
		}
	}
	if !memory {
		awaitClient()
	}
	res.DurationMS = time.Since(t0).Milliseconds()
	if s.OnMigrated != nil {
		s.OnMigrated(res)
	}
	s.log().Info("session migrated", "session", id, "to", to, "downtime_ms", res.DowntimeMS, "sent_bytes", res.SentBytes)
	return res, nil
}

// prepares says whether a migration's target restores the session from
// the dump ahead of its image (see preparing): not for a target that
// shares this host's socket names (a handover) nor in a cluster, whose
// registry hands the session over only with its image.
func (s *Service) prepares(shared bool) bool {
	return !shared && s.Fence == nil && !s.NoPrepare
}

// storeAfter stores the image of a memory pre-copy's freeze, now that
// the target runs the session, and sends it there: the session's image
// on the target, restorable as any other. A failure loses no session (it
// runs on the target); the reply says why there is no image.
func (s *Service) storeAfter(ctx context.Context, id string, fr *checkpoint.Frozen, target *control.Client, res *api.MigrateReply) {
	t0 := time.Now()
	err := failpoint.Inject(ctx, "migrate/image") // a test fails the store here
	if err == nil {
		err = fr.Store(ctx)
	}
	if err == nil {
		err = s.push(ctx, fr.Image, target, res)
	}
	res.FreezeSteps = checkpoint.StepTimings(fr.Steps)
	res.Steps = append(res.Steps, api.StepTiming{Step: "image", Duration: time.Since(t0)})
	if err != nil {
		res.ImageError = err.Error()
		s.log().Warn("the migrated session runs on its target with no image of the migration", "session", id, "target", target.Addr(), "err", err)
		return
	}
	res.Image, res.Bytes = fr.Image, fr.Bytes
	// The target makes the image the session's base: its next
	// checkpoint copies only what changed.
	if _, err := target.AdoptPrepared(ctx, id, api.AdoptRequest{Nonce: fr.Nonce, Image: fr.Image}); err != nil {
		s.log().Warn("the target did not take the migration's image as the session's base; its next checkpoint there copies all of its memory", "session", id, "target", target.Addr(), "image", fr.Image, "err", err)
	}
}

// push sends image to target (the chunks it lacks, then the manifest)
// and counts what crossed in res.
func (s *Service) push(ctx context.Context, image string, target *control.Client, res *api.MigrateReply) error {
	st, err := s.Push.Push(ctx, image, target)
	res.SentBytes += st.Bytes
	res.PushBytes = st.Bytes
	res.SentChunks = st.Chunks
	return errs.Wrap(err, errs.KindOf(err), errs.Host(target.Addr()), "send image %s", image)
}

// abandon gives up a frozen session that must not resume here: the
// registry may have it owned by the target (the migration failed after
// the handover and taking it back could not be confirmed). Left as it
// was, its frozen worker would linger as a second copy and its client
// would wait on a session that never thaws. The worker is released, the
// session recorded as living in its image, and the client sent to the
// target, which tells it to wait (from the registry) until the session is
// restored from its image, there or wherever the registry allows.
func (s *Service) abandon(ctx context.Context, id string, fr *checkpoint.Frozen, listen string) {
	sess := s.Checkpoint.Sessions
	if listen != "" {
		if err := sess.Moved(id, listen); err != nil {
			s.log().Warn("the client of an abandoned session was not sent on; it is when it reconnects here", "session", id, "to", listen, "err", err)
		}
	}
	if err := fr.Release(ctx); err != nil {
		s.log().Error("frozen worker of an abandoned session not released", "session", id, "err", err)
	}
	if err := sess.Released(id); err != nil {
		s.log().Warn("abandoned session's record not updated", "session", id, "err", err)
	}
	s.log().Warn("migration failed after the handover and the session could not be taken back; it lives in its image", "session", id, "image", fr.Image)
}

// awaitClient polls the target until the session's client is attached
// there, and says when it saw it.
func (s *Service) awaitClient(ctx context.Context, target *control.Client, id string) (time.Time, bool) {
	d := s.ClientWait
	if d <= 0 {
		d = 5 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		if si, err := target.Session(ctx, id); err == nil && si.Client != "" && si.State == "running" {
			return time.Now(), true
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// precheck fails fast on a target that is down, misconfigured or cannot
// run the session, before the session is touched.
func (s *Service) precheck(ctx context.Context, id string, target *control.Client) (listen string, shared bool, name string, err error) {
	d := s.PrecheckTimeout
	if d <= 0 {
		d = 3 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	host := errs.Host(target.Addr())
	hi, err := target.Host(ctx)
	if err != nil {
		if errs.KindOf(err) == errs.Unknown || ctx.Err() != nil {
			return "", false, "", errs.Wrap(err, errs.Unavailable, host, "target did not answer within %v", d)
		}
		return "", false, "", err
	}
	if s.Backend != "" && hi.Backend != s.Backend {
		return "", false, "", errs.New(errs.FailedPrecondition, host, "runs the %s backend, this host runs %s; migrate to a %s host", hi.Backend, s.Backend, s.Backend)
	}
	if len(hi.GPUs) == 0 {
		return "", false, "", errs.New(errs.ResourceExhausted, host, "reports no GPUs to run the session on")
	}
	// Before anything that depends on the session: the caller's view of
	// another tenant's session ends here, as that of a missing one does.
	if err := s.Checkpoint.Sessions.Authorize(ctx, id); err != nil {
		return "", false, "", err
	}
	if s.SessionBytes != nil && hi.MemFreeBytes != nil {
		need, err := s.SessionBytes(ctx, id)
		if err != nil {
			return "", false, "", err
		}
		if need > *hi.MemFreeBytes {
			return "", false, "", errs.New(errs.ResourceExhausted, host, "has %d MiB of device memory free and session %s holds %d MiB; free memory there or pick another host",
				*hi.MemFreeBytes>>20, id, need>>20)
		}
	}
	if s.CheckTarget != nil {
		if err := s.CheckTarget(hi.HostInfo); err != nil {
			return "", false, "", errs.Wrap(err, errs.KindOf(err), host, "cannot run the session")
		}
	}
	if s.SessionTenancy != nil {
		ten, err := s.SessionTenancy(ctx, id)
		if err != nil {
			return "", false, "", err
		}
		if err := checkTenant(ten, id, hi.Tenants); err != nil {
			return "", false, "", errs.Wrap(err, errs.KindOf(err), host, "cannot take the session")
		}
	}
	return hi.Listen, s.SocketNS != "" && hi.SocketNS == s.SocketNS, hi.Name, nil
}

// checkTenant refuses a target that does not know the session's tenant
// by the same token, or whose limits for it leave no room.
func checkTenant(ten Tenancy, id string, there []api.Tenant) error {
	if ten.Tenant == "" {
		return nil
	}
	var t *api.Tenant
	for i := range there {
		if there[i].Name == ten.Tenant {
			t = &there[i]
		}
	}
	switch {
	case t == nil:
		return errs.New(errs.FailedPrecondition, "", "it does not know tenant %q, which owns session %s; add the tenant, with the same token file, to gpud's --tenants file there", ten.Tenant, id)
	case t.TokenFingerprint != ten.Fingerprint:
		return errs.New(errs.FailedPrecondition, "", "it knows tenant %q by another token, so the session's client could not reconnect there; give both hosts the same token file for the tenant", ten.Tenant)
	case t.MaxSessions > 0 && t.Sessions >= t.MaxSessions:
		return errs.New(errs.ResourceExhausted, "", "tenant %q already has %d live session(s) there, its max_sessions", ten.Tenant, t.Sessions)
	case t.MaxMemBytes > 0 && t.MemBytes+ten.AllocBytes > t.MaxMemBytes:
		return errs.New(errs.ResourceExhausted, "", "session %s holds %d bytes of device memory and tenant %q has %d of its max_mem_bytes (%d) left there",
			id, ten.AllocBytes, ten.Tenant, t.MaxMemBytes-min(t.MemBytes, t.MaxMemBytes), t.MaxMemBytes)
	}
	return nil
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// SocketNamespace names the namespace of abstract unix socket names this
// process lives in: the machine and its network namespace. Two gpuds that
// report the same name see each other's abstract sockets.
func SocketNamespace() string {
	id, err := os.ReadFile("/etc/machine-id")
	if err != nil {
		return ""
	}
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &st); err != nil {
		return ""
	}
	return fmt.Sprintf("%s/net:%d", strings.TrimSpace(string(id)), st.Ino)
}
