// Package checkpoint is the checkpoint pipeline: a short list of named
// steps, each with an undo, that turns a running session into an image in
// the host's store.
//
//	quiesce  the worker finishes the call in progress, drains the device,
//	         drops its client socket and holds new calls  (undo: Resume)
//	suspend  the backend's outside hook on the worker PID; for the cuda
//	         backend the driver's checkpoint API moves GPU state into the
//	         process's memory                             (undo: Resume)
//	detach   the worker drops its control connection and waits to dial
//	         back an abstract socket named by a nonce     (undo: Reattach)
//	dump     CRIU dumps the worker, which is left running (frozen in
//	         detach) so that any later failure can resume it
//	store    the image directory goes into the store with its images.Meta:
//	         the session, its previous image, its tenant, host, backend,
//	         GPUs, versions and nonce
//
// A failure undoes the completed steps in reverse, so the session is
// running again, and the error names the step and the session (and quotes
// CRIU's log when CRIU failed). After the store step the caller holds a
// *Frozen: Resume it to keep the session running where it was
// (--leave-running, or a migration that failed later), or Release it.
//
// The interfaces here are what the pipeline consumes; gpud adapts its
// worker handles, its backend's checkpoint hooks and its image store.
package checkpoint

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/gpuctl/gpuctl/childproc"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/criu"
	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// Worker is a session's worker as the pipeline drives it.
type Worker interface {
	// PID is the worker's host PID.
	PID() int
	// Quiesce stops the worker at a frame boundary: the call in progress
	// finishes, device work drains, the client socket is dropped, new
	// calls wait. gpud keeps the client's socket, so the client stalls.
	Quiesce(ctx context.Context) error
	// Resume undoes Quiesce: the worker serves its client again.
	Resume(ctx context.Context) error
	// Detach closes the control connection; the worker then waits to dial
	// @gpuctl-attach-<nonce> when told to.
	Detach(ctx context.Context, nonce string) error
}

// Fencer is a Worker whose session carries an epoch (gpud's): Fence moves
// the session and the worker to the next epoch, so that an image stored
// of the worker (which keeps the old epoch) can never serve while the
// worker goes on. A worker that is not at the session's epoch refuses: it
// is a stale copy. Epoch is the current one, for the image's manifest.
type Fencer interface {
	Fence(ctx context.Context) error
	Epoch() uint64
}

// Reattacher connects gpud to a detached worker, the original or a
// restored copy, through the nonce's abstract socket. The worker comes
// back quiesced.
type Reattacher interface {
	Reattach(ctx context.Context, pid int, nonce string) (Worker, error)
}

// Suspender is a backend's hook from outside the worker process. The cuda
// backend moves GPU state into host memory (the driver's checkpoint API:
// lock, checkpoint) and back (restore, unlock); the emulated backend needs
// none, and a nil Suspender skips the step.
type Suspender interface {
	Suspend(ctx context.Context, pid int) error
	Resume(ctx context.Context, pid int) error
}

// Store puts a CRIU image directory into the host's store as an image
// with meta (images.Commit, with the host's store).
type Store interface {
	Commit(ctx context.Context, dir string, meta images.Meta) (*images.Manifest, images.Stats, error)
}

// Pipeline checkpoints sessions on one host. Its fields are set once, by
// gpud, and never change.
type Pipeline struct {
	WorkDir   string       // STATE_DIR/work: scratch image directories and CRIU logs
	CRIU      criu.Options // CRIU settings (binary, timeouts); LeaveRunning is always set
	Suspender Suspender    // nil for backends that need no outside hook
	Store     Store
	Reattach  Reattacher
	Host      string // this host's name, for the manifest
	Backend   string
	Driver    string        // the host's driver version, for compatibility checks on restore
	GPUs      []backend.GPU // images.Meta.GPUs; for cuda: cuda.ManifestGPUs (the session's GPU first)
	Log       *slog.Logger
	// Mem, when set, has workers that can (MemWorker) save their device
	// memory themselves, block by block into the store, and release it
	// before the dump (see saveStep); nil leaves device memory to CRIU.
	Mem *devstore.Keeper
	// NoPark copies device memory to the host while the client waits
	// even where the worker could park it (MemParker).
	NoPark bool
	// NoReuse dumps the worker at every checkpoint, even when its last
	// dump still describes it (Reuser).
	NoReuse bool
	// Departed, when set, is told of each frozen worker Release ends
	// before it is killed: gpud keeps its PID namespace, whose number
	// names the driver's socket that the session carries wherever it is
	// restored (worker.Departed).
	Departed interface{ Keep(pid int) error }
}

// MemParker is a MemWorker that can park its device memory for a
// checkpoint that leaves the session running (devmem.Tracker.Park): the
// client waits only for a snapshot on the device, the driver's
// checkpoint and the dump, not for a copy to the host. The descriptors
// ParkMem returns hold the memory until UnparkMem gives it back; the
// snapshot is then saved (SaveRequest.Snapshot) while the session runs.
type MemParker interface {
	MemWorker
	ParkMem(ctx context.Context) ([]*os.File, devmem.Parked, error)
	UnparkMem(ctx context.Context, files []*os.File, req devmem.UnparkRequest) error
}

// Reuser is a MemWorker that can tell whether its last dump still
// describes it: since the dump for nonce it ran only calls that keep its
// host state, and its device memory outside the session's allocations is
// as it was (remoting/worker, reuse.go). If so ReuseDump returns its
// protocol state in a file, which the image stores as StateFile with the
// device memory and the earlier image's dump; otherwise nil and why not.
// The checkpoint then needs neither the driver's checkpoint nor CRIU.
type Reuser interface {
	ReuseDump(ctx context.Context, nonce string) (state *os.File, reason string, err error)
}

// StateImporter is a worker restored from a dump that an image reuses:
// ImportState puts the image's protocol state (StateFile) into it and
// moves it to the image's epoch.
type StateImporter interface {
	ImportState(ctx context.Context, state *os.File, epoch uint64) error
}

// StateFile is the image file that holds the protocol state of a
// checkpoint that reused its session's last dump (Reuser).
const StateFile = "gpuctl-worker-state.json"

// MemWorker is a Worker that saves its device memory itself (package
// devmem).
type MemWorker interface {
	SaveMem(ctx context.Context, req devmem.SaveRequest) (*os.File, devmem.Saved, error)
	ReloadMem(ctx context.Context, f *os.File, layoutOff, layoutLen int64) error
}

// MemPatcher is a MemWorker whose device memory, holding an earlier save
// of the same regions, can take only some blocks of a later one: a
// migration's target restored the session from its last image's dump
// before the freeze, and the freeze changed only those blocks.
type MemPatcher interface {
	PatchMem(ctx context.Context, f *os.File, layoutOff, layoutLen int64, want []byte) error
}

// MemSizer is a Worker that says how much device memory its session
// holds, so that gpud can make the memfd its save goes into before the
// session pauses (devstore.Scratch).
type MemSizer interface {
	MemBytes(ctx context.Context) (int64, error)
}

// scratchMin is the least device memory worth a memfd made ahead.
const scratchMin = 64 << 20

// Request names the session to checkpoint.
type Request struct {
	Session string
	Worker  Worker
	Parent  string // the session's previous image, if any
	// Tenant owns the session, and so the image (images.Meta.Tenant);
	// empty for the administrator.
	Tenant string
	// Priority and Labels are the session's, kept in the image.
	Priority int32
	Labels   map[string]string
	// Reattached, when set, is told of the new handle when a rollback
	// reattached the worker; the old one is then dead.
	Reattached func(Worker)
	// ResumeEarly resumes the session as soon as it is dumped, before its
	// image is stored (--leave-running), when its worker saves its own
	// device memory; Resumed is then told of the worker serving it, and
	// the Frozen result is already settled.
	ResumeEarly bool
	Resumed     func(Worker)
	// MemBase, when set, is the save the worker's device memory is
	// compared with instead of the session's last image: a live
	// migration's last pre-copy round, whose blocks the store holds.
	MemBase *devstore.Table
	// Saved, when set, is shown the save as soon as the worker made it,
	// while the dump and the store go on (a migration sends the changed
	// blocks ahead); it must not keep snap, which the pipeline closes.
	Saved func(snap *devstore.Snapshot)
	// Stored, when set, is shown the process image's chunks as the store
	// step stores them (images.ChunkObserver), when the worker saved its
	// device memory itself (so that the process image is small): a
	// migration sends them to its target meanwhile.
	Stored images.ChunkObserver
	// Dumped, when set, is shown the dump's directory and the image's
	// metadata as soon as CRIU wrote it, before the store step: a
	// migration restores it on its target meanwhile. It must not keep
	// dir, which the pipeline removes once the image is stored.
	Dumped func(dir string, meta images.Meta)
	// MemComplete, when set, fills in the blocks the save did not copy
	// from a copy of MemBase's device memory this host holds in memory (a
	// memory pre-copy's mirror), because this host's store does not hold
	// MemBase's blocks: a rollback reloads the worker from the completed
	// save, and the store step stores every block (devstore.FilesAll).
	MemComplete func(snap *devstore.Snapshot) error
	// MemInto, with MemBase, is the memfd the save goes into: every block
	// of save MemMirror (MemBase's) laid out as that save laid it out, so
	// that only the changed blocks are copied, into pages already there,
	// and the save is complete (devmem.SaveRequest.Mirror). The pipeline
	// closes it.
	MemInto   *os.File
	MemMirror uint64
	// DeferStore ends the checkpoint after the dump, the session frozen
	// and no image stored yet: Frozen.Store stores it later. A migration
	// whose target took the session over from its staged memory stores
	// the image once the client runs there, outside its downtime.
	DeferStore bool
	// ReuseImage, when set, is the session's last image, whose dump a
	// migration's target restored ahead of the freeze: the checkpoint
	// reuses that dump (Reuser) when the worker is still what it holds,
	// with a migration's options too (MemBase, Saved, MemComplete,
	// DeferStore), and dumps as usual when not.
	ReuseImage *images.Manifest
}

// Result describes a stored checkpoint.
type Result struct {
	Image       string   `json:"image"`
	Session     string   `json:"session"`
	Bytes       int64    `json:"bytes"`
	StoredBytes int64    `json:"stored_bytes"`
	DurationMS  int64    `json:"duration_ms"`
	Steps       []Timing `json:"steps,omitempty"`
	Nonce       string   `json:"nonce"`
	// StallMS is how long the client was paused, up to its session's
	// early resume (ResumeEarly) or to the end (otherwise).
	StallMS      int64 `json:"stall_ms"`
	MemBytes     int64 `json:"mem_bytes,omitempty"`
	MemSentBytes int64 `json:"mem_sent_bytes,omitempty"`
	// MemCopiedBytes is what the save copied from the device.
	MemCopiedBytes int64 `json:"mem_copied_bytes,omitempty"`
	// Early is set when the session was resumed before the store step.
	Early bool `json:"-"`
	// Quiesced is when the client's pause began (the quiesce step),
	// after the prepare step that runs while it is still served.
	Quiesced time.Time `json:"-"`
	// ProcessOf is set when the checkpoint reused the dump of the
	// worker that image holds (Reuser): no driver checkpoint, no CRIU.
	ProcessOf string `json:"process_of,omitempty"`
	// Epoch is the image's epoch (images.Meta.Epoch).
	Epoch uint64 `json:"-"`
}

// Frozen is a checkpointed session whose original worker is still alive,
// detached and suspended. Exactly one of Resume or Release must follow.
type Frozen struct {
	Result
	PID int
	// Stash has Release keep the saved device memory in host memory for
	// a restore of the image on this host (devstore.Keeper.Stash): the
	// session ended here, it did not move.
	Stash   bool
	p       *Pipeline
	settled bool
	// snap is the saved device memory (nil when CRIU dumped it), and
	// base the save it is relative to: a Resume reloads the worker from
	// them.
	snap     *devstore.Snapshot
	base     *devstore.Table
	keepSnap bool // the early resume: the store step reads snap after it
	// complete is Request.MemComplete; deferred the store DeferStore
	// left for Store.
	complete func(*devstore.Snapshot) error
	deferred *deferredStore
	// parked holds the session's parked memory (isParked) until Resume
	// gives it back; unparked says it did, with the snapshot kept.
	parked             []*os.File
	isParked, unparked bool
	// resumed is where Resume's time went, step by step.
	resumed []Timing
	// reused: the checkpoint reused the last dump (Reuser), so the
	// worker, w, was only quiesced: Resume resumes it, no more.
	reused bool
	w      Worker
	// state is the protocol state a reused checkpoint stored
	// (StateFile).
	state []byte
}

// State is the protocol state of a checkpoint that reused its session's
// last dump (Result.ProcessOf set): what a worker restored from that
// dump takes to go on from this checkpoint (StateImporter); nil
// otherwise.
func (f *Frozen) State() []byte { return f.state }

// Checkpoint runs quiesce, suspend, detach, dump and store. On success the
// original worker is frozen; see Frozen.
func (p *Pipeline) Checkpoint(ctx context.Context, req Request) (*Frozen, error) {
	t0 := time.Now()
	subject := errs.Session(req.Session)
	if req.Worker == nil {
		return nil, errs.New(errs.FailedPrecondition, subject, "no worker is running; the session cannot be checkpointed")
	}
	pid := req.Worker.PID()
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	meta, err := p.meta(ctx, req, nonce)
	if err != nil {
		return nil, err
	}
	work := filepath.Join(p.WorkDir, fmt.Sprintf("ckpt-%s-%s", req.Session, nonce[:8]))
	imgDir := filepath.Join(work, "img")
	if err := os.MkdirAll(imgDir, 0o700); err != nil {
		return nil, errs.Wrap(err, errs.Internal, subject, "create the checkpoint work directory")
	}
	ok, keepWork := false, false
	defer func() {
		// The image is in the store or the checkpoint failed: either way
		// the dump is no longer needed. A failed run keeps CRIU's log,
		// which its error names.
		if ok {
			if !keepWork {
				os.RemoveAll(work)
			}
		} else {
			os.RemoveAll(imgDir)
		}
	}()

	cur := req.Worker // the handle in use; a reattach replaces it
	var (
		image *images.Manifest
		stats images.Stats
	)
	opts := p.CRIU
	opts.LeaveRunning = true
	opts.LogDir = work
	var (
		snap   *devstore.Snapshot
		base   *devstore.Table
		tq     time.Time
		early  bool
		into   *os.File   // the memfd made ready for the save
		mirror uint64     // the save into holds, if any
		parked []*os.File // what holds the parked memory (isParked)
		// scratchReady brings the memfd of a parked checkpoint's save,
		// made while the session runs again.
		scratchReady <-chan *os.File
		scratchN     int64 // the size of that memfd, before it is started
		isParked     bool
		pk           devmem.Parked
		// reuse is the session's last image when the worker may still
		// be what it holds the dump of (Reuser); reused says it is.
		reuse  *images.Manifest
		reused bool
		state  []byte // the reused checkpoint's protocol state
	)
	defer func() {
		if scratchReady != nil {
			if f := <-scratchReady; f != nil {
				f.Close()
			}
		}
		if into != nil {
			into.Close() // the worker's answer carries its own descriptor
		}
		closeFiles(parked) // a failure after the park: the memory goes
	}()
	_, saving := cur.(MemWorker)
	saving = saving && p.Mem != nil
	_, parking := cur.(MemParker)
	parking = parking && saving && req.ResumeEarly && req.Saved == nil && req.MemBase == nil && !p.NoPark
	_, reusing := cur.(Reuser)
	reusing = reusing && saving && !p.NoReuse && (req.ReuseImage != nil || req.MemBase == nil && req.Saved == nil &&
		req.Dumped == nil && req.Stored == nil && req.MemComplete == nil && !req.DeferStore)
	var steps []Step
	if saving {
		// Before the pause: what the save will write into.
		steps = append(steps, Step{Name: "prepare",
			Do: func(ctx context.Context) error {
				defer func() {
					switch {
					case !reusing:
					case req.ReuseImage != nil:
						if m := req.ReuseImage; m.Session == req.Session && m.AttachNonce != "" {
							reuse = m
						}
					default:
						reuse = p.lastDump(ctx, req, base)
					}
				}()
				if !parking {
					base, into, mirror = p.prepareMem(ctx, cur, req)
					return nil
				}
				// Parked, the save comes after the resume: its memfd
				// (seconds for gigabytes on a virtual machine) is made
				// once the session runs again (after fr.Resume below),
				// not before the checkpoint and not during the pause,
				// where filling it slowed the driver's checkpoint and
				// CRIU's dump down by as much as it took.
				base, into, mirror, scratchN = p.findMem(ctx, cur, req)
				return nil
			}})
	}
	steps = append(steps,
		Step{Name: "quiesce",
			Do: func(ctx context.Context) error {
				tq = time.Now()
				return cur.Quiesce(ctx)
			},
			Undo: func(ctx context.Context) error { return cur.Resume(ctx) }},
	)
	if reusing {
		steps = append(steps, Step{Name: "reuse",
			Skip: func() bool { return reuse == nil },
			Do: func(ctx context.Context) error {
				var err error
				reused, err = p.reuseDump(ctx, cur.(Reuser), req, reuse, imgDir)
				if reused {
					meta.AttachNonce, meta.ProcessOf = reuse.AttachNonce, cmp.Or(reuse.ProcessOf, reuse.ID)
					scratchN = 0 // no parked save follows
					if state, err = os.ReadFile(filepath.Join(imgDir, StateFile)); err != nil {
						return errs.Wrap(err, errs.Internal, subject, "read the worker's protocol state back")
					}
				}
				return err
			}},
			// The worker keeps its device memory: it is not dumped.
			Step{Name: "save",
				Skip: func() bool { return !reused },
				Do: func(ctx context.Context) error {
					var err error
					snap, err = p.saveWith(ctx, cur.(MemWorker), req, base, devmem.SaveRequest{Base: base.Gen(), Into: into, Mirror: mirror})
					if into != nil {
						into.Close()
						into = nil
					}
					if err == nil && req.Saved != nil {
						req.Saved(snap)
					}
					return err
				}})
	}
	ifReused := func() bool { return reused }
	if parking {
		steps = append(steps, Step{Name: "park", Skip: ifReused,
			Do: func(ctx context.Context) error {
				var err error
				parked, pk, err = cur.(MemParker).ParkMem(ctx)
				isParked = err == nil
				if err != nil {
					// Nothing changed: copy the memory out instead.
					p.log().Info("device memory could not be parked; copying it to the host instead", "session", req.Session, "err", err)
					if scratchN > 0 {
						into = p.scratch(req, scratchN)
						scratchN = 0
					}
					snap, err = p.saveMem(ctx, cur.(MemWorker), req, base, into, mirror)
					if into != nil {
						into.Close()
						into = nil
					}
				} else if pk.TrimError != "" {
					p.log().Warn("the worker could not trim its contexts' own reservations; the dump holds them", "session", req.Session, "err", pk.TrimError)
				}
				return err
			},
			Undo: func(ctx context.Context) error {
				if !isParked {
					defer snap.Close()
					return p.reloadMem(ctx, cur, snap, base, req.MemComplete)
				}
				err := cur.(MemParker).UnparkMem(ctx, parked, devmem.UnparkRequest{})
				closeFiles(parked)
				parked, isParked = nil, false
				return err
			}})
	} else if saving {
		steps = append(steps, Step{Name: "save", Skip: ifReused,
			Do: func(ctx context.Context) error {
				var err error
				snap, err = p.saveMem(ctx, cur.(MemWorker), req, base, into, mirror)
				if into != nil {
					into.Close()
					into = nil
				}
				if err == nil && req.Saved != nil {
					req.Saved(snap)
				}
				return err
			},
			Undo: func(ctx context.Context) error {
				defer snap.Close()
				return p.reloadMem(ctx, cur, snap, base, req.MemComplete)
			}})
	}
	if p.Suspender != nil {
		steps = append(steps, Step{Name: "suspend", Skip: ifReused,
			Do:   func(ctx context.Context) error { return p.Suspender.Suspend(ctx, pid) },
			Undo: func(ctx context.Context) error { return p.Suspender.Resume(ctx, pid) }})
	}
	steps = append(steps,
		Step{Name: "detach", Skip: ifReused,
			Do: func(ctx context.Context) error { return cur.Detach(ctx, nonce) },
			Undo: func(ctx context.Context) error {
				w, err := p.Reattach.Reattach(ctx, pid, nonce)
				if err != nil {
					return err
				}
				cur = w
				if req.Reattached != nil {
					req.Reattached(w)
				}
				return nil
			}},
		Step{Name: "dump", Skip: ifReused,
			Do: func(ctx context.Context) error {
				if err := criu.Dump(ctx, pid, imgDir, opts); err != nil {
					return err
				}
				if req.Dumped != nil {
					req.Dumped(imgDir, meta)
				}
				return nil
			}},
	)
	store := Step{Name: "store",
		Do: func(ctx context.Context) error {
			var err error
			var process []images.MemFile
			if reused {
				if process, err = reusedFiles(reuse); err != nil {
					return err
				}
			}
			image, stats, err = p.store(ctx, imgDir, meta, snap, base, process, req.Stored, req.MemComplete)
			return err
		}}
	fr := &Frozen{PID: pid, p: p, Result: Result{Session: req.Session, Nonce: nonce}, complete: req.MemComplete}
	var stall time.Duration
	if req.ResumeEarly && saving {
		// The session runs again as soon as it is dumped; the store then
		// works from the dump and the saved memory while it runs.
		timings, err := Run(ctx, p.Log, "checkpoint", subject, steps)
		if err != nil {
			snap.Close()
			return nil, err
		}
		fr.snap, fr.base, fr.keepSnap = snap, base, true
		fr.parked, fr.isParked, parked = parked, isParked, nil
		fr.reused, fr.w, fr.state = reused, cur, state
		w, err := fr.Resume(ctx)
		if scratchN > 0 && err == nil {
			n, ch := scratchN, make(chan *os.File, 1)
			scratchReady, scratchN = ch, 0
			go func() { ch <- p.scratch(req, n) }()
		}
		fr.snap = nil // the store below still reads it
		keep := false
		defer func() {
			if keep {
				// Complete now (the resume filled in what the save
				// did not copy): the next save copies only changes.
				p.Mem.KeepMirror(req.Session, snap)
			} else {
				snap.Close()
			}
		}()
		stall = time.Since(tq)
		timings = append(memTimings(timings, snap), fr.resumed...)
		if w != nil && req.Resumed != nil {
			req.Resumed(w)
		}
		if err != nil {
			return nil, errs.Wrap(err, errs.KindOf(err), subject, "the session was dumped but did not resume; no image was stored")
		}
		early = true
		later := []Step{store}
		if snap == nil && fr.unparked {
			// Parked: the snapshot goes to the host while the session
			// runs, then to the store.
			later = append([]Step{{Name: "save",
				Do: func(ctx context.Context) error {
					if scratchReady != nil {
						into = <-scratchReady
						scratchReady = nil
					}
					var err error
					snap, err = p.saveSnapshot(ctx, w, req, base, into, mirror)
					if into != nil {
						into.Close()
						into = nil
					}
					return err
				}}}, later...)
		}
		st, err := Run(ctx, p.Log, "checkpoint", subject, later)
		timings = append(timings, memTimings(st, snap)...)
		if fr.unparked {
			timings = parkTimings(timings, pk)
		}
		if err != nil {
			return nil, errs.Wrap(err, errs.KindOf(err), subject, "the session runs on, but its image was not stored")
		}
		keep = true
		fr.Steps = timings
	} else {
		if !req.DeferStore {
			steps = append(steps, store)
		}
		timings, err := Run(ctx, p.Log, "checkpoint", subject, steps)
		if err != nil {
			snap.Close()
			return nil, err
		}
		fr.snap, fr.base, fr.Steps = snap, base, memTimings(timings, snap)
		fr.reused, fr.w, fr.state = reused, cur, state
		stall = time.Since(tq)
		if req.DeferStore {
			keepWork = true
			fr.deferred = &deferredStore{work: work, t0: t0, store: func(ctx context.Context) (*images.Manifest, images.Stats, error) {
				err := store.Do(ctx)
				return image, stats, err
			}}
		}
	}
	ok = true
	fr.Result = Result{
		Session: req.Session, DurationMS: time.Since(t0).Milliseconds(), Steps: fr.Steps, Nonce: meta.AttachNonce,
		StallMS: stall.Milliseconds(), Early: early, Quiesced: tq, ProcessOf: meta.ProcessOf, Epoch: meta.Epoch,
	}
	if image != nil { // not yet for DeferStore: Frozen.Store fills these in
		fr.Image, fr.Bytes, fr.StoredBytes = image.ID, stats.LogicalBytes, stats.StoredBytes
	}
	if snap != nil {
		fr.MemBytes, fr.MemSentBytes, fr.MemCopiedBytes = snap.Saved.Bytes, snap.Saved.SentBytes, snap.Saved.CopiedBytes
	}
	return fr, nil
}

// prepareMem finds, while the session still runs, the save's base (the
// session's last complete save) and the memfd the save goes into: the
// session's mirror of that base when gpud kept one (only the changed
// blocks are copied then), or a new memfd of the session's size with its
// pages faulted in, so that the copy does not fault page by page while
// the client waits. Neither is required: without them the worker makes
// its own memfd.
func (p *Pipeline) prepareMem(ctx context.Context, w Worker, req Request) (base *devstore.Table, into *os.File, mirror uint64) {
	base, into, mirror, n := p.findMem(ctx, w, req)
	if n > 0 {
		into = p.scratch(req, n)
	}
	return base, into, mirror
}

// findMem is prepareMem without making the memfd: n > 0 is the size of
// the one to make (scratch).
func (p *Pipeline) findMem(ctx context.Context, w Worker, req Request) (base *devstore.Table, into *os.File, mirror uint64, n int64) {
	base = req.MemBase // a migration's last pre-copy round
	if base == nil {
		base = p.Mem.Base(ctx, req.Session, req.Parent)
	}
	if m := p.Mem.TakeMirror(req.Session); m != nil {
		if base != nil && m.Layout.Gen == base.Gen() {
			f := m.File
			m.File = nil
			m.Close()
			return base, f, base.Gen(), 0
		}
		m.Close()
	}
	if req.MemBase != nil {
		// Pre-copied: the save copies the last changes only, into the
		// rounds' mirror when the caller holds one.
		return base, req.MemInto, req.MemMirror, 0
	}
	sz, ok := w.(MemSizer)
	if !ok {
		return base, nil, 0, 0
	}
	n, err := sz.MemBytes(ctx)
	if err != nil || n < scratchMin {
		return base, nil, 0, 0
	}
	return base, nil, 0, n
}

// scratch makes the memfd of n bytes a save goes into, or returns nil
// (the worker then makes its own).
func (p *Pipeline) scratch(req Request, n int64) *os.File {
	f, err := devstore.Scratch((n + 2<<20 - 1) &^ (2<<20 - 1))
	if err != nil {
		p.log().Warn("no memfd made ahead for the save; the worker makes its own", "session", req.Session, "bytes", n, "err", err)
		return nil
	}
	return f
}

func (p *Pipeline) log() *slog.Logger {
	if p.Log != nil {
		return p.Log
	}
	return slog.New(slog.DiscardHandler)
}

// saveMem has the worker copy its device memory (what changed since
// base, the session's last complete save) into a memfd (into, when
// prepareMem made one) and release it.
func (p *Pipeline) saveMem(ctx context.Context, w MemWorker, req Request, base *devstore.Table, into *os.File, mirror uint64) (*devstore.Snapshot, error) {
	return p.saveWith(ctx, w, req, base, devmem.SaveRequest{Base: base.Gen(), All: req.ResumeEarly, Release: true, Into: into, Mirror: mirror})
}

// saveWith has the worker make save sr and opens it.
func (p *Pipeline) saveWith(ctx context.Context, w MemWorker, req Request, base *devstore.Table, sr devmem.SaveRequest) (*devstore.Snapshot, error) {
	f, sv, err := w.SaveMem(ctx, sr)
	if err != nil {
		return nil, err
	}
	if sv.PinError != "" {
		p.log().Warn("the worker could not pin all of the save's host memory; those parts were copied through its buffers", "session", req.Session,
			"pinned_bytes", sv.PinnedBytes, "copied_bytes", sv.CopiedBytes, "err", sv.PinError)
	}
	if sv.TrimError != "" {
		p.log().Warn("the worker could not trim its contexts' own reservations; the dump holds them", "session", req.Session, "err", sv.TrimError)
	}
	snap, err := devstore.Open(f, sv)
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, errs.Session(req.Session), "read the saved device memory")
	}
	if snap.Layout.Base != 0 && snap.Layout.Base != base.Gen() {
		snap.Close()
		return nil, errs.New(errs.Internal, errs.Session(req.Session), "the worker saved relative to %x, not %x", snap.Layout.Base, base.Gen())
	}
	return snap, nil
}

// saveSnapshot has the worker copy the snapshot its park kept to the
// host (what changed since base, into the session's mirror when into is
// one, else every block) while the session runs, and drop the snapshot.
func (p *Pipeline) saveSnapshot(ctx context.Context, w Worker, req Request, base *devstore.Table, into *os.File, mirror uint64) (*devstore.Snapshot, error) {
	mw, ok := w.(MemWorker)
	if !ok {
		return nil, errs.New(errs.Internal, errs.Session(req.Session), "the worker cannot save device memory")
	}
	return p.saveWith(ctx, mw, req, base, devmem.SaveRequest{Base: base.Gen(), All: mirror == 0, Release: true, Into: into, Mirror: mirror, Snapshot: true})
}

// parkTimings adds, after the park step, where its time went in the
// worker.
func parkTimings(ts []Timing, pk devmem.Parked) []Timing {
	return insertAfter(ts, "park", []Timing{
		{Step: "park.worker", Duration: time.Duration(pk.ParkNS)},
		{Step: "park.trim", Duration: time.Duration(pk.TrimNS)},
	})
}

// insertAfter puts sub after the timing of step, when there is one.
func insertAfter(ts []Timing, step string, sub []Timing) []Timing {
	for i, t := range ts {
		if t.Step == step {
			return slices.Concat(ts[:i+1], sub, ts[i+1:])
		}
	}
	return ts
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

// memTimings adds, after the save step, where its time went in the
// worker.
func memTimings(ts []Timing, snap *devstore.Snapshot) []Timing {
	if snap == nil {
		return ts
	}
	sv := snap.Saved
	return insertAfter(ts, "save", []Timing{
		{Step: "save.hash", Duration: time.Duration(sv.HashNS)},
		{Step: "save.prepare", Duration: time.Duration(sv.PrepareNS)},
		{Step: "save.copy", Duration: time.Duration(sv.CopyNS)},
		{Step: "save.release", Duration: time.Duration(sv.ReleaseNS)},
	})
}

// reloadMem puts saved device memory back into a worker: the blocks the
// save did not copy come from the store.
func (p *Pipeline) reloadMem(ctx context.Context, w Worker, snap *devstore.Snapshot, base *devstore.Table, complete func(*devstore.Snapshot) error) error {
	mw, ok := w.(MemWorker)
	if !ok {
		return errs.New(errs.Internal, "", "the worker cannot reload its device memory")
	}
	if complete != nil {
		if err := complete(snap); err != nil {
			return errs.Wrap(err, errs.Internal, "", "complete the device memory from the host's copy")
		}
	}
	if err := devstore.Complete(ctx, p.Mem.Store, snap, base); err != nil {
		return errs.Wrap(err, errs.KindOf(err), "", "read the unchanged device memory back from the store")
	}
	return mw.ReloadMem(ctx, snap.File, snap.Saved.LayoutOff, snap.Saved.LayoutLen)
}

// store commits the dump, with the saved device memory when there is
// some, and remembers the save as the session's base.
//
// process, when set, is the files of the dump the checkpoint reused
// (reusedFiles), listed as the earlier image holds them.
func (p *Pipeline) store(ctx context.Context, dir string, meta images.Meta, snap *devstore.Snapshot, base *devstore.Table, process []images.MemFile, observe images.ChunkObserver, complete func(*devstore.Snapshot) error) (*images.Manifest, images.Stats, error) {
	if snap == nil {
		return p.Store.Commit(ctx, dir, meta)
	}
	var files []images.MemFile
	var err error
	if complete != nil {
		// The base's blocks are not in this store: store them all.
		if err = complete(snap); err == nil {
			files, err = devstore.FilesAll(snap)
		}
	} else {
		files, err = devstore.Files(snap, base)
	}
	if err != nil {
		return nil, images.Stats{}, errs.Wrap(err, errs.Internal, errs.Session(meta.Session), "saved device memory")
	}
	files = append(files, process...)
	m, stats, err := images.CommitObserved(ctx, p.Mem.Store, dir, meta, files, observe)
	if err != nil {
		// The base may be what failed (its chunks collected): the next
		// save copies everything.
		p.Mem.Forget(meta.Session)
		return nil, stats, err
	}
	if t, err := devstore.TableOf(snap, m); err == nil {
		p.Mem.Remember(meta.Session, t)
	}
	p.log().Info("image stored", "session", meta.Session, "image", m.ID, "bytes", stats.LogicalBytes, "stored", stats.StoredBytes,
		"zero", stats.ZeroBytes, "took", stats.Duration, "index", stats.Index)
	return m, stats, nil
}

// deferredStore is the store step a DeferStore checkpoint left, with
// the work directory that holds its dump.
type deferredStore struct {
	work  string
	t0    time.Time
	store func(ctx context.Context) (*images.Manifest, images.Stats, error)
}

// Store stores the image of a checkpoint made with Request.DeferStore,
// from its dump and its saved device memory, and fills in the result's
// image. It must come before Release, which lets the saved memory go;
// the session stays frozen meanwhile. It can be called once.
func (f *Frozen) Store(ctx context.Context) error {
	d := f.deferred
	if d == nil {
		return errs.New(errs.FailedPrecondition, errs.Session(f.Session), "no image is left to store: the checkpoint stored it, or it was stored, resumed or released")
	}
	if f.settled {
		return errs.New(errs.FailedPrecondition, errs.Session(f.Session), "checkpoint already resumed or released: its saved device memory is gone")
	}
	f.deferred = nil
	defer os.RemoveAll(d.work)
	t0 := time.Now()
	m, stats, err := d.store(ctx)
	if err != nil {
		return errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "store the image")
	}
	f.Image, f.Bytes, f.StoredBytes = m.ID, stats.LogicalBytes, stats.StoredBytes
	f.Steps = append(f.Steps, Timing{Step: "store", Duration: time.Since(t0)})
	f.DurationMS = time.Since(d.t0).Milliseconds()
	return nil
}

// dropDeferred removes the dump a deferred store did not take.
func (f *Frozen) dropDeferred() {
	if f.deferred != nil {
		os.RemoveAll(f.deferred.work)
		f.deferred = nil
	}
}

// Resume brings the frozen original back: reattach, backend resume,
// worker resume. The returned worker replaces the session's old handle.
func (f *Frozen) Resume(ctx context.Context) (Worker, error) {
	if f.settled {
		return nil, errs.New(errs.FailedPrecondition, errs.Session(f.Session), "checkpoint already resumed or released")
	}
	f.settled = true
	f.dropDeferred()
	t0 := time.Now()
	lap := func(step string) {
		now := time.Now()
		f.resumed = append(f.resumed, Timing{Step: step, Duration: now.Sub(t0)})
		t0 = now
	}
	if f.reused {
		return f.resumeReused(ctx, lap)
	}
	w, err := f.p.Reattach.Reattach(ctx, f.PID, f.Nonce)
	if err != nil {
		return nil, errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "resume after checkpoint %s: reattach worker %d", f.Image, f.PID)
	}
	// The image keeps the epoch the worker had; the worker goes on at
	// the next one, so that the image cannot be restored beside it.
	if fw, ok := w.(Fencer); ok {
		if err := fw.Fence(ctx); err != nil {
			return nil, errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "resume after checkpoint %s", f.Image)
		}
	}
	lap("resume.reattach")
	if f.p.Suspender != nil {
		if err := f.p.Suspender.Resume(ctx, f.PID); err != nil {
			return w, errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "resume after checkpoint %s: backend resume", f.Image)
		}
		lap("resume.driver")
	}
	if f.isParked {
		mp, ok := w.(MemParker)
		err := errs.New(errs.Internal, "", "the worker cannot take its parked memory back")
		if ok {
			err = mp.UnparkMem(ctx, f.parked, devmem.UnparkRequest{Keep: true})
		}
		closeFiles(f.parked)
		f.parked, f.isParked = nil, false
		if err != nil {
			return w, errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "resume after checkpoint: map the parked device memory back")
		}
		f.unparked = true
		lap("resume.unpark")
	}
	if f.snap != nil {
		err := f.p.reloadMem(ctx, w, f.snap, f.base, f.complete)
		if !f.keepSnap {
			f.snap.Close()
			f.snap = nil
		}
		if err != nil {
			return w, errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "resume after checkpoint %s: reload device memory", f.Image)
		}
		lap("resume.reload")
	}
	if err := w.Resume(ctx); err != nil {
		return w, errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "resume after checkpoint %s: worker resume", f.Image)
	}
	lap("resume.worker")
	return w, nil
}

// resumeReused resumes a worker that was only quiesced (Frozen.reused):
// it keeps its device memory and was never detached. It moves to the
// next epoch first, as after any stored image.
func (f *Frozen) resumeReused(ctx context.Context, lap func(string)) (Worker, error) {
	w := f.w
	if f.snap != nil && !f.keepSnap {
		f.snap.Close()
		f.snap = nil
	}
	if fw, ok := w.(Fencer); ok {
		if err := fw.Fence(ctx); err != nil {
			return w, errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "resume after checkpoint %s", f.Image)
		}
		lap("resume.fence")
	}
	if err := w.Resume(ctx); err != nil {
		return w, errs.Wrap(err, errs.KindOf(err), errs.Session(f.Session), "resume after checkpoint %s: worker resume", f.Image)
	}
	lap("resume.worker")
	return w, nil
}

// Release ends the frozen original: the session now lives only in its
// image (or on the host it migrated to). gpud, the worker's parent and
// child subreaper, reaps it.
func (f *Frozen) Release(ctx context.Context) error {
	if f.settled {
		return errs.New(errs.FailedPrecondition, errs.Session(f.Session), "checkpoint already resumed or released")
	}
	f.settled = true
	f.dropDeferred()
	if f.p.Mem != nil {
		f.p.Mem.Forget(f.Session)
		if f.Stash {
			f.p.Mem.Stash(f.Session, f.snap) // a complete save only
			f.snap = nil
		}
	}
	f.snap.Close()
	f.snap = nil
	if f.p.Departed != nil {
		if err := f.p.Departed.Keep(f.PID); err != nil {
			f.p.log().Warn("a new session here may take the driver's socket name this one keeps; migrating both to one host could then fail", "session", f.Session, "err", err)
		}
	}
	// The worker may already be gone and reaped, its PID someone else's:
	// childproc only ever signals this gpud's own child.
	if err := childproc.Kill(f.PID); err != nil {
		return errs.Wrap(err, errs.Internal, errs.Session(f.Session), "release worker %d", f.PID)
	}
	return nil
}

func (p *Pipeline) meta(ctx context.Context, req Request, nonce string) (images.Meta, error) {
	v, err := criu.GetVersion(ctx, p.CRIU.Binary)
	if err != nil {
		return images.Meta{}, errs.Wrap(err, errs.FailedPrecondition, errs.Session(req.Session), "checkpoint")
	}
	if !v.AtLeast(criubin.MinVersion) {
		return images.Meta{}, errs.New(errs.FailedPrecondition, errs.Session(req.Session), "criu %s is older than %s; run `make deps` and start gpud with --criu .deps/criu/criu", v, criubin.MinVersion)
	}
	var uts syscall.Utsname
	_ = syscall.Uname(&uts)
	m := images.Meta{
		Session: req.Session, Parent: req.Parent, Host: p.Host, Backend: p.Backend, Driver: p.Driver, GPUs: p.GPUs,
		CRIU: v.String(), Kernel: utsString(uts.Release[:]), AttachNonce: nonce, Tenant: req.Tenant,
		Priority: req.Priority, Labels: req.Labels,
	}
	if fw, ok := req.Worker.(Fencer); ok {
		m.Epoch = fw.Epoch()
	}
	return m, nil
}

func utsString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

func newNonce() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", errs.Wrap(err, errs.Internal, "", "nonce")
	}
	return hex.EncodeToString(b[:]), nil
}
