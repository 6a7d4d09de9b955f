package restore

import (
	"context"
	"slices"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
)

// A prepared restore is a live migration's session restored here ahead
// of its image: its source sent the dump's files as soon as CRIU wrote
// them, and its device memory is staged here, so CRIU, the driver's
// restore and the reload run while the source stores the image and
// pushes it. The worker waits, quiesced and unregistered, serving no one,
// until the Restore of that image adopts it; anything else (DropPrepared,
// PrepareIdle, a Restore of another checkpoint of the session) kills it.
type prepared struct {
	res   *Result
	timer *time.Timer
}

// Prepare restores session from the dump files writes into the restore's
// directory, meta (the image's metadata to be), and the device memory
// staged here for it, which must be of save gen, up to the reload, and
// keeps it for the Restore that commits it. It returns the steps' times.
//
// With ahead, the files and meta are the session's last image's, sent
// before the freeze, and gen a pre-copy round: the worker reloads from a
// view of the staging, and only AdoptPrepared with the freeze's protocol
// state takes it (a freeze that reused that image's dump).
func (r *Restorer) Prepare(ctx context.Context, files func(dir string) error, meta images.Meta, gen uint64, ahead bool) ([]checkpoint.Timing, error) {
	subject := errs.Session(meta.Session)
	if r.Mem == nil || r.Staged == nil {
		return nil, errs.New(errs.FailedPrecondition, subject, "this host restores device memory from its store only; restore the image")
	}
	r.mu.Lock()
	drops := r.drops[meta.Session]
	if r.begun == nil {
		r.begun = map[string]string{}
	}
	r.begun[meta.Session] = meta.AttachNonce
	r.mu.Unlock()
	res, err := r.restore(ctx, "", &early{files: files, meta: meta, gen: gen, ahead: ahead})
	if err != nil {
		return nil, err
	}
	res.ahead = ahead
	p := &prepared{res: res}
	r.mu.Lock()
	if r.drops[meta.Session] != drops || ctx.Err() != nil {
		// Dropped (the migration failed) while it was restored.
		r.mu.Unlock()
		r.discard(p, "its migration gave up on it")
		return nil, errs.New(errs.FailedPrecondition, subject, "the prepared restore was dropped while it ran")
	}
	if r.prepared == nil {
		r.prepared = map[string]*prepared{}
	}
	old := r.prepared[meta.Session]
	r.prepared[meta.Session] = p
	p.timer = time.AfterFunc(r.prepareIdle(), func() { r.expire(meta.Session, p) })
	r.mu.Unlock()
	if old != nil {
		r.discard(old, "a newer one replaced it")
	}
	r.log().Info("restore prepared ahead of its image", "session", meta.Session, "pid", res.PID, "took_ms", res.DurationMS)
	return res.Steps, nil
}

// DropPrepared kills session's prepared restore, if any, and makes a
// Prepare still running for it throw its result away.
func (r *Restorer) DropPrepared(session string) {
	r.mu.Lock()
	if r.drops == nil {
		r.drops = map[string]uint64{}
	}
	r.drops[session]++
	p := r.prepared[session]
	delete(r.prepared, session)
	r.mu.Unlock()
	if p != nil {
		p.timer.Stop()
		r.discard(p, "its migration dropped it")
	}
}

func (r *Restorer) expire(session string, p *prepared) {
	if takeIf(r, &r.prepared, session, p) {
		r.discard(p, "no image committed it in time")
	}
}

// takeIf deletes (*m)[key] when it is still v, and reports whether it
// did; m is one of r's maps, read under r.mu.
func takeIf[V comparable](r *Restorer, m *map[string]V, key string, v V) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if (*m)[key] != v {
		return false
	}
	delete(*m, key)
	return true
}

// preparing marks a prepare of session as under way until the function
// it returns is called: a Restore meanwhile waits for it. The prepare
// route calls it before it reads the request, so that a source that has
// sent the whole dump may ask for the image's restore at once.
func (r *Restorer) preparing(session string) func() {
	ch := make(chan struct{})
	r.mu.Lock()
	if r.inflight == nil {
		r.inflight = map[string]chan struct{}{}
	}
	r.inflight[session] = ch
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		if r.inflight[session] == ch {
			delete(r.inflight, session)
		}
		r.mu.Unlock()
		close(ch)
	}
}

// awaitPrepare waits, for up to d, until a prepare of session is under
// way, done, or was begun for the checkpoint nonce names (and failed).
func (r *Restorer) awaitPrepare(ctx context.Context, session, nonce string, d time.Duration) {
	deadline := time.Now().Add(d)
	for {
		r.mu.Lock()
		_, busy := r.inflight[session]
		_, done := r.prepared[session]
		seen := nonce != "" && r.begun[session] == nonce
		r.mu.Unlock()
		if busy || done || seen || time.Now().After(deadline) || ctx.Err() != nil {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// takePrepared returns the prepared restore of image's checkpoint,
// registered as image's restore, or nil when there is none; one of the
// session that does not match the image (another checkpoint, other
// device memory) is killed. It reads the image's manifest while a
// prepare of the session is still under way, then waits for it.
func (r *Restorer) takePrepared(ctx context.Context, image string) *Result {
	r.mu.Lock()
	n := len(r.prepared) + len(r.inflight)
	r.mu.Unlock()
	if n == 0 || r.Mem == nil {
		return nil
	}
	m, err := images.Get(ctx, r.Mem.Store, image)
	if err != nil {
		return nil // the restore from the store says what is wrong
	}
	s := m.Meta.Session
	t, terr := devstore.FromManifest(ctx, r.Mem.Store, m)
	r.mu.Lock()
	busy := r.inflight[s]
	r.mu.Unlock()
	if busy != nil {
		select {
		case <-busy:
		case <-ctx.Done():
			return nil
		}
	}
	r.mu.Lock()
	p := r.prepared[s]
	delete(r.prepared, s)
	r.mu.Unlock()
	if p == nil {
		return nil
	}
	p.timer.Stop()
	switch {
	case p.res.ahead:
		r.discard(p, "it was prepared ahead of its freeze, for an adoption with the freeze's protocol state")
		return nil
	case terr != nil:
		r.discard(p, "the image's device memory could not be read: "+terr.Error())
		return nil
	case m.Meta.AttachNonce != p.res.Meta.AttachNonce:
		r.discard(p, "it is of another checkpoint than image "+image)
		return nil
	case !sameTable(t, p.res.table):
		r.discard(p, "its device memory is not image "+image+"'s")
		return nil
	}
	res := p.res
	// The worker runs from a complete copy of the image's save: the next
	// checkpoint copies only what changes from here.
	r.Mem.Remember(s, t)
	r.Mem.KeepMirror(s, res.mem)
	res.mem, res.table = nil, nil
	res.Image, res.Meta = image, m.Meta
	res.Steps = append(slices.Clone(res.Steps), checkpoint.Timing{Step: "prepared"})
	return res
}

// AdoptPrepared takes session's prepared restore over with no image: a
// memory pre-copy staged the session's device memory here and in no
// store, and its image follows once the session runs here. The prepare
// must be of the checkpoint nonce names and have reloaded save gen (the
// freeze's, whose changed blocks the source sent last); anything else is
// killed and refused, and the source resumes the session where it was.
// It waits, as RestoreAfter does, for a prepare sent in full.
//
// A restore prepared ahead of its freeze (Prepare, ahead) is brought to
// the freeze first (catchUp): state is the protocol state the freeze
// handed over and epoch the freeze's; a prepare that was not ahead takes
// no state.
func (r *Restorer) AdoptPrepared(ctx context.Context, session, nonce string, gen uint64, state []byte, epoch uint64) (*Result, error) {
	subject := errs.Session(session)
	r.awaitPrepare(ctx, session, nonce, 5*time.Second)
	r.mu.Lock()
	busy := r.inflight[session]
	r.mu.Unlock()
	if busy != nil {
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, errs.Wrap(ctx.Err(), errs.Unavailable, subject, "wait for the prepared restore")
		}
	}
	r.mu.Lock()
	p := r.prepared[session]
	delete(r.prepared, session)
	r.mu.Unlock()
	if p == nil {
		return nil, errs.New(errs.FailedPrecondition, subject, "no restore was prepared for it here (it failed, or was dropped); its source keeps it")
	}
	p.timer.Stop()
	switch {
	case p.res.Meta.AttachNonce != nonce:
		r.discard(p, "it is of another checkpoint than the one adopted")
		return nil, errs.New(errs.FailedPrecondition, subject, "the prepared restore is of another checkpoint; its source keeps it")
	case p.res.ahead != (len(state) > 0):
		r.discard(p, "the adoption and the prepare disagree on whether it was prepared ahead of its freeze")
		return nil, errs.New(errs.FailedPrecondition, subject, "the prepared restore (ahead of the freeze: %v) does not match the adoption (with a protocol state: %v); its source keeps it", p.res.ahead, len(state) > 0)
	case p.res.ahead:
		t0 := time.Now()
		if err := r.catchUp(ctx, p.res, gen, state, epoch); err != nil {
			r.discard(p, "it could not be brought to its freeze: "+err.Error())
			return nil, errs.Wrap(err, errs.KindOf(err), subject, "bring the restore prepared ahead of the freeze to the freeze; its source keeps it")
		}
		p.res.Steps = append(slices.Clone(p.res.Steps), checkpoint.Timing{Step: "catchup", Duration: time.Since(t0)})
	case p.res.table.Gen() != gen || gen == 0:
		r.discard(p, "its device memory is not the freeze's save")
		return nil, errs.New(errs.FailedPrecondition, subject, "the prepared restore reloaded save %x, not the freeze's %x; its source keeps it", p.res.table.Gen(), gen)
	}
	res := p.res
	// No store here holds the save's blocks yet: it becomes the base of
	// the next checkpoint (and the reloaded copy its mirror) only when
	// its image arrives (CommitAdopted). Until then it is kept, not
	// closed: unmapping gigabytes takes a second, not for the downtime.
	a := &adoptedMem{nonce: nonce, mem: res.mem, table: res.table}
	r.mu.Lock()
	if r.adopted == nil {
		r.adopted = map[string]*adoptedMem{}
	}
	old := r.adopted[session]
	r.adopted[session] = a
	a.timer = time.AfterFunc(adoptIdle, func() { r.dropAdopted(session, a) })
	r.mu.Unlock()
	if old != nil {
		old.release()
	}
	res.mem, res.table = nil, nil
	res.Steps = append(slices.Clone(res.Steps), checkpoint.Timing{Step: "prepared"})
	return res, nil
}

// catchUp brings res, restored ahead of its freeze from the session's
// last image and a pre-copy round, to the freeze: the blocks of save gen
// (the freeze's, staged here) that differ from the round are copied into
// the worker, and the freeze's protocol state goes in at its epoch. The
// freeze reused the image's dump, so the process is as it was then.
func (r *Restorer) catchUp(ctx context.Context, res *Result, gen uint64, state []byte, epoch uint64) error {
	session := res.Session
	if r.AwaitStaged != nil {
		if err := r.AwaitStaged(ctx, session, gen); err != nil {
			return err
		}
	}
	sg, err := r.takeStaged(session, gen)
	if err != nil {
		return err
	}
	tab := sg.Table()
	snap, _, err := sg.Load(ctx, r.Mem.Store, tab)
	sg.Release()
	if err != nil {
		return err
	}
	ok := false
	defer func() {
		if !ok {
			snap.Close()
		}
	}()
	if !devstore.SameBlocks(res.table.Layout, tab.Layout) {
		return errs.New(errs.FailedPrecondition, "", "its device memory was laid out anew since the round it was restored from")
	}
	want := make([]byte, (tab.Layout.Blocks+7)/8)
	for i, c := range tab.Chunks {
		if c != res.table.Chunks[i] {
			want[i/8] |= 1 << (i % 8)
		}
	}
	mp, isP := res.Worker.(checkpoint.MemPatcher)
	si, isS := res.Worker.(checkpoint.StateImporter)
	if !isP || !isS {
		return errs.New(errs.Internal, "", "the restored worker cannot take the freeze's device memory and protocol state")
	}
	if err := mp.PatchMem(ctx, snap.File, snap.Saved.LayoutOff, snap.Saved.LayoutLen, want); err != nil {
		return err
	}
	f, err := devmem.MemfdWith("gpuctl-state", state)
	if err != nil {
		return errs.Wrap(err, errs.Internal, "", "pass the protocol state")
	}
	defer f.Close()
	if err := si.ImportState(ctx, f, epoch); err != nil {
		return errs.Wrap(err, errs.KindOf(err), "", "put the freeze's protocol state into the worker")
	}
	// The view it was reloaded from goes (the staging's file is snap
	// now); unmapping gigabytes takes a while, not the client's.
	go res.mem.Close()
	res.mem, res.table, ok = snap, tab, true
	return nil
}


// adoptIdle bounds how long an adopted session's reloaded save waits for
// its image (the source stores and pushes the whole session after the
// adoption: about 15 s for 8 GiB on the H200 host).
const adoptIdle = 10 * time.Minute

// adoptedMem is what a session adopted with no image reloaded from.
type adoptedMem struct {
	nonce string
	mem   *devstore.Snapshot
	table *devstore.Table
	timer *time.Timer
}

func (a *adoptedMem) release() {
	a.timer.Stop()
	go a.mem.Close()
}

func (r *Restorer) dropAdopted(session string, a *adoptedMem) {
	if takeIf(r, &r.adopted, session, a) {
		a.release()
	}
}

// CommitAdopted makes image, the image of the checkpoint whose prepared
// restore session was adopted from (AdoptPrepared, nonce), the session's
// base here: the next checkpoint copies only what changed since, into
// the copy it was reloaded from. An image of another checkpoint or other
// device memory is refused.
func (r *Restorer) CommitAdopted(ctx context.Context, session, nonce, image string) error {
	subject := errs.Session(session)
	r.mu.Lock()
	a := r.adopted[session]
	if a != nil && a.nonce == nonce {
		delete(r.adopted, session)
	}
	r.mu.Unlock()
	if a == nil || a.nonce != nonce {
		return errs.New(errs.FailedPrecondition, subject, "no session adopted here from checkpoint %q waits for its image", nonce)
	}
	m, err := images.Get(ctx, r.Mem.Store, image)
	if err == nil && (m.Meta.Session != session || m.Meta.AttachNonce != nonce) {
		err = errs.New(errs.InvalidArgument, errs.Image(image), "is of session %s, checkpoint %q, not of session %s, checkpoint %q", m.Meta.Session, m.Meta.AttachNonce, session, nonce)
	}
	var t *devstore.Table
	if err == nil {
		t, err = devstore.FromManifest(ctx, r.Mem.Store, m)
	}
	if err == nil && !sameTable(t, a.table) {
		err = errs.New(errs.InvalidArgument, errs.Image(image), "its device memory is not the save session %s was adopted from", session)
	}
	if err != nil {
		a.release()
		return err
	}
	a.timer.Stop()
	r.Mem.Remember(session, t)
	r.Mem.KeepMirror(session, a.mem)
	return nil
}

// discard kills a prepared restore's worker and gives back what it held.
func (r *Restorer) discard(p *prepared, why string) {
	res := p.res
	if err := kill(res.PID); err != nil {
		r.log().Error("prepared restore's worker left running", "session", res.Session, "pid", res.PID, "err", err)
	}
	res.mem.Close()
	if r.Unadmit != nil {
		r.Unadmit(res.Meta)
	}
	r.log().Info("prepared restore dropped", "session", res.Session, "pid", res.PID, "why", why)
}

func (r *Restorer) prepareIdle() time.Duration {
	if r.PrepareIdle > 0 {
		return r.PrepareIdle
	}
	return time.Minute
}

// sameTable reports whether a and b are the same save, block for block.
func sameTable(a, b *devstore.Table) bool {
	return a != nil && b != nil && devstore.SameBlocks(a.Layout, b.Layout) && slices.Equal(a.Chunks, b.Chunks)
}
