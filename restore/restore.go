// Package restore is the restore pipeline: it turns an image in the
// host's store back into a live session worker, on this host or any other
// compatible one.
//
//	checkout  the image's files into a scratch directory, and its manifest
//	          checked against this host (backend)
//	criu      CRIU restores the worker detached, as a direct child of gpud,
//	          in a fresh PID namespace           (undo: kill and reap it)
//	resume    the backend's hook on the restored PID; for the cuda backend
//	          the driver restores GPU state (with GPU pairs) and unlocks
//	reattach  the worker dials back the abstract socket its nonce names,
//	          and comes back quiesced: it waits for its client
//
// The session keeps its id and secret: they are in the worker's memory.
// gpud then registers the session as detached, waiting for its client.
package restore

import (
	"context"
	"errors"
	"fmt"
	"github.com/gpuctl/gpuctl/childproc"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/criu"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/store"
)

// Store reads images out of the host's store.
type Store interface {
	// Checkout writes image id's CRIU files into dir (which exists and is
	// empty) and returns the image's manifest (images.Checkout, with the
	// host's store). An unknown image is errs.NotFound; a damaged one
	// errs.DataLoss.
	Checkout(ctx context.Context, id, dir string) (*images.Manifest, error)
}

// Resumer is a backend's hook on a restored worker from outside the
// process: the cuda backend restores the GPU state the driver checkpointed
// (mapping the image's GPUs onto this host's) and unlocks the process. A
// nil Resumer skips the step.
type Resumer interface {
	Resume(ctx context.Context, pid int, imageGPUs []backend.GPU) error
}

// Checker is implemented by a Resumer that can refuse an image before
// anything runs (cuda: no GPU of the image's model, an older driver).
type Checker interface {
	Check(imageGPUs []backend.GPU, driver string) error
}

// Restorer restores images on one host. Its fields are set once, by gpud.
type Restorer struct {
	WorkDir  string       // STATE_DIR/work
	CRIU     criu.Options // CRIU settings (binary, timeouts)
	Store    Store
	Resumer  Resumer
	Reattach checkpoint.Reattacher
	Backend  string // this host's backend; images from another backend are refused
	// Admit, when set, refuses an image before anything is restored:
	// gpud refuses an image of a session live here or of an older epoch
	// than the session reached here (session.Manager.Admit).
	Admit func(images.Meta) error
	// Unadmit, when set, is told of a restore that Admit let through
	// and that failed after it (or whose session could not be adopted):
	// gpud gives back what the admission took (the registry's record of
	// the session as live here).
	Unadmit func(images.Meta)
	// Adopted, when set, is told of a restore whose session was adopted
	// here: gpud ends the restore's window in the registry at once, so a
	// session that ends before the next reconciliation round sees it is
	// recorded as not live (it stayed live for the whole window).
	Adopted func(images.Meta)
	Log     *slog.Logger
	// Mem reads an image's saved device memory (package devmem) out of
	// the store for the restored worker to reload; nil restores only
	// images whose device memory is in the CRIU dump.
	Mem *devstore.Keeper
	// Staged, when set, hands over what a migration staged in memory for
	// session's restore (package migrate/stage), or nil. Device memory is
	// then read from there, and only what is not staged from the store.
	Staged func(session string) Staging
	// AwaitStaged, when set, waits until session's staging holds save
	// gen whole (the last blocks of a migration's freeze may arrive while
	// the prepared restore runs), or says why it will not.
	AwaitStaged func(ctx context.Context, session string, gen uint64) error
	// ViewStaged, when set, waits until session's staging holds save
	// gen whole and returns a view of it, leaving the staging in place
	// (stage.Stager.View): a restore prepared ahead of its freeze
	// reloads from the view, and the staging then takes the freeze's
	// blocks.
	ViewStaged func(ctx context.Context, session string, gen uint64) (*devstore.Snapshot, *devstore.Table, error)
	// PrepareIdle bounds how long a prepared restore waits for the
	// Restore that commits it before it is killed; zero means 1 minute.
	PrepareIdle time.Duration

	// The restores Prepare made, by session, and how many times each
	// session's was dropped (so that a Prepare a drop overtook is not
	// kept).
	mu       sync.Mutex
	prepared map[string]*prepared
	drops    map[string]uint64
	inflight map[string]chan struct{} // preparing
	begun    map[string]string        // the checkpoint nonce of each session's last Prepare
	adopted  map[string]*adoptedMem   // sessions AdoptPrepared took, waiting for their image
}

// Staging is device memory a migration staged for a restore.
type Staging interface {
	// Load returns table t's device memory for the worker to reload,
	// reading from st what is not staged, and how many blocks were.
	Load(ctx context.Context, st *store.Store, t *devstore.Table) (*devstore.Snapshot, int, error)
	// Release gives the staged memory back; it follows Load.
	Release()
	// Table is the staged table: the last one the source sent.
	Table() *devstore.Table
}

// ExceptStore is a Store that can leave files out of a checkout: saved
// device memory goes from the store straight into the worker.
type ExceptStore interface {
	CheckoutExcept(ctx context.Context, id, dir string, skip func(path string) bool) (*images.Manifest, error)
}

// Result is a restored, live session waiting for its client.
type Result struct {
	Session    string              `json:"session"`
	Image      string              `json:"image"`
	PID        int                 `json:"pid"`
	DurationMS int64               `json:"duration_ms"`
	Steps      []checkpoint.Timing `json:"steps,omitempty"`
	Meta       images.Meta         `json:"-"`
	Worker     checkpoint.Worker   `json:"-"`
	// A prepared restore's reloaded save and its table, remembered as
	// the session's base when its image commits it.
	mem   *devstore.Snapshot
	table *devstore.Table
	// ahead: prepared before its freeze, from the session's last image
	// and a pre-copy round; only an adoption that brings the freeze's
	// protocol state takes it (AdoptPrepared).
	ahead bool
}

// Restore restores image as a live worker. On failure nothing is left
// running and the error names the step and the image. A restore that
// Prepare made ahead of this image (the same checkpoint, the same device
// memory) is the result at once.
func (r *Restorer) Restore(ctx context.Context, image string) (*Result, error) {
	return r.RestoreAfter(ctx, image, "", "")
}

// RestoreAfter is Restore, when session names one, after the prepare of
// session's restore (of the checkpoint nonce names) that the caller sent
// in full: it waits for that prepare to begin (for up to 5 s: the
// request may still be on its way) and to end.
func (r *Restorer) RestoreAfter(ctx context.Context, image, session, nonce string) (*Result, error) {
	if image == "" {
		return nil, errs.New(errs.InvalidArgument, "", "no image id given; list images with `gpuctl images ls`")
	}
	if session != "" {
		r.awaitPrepare(ctx, session, nonce, 5*time.Second)
	}
	if res := r.takePrepared(ctx, image); res != nil {
		return res, nil
	}
	return r.restore(ctx, image, nil)
}

// early is what a prepared restore starts from instead of the store:
// the dump's files, the image's metadata, and the generation of the save
// whose device memory is staged for it.
type early struct {
	files func(dir string) error
	meta  images.Meta
	gen   uint64
	// ahead: the files are the session's last image's and gen a
	// pre-copy round, before the freeze; the reload reads a view of the
	// staging (ViewStaged), which stays for the freeze's blocks.
	ahead bool
}

// restore runs the restore pipeline, from the store, or from pre when
// it is set (Prepare): the files are written into the work directory,
// the device memory comes from the staging alone, and the save is not
// remembered as the session's base until the image commits it.
func (r *Restorer) restore(ctx context.Context, image string, pre *early) (*Result, error) {
	t0 := time.Now()
	subject := errs.Image(image)
	if pre != nil {
		subject = errs.Session(pre.meta.Session)
	}
	work, err := os.MkdirTemp(r.WorkDir, "rst-")
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, subject, "create the restore work directory")
	}
	imgDir := filepath.Join(work, "img")
	ok := false
	defer func() {
		// CRIU has read the image by the time it returns. A failed run
		// keeps CRIU's log, which its error names.
		if ok {
			os.RemoveAll(work)
		} else {
			os.RemoveAll(imgDir)
		}
	}()

	var (
		meta     images.Meta
		pid      int
		w        checkpoint.Worker
		memTable *devstore.Table
		memSnap  *devstore.Snapshot
		memLoad  chan error
		memTook  time.Duration      // reading device memory, beside criu
		memHits  int                // blocks that came from the staging
		admitted bool               // Admit let it through
		fromHost int64              // bytes of device memory kept in host memory here (Keeper.Stash)
		keptSnap *devstore.Snapshot // a prepared restore's reloaded save
	)
	loadCtx, cancelLoad := context.WithCancel(ctx)
	defer func() {
		cancelLoad() // a load still waiting for its staging gives up
		if memLoad != nil {
			<-memLoad
			memSnap.Close()
		}
	}()
	// loadMem reads memTable's device memory (the staging's table when
	// memTable is unset), from the staging take returns (then released)
	// when there is one, else from the store, while CRIU restores the
	// process: the reload step then waits on memory, not on the store.
	loadMem := func(ctx context.Context, take func() (Staging, error)) {
		memLoad = make(chan error, 1)
		go func() {
			t0 := time.Now()
			sg, err := take()
			switch {
			case err != nil:
			case sg != nil:
				if memTable == nil {
					memTable = sg.Table()
				}
				memSnap, memHits, err = sg.Load(ctx, r.Mem.Store, memTable)
				sg.Release()
			default:
				memSnap, err = devstore.Load(ctx, r.Mem.Store, memTable)
			}
			memTook = time.Since(t0)
			memLoad <- err
		}()
	}
	opts := r.CRIU
	opts.LogDir = work
	steps := []checkpoint.Step{
		{Name: "checkout", Do: func(ctx context.Context) error {
			if err := os.Mkdir(imgDir, 0o700); err != nil {
				return err
			}
			if pre != nil {
				if err := pre.files(imgDir); err != nil {
					return err
				}
				meta = pre.meta
				if r.Staged == nil || r.Mem == nil || pre.gen == 0 {
					return errs.New(errs.FailedPrecondition, subject, "no device memory is staged for it here")
				}
				// The freeze's last blocks may still be on their way:
				// CRIU and the driver restore the process meanwhile,
				// and the reload waits for the staging.
				loadMem(loadCtx, func() (Staging, error) {
					if pre.ahead {
						if r.ViewStaged == nil {
							return nil, errs.New(errs.FailedPrecondition, subject, "this host cannot restore a session ahead of its freeze")
						}
						snap, tab, err := r.ViewStaged(loadCtx, meta.Session, pre.gen)
						if err != nil {
							return nil, err
						}
						return viewed{snap, tab}, nil
					}
					if r.AwaitStaged != nil {
						if err := r.AwaitStaged(loadCtx, meta.Session, pre.gen); err != nil {
							return nil, err
						}
					}
					return r.takeStaged(meta.Session, pre.gen)
				})
				return r.admit(meta, subject, &admitted)
			}
			var m *images.Manifest
			var err error
			if es, ok := r.Store.(ExceptStore); ok && r.Mem != nil {
				m, err = es.CheckoutExcept(ctx, image, imgDir, func(p string) bool { return p == devmem.DataFile })
			} else {
				m, err = r.Store.Checkout(ctx, image, imgDir)
			}
			if err != nil {
				return err
			}
			meta = m.Meta
			if r.Mem == nil && r.Staged != nil {
				if sg := r.Staged(meta.Session); sg != nil {
					sg.Release()
				}
			}
			if r.Mem != nil {
				if memTable, err = devstore.FromManifest(ctx, r.Mem.Store, m); err != nil {
					return err
				}
				if st := r.Mem.TakeStash(meta.Session, memTable); st != nil {
					// This host ended the session with this save and
					// kept it in memory: no store read.
					memSnap, fromHost = st, st.Layout.Size
					memLoad = make(chan error, 1)
					memLoad <- nil
				} else if memTable != nil {
					var sg Staging
					if r.Staged != nil {
						sg = r.Staged(meta.Session)
					}
					loadMem(ctx, func() (Staging, error) { return sg, nil })
				}
			}
			return r.admit(meta, subject, &admitted)
		}},
		{Name: "criu",
			Do: func(ctx context.Context) error {
				var err error
				o := opts
				// A restore that stalls leaves what it had put back
				// running: the session's worker, which is killed.
				o.Stray = func(args []string) bool { return isWorkerOf(args, meta.Session) }
				pid, err = criu.Restore(ctx, imgDir, o)
				return err
			},
			Undo: func(ctx context.Context) error { return kill(pid) }},
	}
	if r.Resumer != nil {
		steps = append(steps, checkpoint.Step{Name: "resume",
			Do: func(ctx context.Context) error { return r.Resumer.Resume(ctx, pid, meta.GPUs) }})
	}
	steps = append(steps, checkpoint.Step{Name: "reattach", Do: func(ctx context.Context) error {
		var err error
		w, err = r.Reattach.Reattach(ctx, pid, meta.AttachNonce)
		return err
	}}, checkpoint.Step{Name: "state",
		// The image reused an earlier image's dump: the worker goes on
		// from this image's protocol state, not from the dump's.
		Skip: func() bool { return meta.ProcessOf == "" },
		Do:   func(ctx context.Context) error { return importState(ctx, w, imgDir, meta, subject) },
	}, checkpoint.Step{Name: "reload", Do: func(ctx context.Context) error {
		if memLoad == nil {
			return nil // the device memory came with the process
		}
		err := <-memLoad
		memLoad = nil
		kept := false
		defer func() {
			if !kept {
				memSnap.Close()
			}
		}()
		if err != nil {
			return errs.Wrap(err, errs.KindOf(err), subject, "read the saved device memory")
		}
		mw, ok := w.(checkpoint.MemWorker)
		if !ok {
			return errs.New(errs.Internal, subject, "the restored worker cannot reload device memory")
		}
		if err := mw.ReloadMem(ctx, memSnap.File, memSnap.Saved.LayoutOff, memSnap.Saved.LayoutLen); err != nil {
			return err
		}
		kept = true
		if pre != nil {
			// Remembered when the image commits it (takePrepared).
			keptSnap = memSnap
			return nil
		}
		r.Mem.Remember(meta.Session, memTable)
		// The worker runs from a complete copy of that save: the next
		// checkpoint copies only what changes from here.
		r.Mem.KeepMirror(meta.Session, memSnap)
		return nil
	}})
	timings, err := checkpoint.Run(ctx, r.Log, "restore", subject, steps)
	if err != nil {
		if admitted && r.Unadmit != nil {
			r.Unadmit(meta)
		}
		return nil, err
	}
	if fromHost > 0 {
		r.log().Info("device memory reloaded from this host's memory, not read from the store", "image", image, "bytes", fromHost)
		timings = append(timings, checkpoint.Timing{Step: "memread.host"})
	}
	if memTook > 0 {
		// Not a step: it ran beside criu, and reload waited for what was
		// left of it.
		timings = append(timings, checkpoint.Timing{Step: "memread", Duration: memTook})
		r.log().Debug("device memory read for reload", "image", image, "took", memTook, "staged_blocks", memHits, "blocks", len(memTable.Chunks))
	}
	ok = true
	return &Result{
		Session: meta.Session, Image: image, PID: pid, Meta: meta, Worker: w,
		DurationMS: time.Since(t0).Milliseconds(), Steps: timings,
		mem: keptSnap, table: memTable,
	}, nil
}

// viewed is a view of a staging (Restorer.ViewStaged) as a Staging: its
// Load hands the view over.
type viewed struct {
	snap *devstore.Snapshot
	tab  *devstore.Table
}

func (v viewed) Load(_ context.Context, _ *store.Store, t *devstore.Table) (*devstore.Snapshot, int, error) {
	if t != v.tab {
		v.snap.Close()
		return nil, 0, errs.New(errs.Internal, "", "a view of the staging loaded for another table")
	}
	return v.snap, len(t.Chunks), nil
}

func (viewed) Release() {}

func (v viewed) Table() *devstore.Table { return v.tab }

// takeStaged takes session's staging, which must be of save gen.
func (r *Restorer) takeStaged(session string, gen uint64) (Staging, error) {
	sg := r.Staged(session)
	if sg == nil {
		return nil, errs.New(errs.FailedPrecondition, errs.Session(session), "no device memory is staged for it here")
	}
	if t := sg.Table(); t.Gen() != gen {
		sg.Release()
		return nil, errs.New(errs.FailedPrecondition, errs.Session(session), "the staged device memory is of save %x, not %x", t.Gen(), gen)
	}
	return sg, nil
}

// admit checks meta against this host and has gpud admit it (Admit);
// *admitted says whether Unadmit must follow a failure.
func (r *Restorer) admit(meta images.Meta, subject string, admitted *bool) error {
	if meta.AttachNonce == "" {
		return errs.New(errs.DataLoss, subject, "the manifest has no worker nonce; the image cannot be reattached")
	}
	if r.Backend != "" && meta.Backend != "" && meta.Backend != r.Backend {
		return errs.New(errs.FailedPrecondition, subject, "made on the %s backend, this host runs %s; restore it on a %s host", meta.Backend, r.Backend, meta.Backend)
	}
	if r.Admit != nil {
		if err := r.Admit(meta); err != nil {
			return err // it names the session; the step error names the image
		}
		*admitted = true
	}
	if c, ok := r.Resumer.(Checker); ok {
		if err := c.Check(meta.GPUs, meta.Driver); err != nil {
			return errs.Wrap(err, errs.KindOf(err), subject, "this host cannot run it")
		}
	}
	return nil
}

func (r *Restorer) log() *slog.Logger {
	if r.Log != nil {
		return r.Log
	}
	return slog.Default()
}

// kill ends a restored worker and reaps it: CRIU restored it as our
// child. Another reaper (gpud's subreaper loop) may have been first.
func kill(pid int) error {
	if pid <= 0 {
		return nil
	}
	if err := childproc.Kill(pid); err != nil {
		return fmt.Errorf("kill restored worker %d: %w", pid, err)
	}
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil && !errors.Is(err, syscall.ECHILD) {
			return fmt.Errorf("reap restored worker %d: %w", pid, err)
		}
		return nil
	}
}

// isWorkerOf reports whether args, a process's command line, is a gpud
// worker of session (remoting/worker starts them as EXE worker ...
// --session ID).
func isWorkerOf(args []string, session string) bool {
	if len(args) < 2 || args[1] != "worker" || session == "" {
		return false
	}
	i := slices.Index(args, "--session")
	return i > 0 && i+1 < len(args) && args[i+1] == session
}

// importState puts the protocol state an image stored (checkpoint.StateFile)
// into the worker restored from the earlier dump the image reuses.
func importState(ctx context.Context, w checkpoint.Worker, dir string, meta images.Meta, subject string) error {
	si, ok := w.(checkpoint.StateImporter)
	if !ok {
		return errs.New(errs.Internal, subject, "the restored worker cannot take the protocol state the image holds")
	}
	f, err := os.Open(filepath.Join(dir, checkpoint.StateFile))
	if err != nil {
		return errs.Wrap(err, errs.DataLoss, subject, "the image reuses the dump of %s but holds no protocol state", meta.ProcessOf)
	}
	defer f.Close()
	if err := si.ImportState(ctx, f, meta.Epoch); err != nil {
		return errs.Wrap(err, errs.KindOf(err), subject, "put the image's protocol state into the restored worker")
	}
	return nil
}
