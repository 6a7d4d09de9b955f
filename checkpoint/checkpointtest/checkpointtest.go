// Package checkpointtest is for tests only. It holds the fakes that the
// checkpoint, restore and migration tests share, so that each pipeline's
// tests drive the same stand-ins:
//
//   - Worker and Reattacher: worker handles on real processes (started
//     with package proctest), which record what the pipelines asked of
//     them in a Calls log and can be told to fail any one call;
//   - Suspender and Resumer: the backend's outside hooks, recording into
//     the same log;
//   - Images: an image store kept as plain directories, with the real
//     images.Meta;
//   - Sessions: a session table that enforces the state machine's order
//     of the calls the services make, and whose sessions may belong to
//     tenants.
//
// The real pieces (CRIU, processes, the pipelines' step runner) stay real;
// only gpud's own parts are stood in for.
package checkpointtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/tenant"
)

// Calls is the ordered record of the calls the pipelines made on workers
// and backend hooks, shared by every handle of one test, with the
// failures the test injected. The zero value is ready to use.
type Calls struct {
	mu   sync.Mutex
	ops  []string
	fail map[string]error
}

// Fail makes every later call op ("quiesce", "resume", "detach",
// "reattach", "suspend", "backend-resume") fail with err; nil clears it.
func (c *Calls) Fail(op string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail == nil {
		c.fail = map[string]error{}
	}
	c.fail[op] = err
}

// Record appends op to the log and returns its injected failure.
func (c *Calls) Record(op string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = append(c.ops, op)
	return c.fail[op]
}

// String is the calls so far, separated by spaces.
func (c *Calls) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.ops, " ")
}

// Reset empties the log; injected failures stay.
func (c *Calls) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = nil
}

// Worker is a checkpoint.Worker on a real process. Quiesce, Resume and
// Detach only record themselves: the process needs nothing done for CRIU
// to dump it.
type Worker struct {
	Pid   int
	Calls *Calls
}

var _ checkpoint.Worker = Worker{}

func (w Worker) PID() int                             { return w.Pid }
func (w Worker) Quiesce(context.Context) error        { return w.Calls.Record("quiesce") }
func (w Worker) Resume(context.Context) error         { return w.Calls.Record("resume") }
func (w Worker) Detach(context.Context, string) error { return w.Calls.Record("detach") }

// Reattacher reaches a detached or restored worker the way gpud does: the
// process must be alive, and, when Nonce is set, be dialling with that
// nonce. It records "reattach" in Calls (which may be nil) and every PID
// it was asked for.
type Reattacher struct {
	Calls *Calls
	Nonce string

	mu   sync.Mutex
	pids []int
}

var _ checkpoint.Reattacher = (*Reattacher)(nil)

func (r *Reattacher) Reattach(_ context.Context, pid int, nonce string) (checkpoint.Worker, error) {
	r.mu.Lock()
	r.pids = append(r.pids, pid)
	if r.Calls == nil {
		r.Calls = &Calls{}
	}
	calls := r.Calls
	r.mu.Unlock()
	if err := calls.Record("reattach"); err != nil {
		return nil, err
	}
	if r.Nonce != "" && nonce != r.Nonce {
		return nil, fmt.Errorf("worker %d dialled with nonce %q, want %q", pid, nonce, r.Nonce)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return nil, fmt.Errorf("worker %d is gone: %w", pid, err)
	}
	return Worker{Pid: pid, Calls: calls}, nil
}

// PIDs lists the PIDs Reattach was asked for, in order.
func (r *Reattacher) PIDs() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.pids)
}

// Suspender is the checkpoint pipeline's backend hook (checkpoint.Suspender),
// recording "suspend" and "backend-resume".
type Suspender struct{ Calls *Calls }

var _ checkpoint.Suspender = Suspender{}

func (s Suspender) Suspend(context.Context, int) error { return s.Calls.Record("suspend") }
func (s Suspender) Resume(context.Context, int) error  { return s.Calls.Record("backend-resume") }

// Resumer is the restore pipeline's backend hook (restore.Resumer and
// restore.Checker): Check returns CheckErr, Resume records the GPUs it was
// given and returns ResumeErr.
type Resumer struct {
	CheckErr  error
	ResumeErr error

	mu   sync.Mutex
	gpus []backend.GPU
}

func (r *Resumer) Check([]backend.GPU, string) error { return r.CheckErr }

func (r *Resumer) Resume(_ context.Context, _ int, gpus []backend.GPU) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gpus = gpus
	return r.ResumeErr
}

// GPUs is what the last Resume was given.
func (r *Resumer) GPUs() []backend.GPU {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gpus
}

// Images is an image store kept as directories: Root/<id>/ holds an
// image's files (CRIU's image directory is flat) and the store remembers
// its meta. It is a checkpoint.Store and a restore.Store.
type Images struct {
	Root string
	// Fail, when set, fails every Commit.
	Fail error

	mu    sync.Mutex
	metas map[string]images.Meta
	last  string
}

// NewImages returns an empty store under a fresh temporary directory.
func NewImages(t testing.TB) *Images {
	return &Images{Root: t.TempDir()}
}

// Commit copies dir into a new image; its id is a fresh image id.
func (s *Images) Commit(_ context.Context, dir string, meta images.Meta) (*images.Manifest, images.Stats, error) {
	if s.Fail != nil {
		return nil, images.Stats{}, s.Fail
	}
	if meta.ID == "" {
		meta.ID = ids.NewImage()
	}
	n, err := s.put(meta.ID, dir, meta)
	if err != nil {
		return nil, images.Stats{}, err
	}
	return &images.Manifest{Version: images.ManifestVersion, Meta: meta}, images.Stats{LogicalBytes: n, StoredBytes: n}, nil
}

// Put adds image id with the files of dir and meta, as a commit would:
// the way a test puts images in a store that no pipeline made.
func (s *Images) Put(id, dir string, meta images.Meta) error {
	meta.ID = id
	_, err := s.put(id, dir, meta)
	return err
}

func (s *Images) put(id, dir string, meta images.Meta) (int64, error) {
	n, err := copyFiles(dir, filepath.Join(s.Root, id))
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.metas == nil {
		s.metas = map[string]images.Meta{}
	}
	s.metas[id], s.last = meta, id
	return n, nil
}

// Checkout copies image id's files into dir. An unknown image is
// errs.NotFound.
func (s *Images) Checkout(_ context.Context, id, dir string) (*images.Manifest, error) {
	meta, ok := s.Meta(id)
	if !ok {
		return nil, errs.New(errs.NotFound, errs.Image(id), "not in the store")
	}
	if _, err := copyFiles(filepath.Join(s.Root, id), dir); err != nil {
		return nil, err
	}
	return &images.Manifest{Version: images.ManifestVersion, Meta: meta}, nil
}

// Meta is image id's meta.
func (s *Images) Meta(id string) (images.Meta, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.metas[id]
	return m, ok
}

// Last is the meta of the image committed or put last.
func (s *Images) Last() images.Meta {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.metas[s.last]
}

// CopyTo puts image id into to, as a push to another host would, and
// returns the bytes copied.
func (s *Images) CopyTo(to *Images, id string) (int64, error) {
	meta, ok := s.Meta(id)
	if !ok {
		return 0, errs.New(errs.NotFound, errs.Image(id), "not in the store")
	}
	return to.put(id, filepath.Join(s.Root, id), meta)
}

// copyFiles copies the regular files of the flat directory from into to,
// creating it, and returns the bytes copied.
func copyFiles(from, to string) (int64, error) {
	if err := os.MkdirAll(to, 0o700); err != nil {
		return 0, err
	}
	ents, err := os.ReadDir(from)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return n, err
		}
		n += int64(len(b))
		if err := os.WriteFile(filepath.Join(to, e.Name()), b, 0o600); err != nil {
			return n, err
		}
	}
	return n, nil
}

// Sessions is a host's session table as the checkpoint, migration and
// restore services drive it (checkpoint.Sessions, restore.Adopter). It
// enforces the state machine's order: Begin takes a running or detached
// session to quiescing, Dumped quiescing to checkpointing, Migrating
// checkpointing to migrating; any other order is errs.FailedPrecondition.
// A session may belong to a tenant (Own, or the owner Adopt is given);
// Authorize answers a caller that is not its owner as gpud does, as for
// a session that is not here.
type Sessions struct {
	mu      sync.Mutex
	state   map[string]string
	workers map[string]checkpoint.Worker
	moved   map[string]string
	last    map[string]string
	owners  map[string]string
}

var _ checkpoint.Sessions = (*Sessions)(nil)

// NewSessions returns an empty table.
func NewSessions() *Sessions {
	return &Sessions{state: map[string]string{}, workers: map[string]checkpoint.Worker{}, moved: map[string]string{}, last: map[string]string{},
		owners: map[string]string{}}
}

// Add registers a running session served by w, whose last image here is
// last ("" for none).
func (t *Sessions) Add(id string, w checkpoint.Worker, last string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.state[id], t.workers[id], t.last[id] = "running", w, last
}

// Own makes tenant the owner of session id ("": the administrator).
func (t *Sessions) Own(id, tenant string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.owners[id] = tenant
}

// Owner is the tenant that owns session id; "" for the administrator.
func (t *Sessions) Owner(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.owners[id]
}

// Authorize lets the caller in ctx act on a session it owns (the
// administrator owns all); any other, and one the table does not have,
// is errs.NotFound with the same words.
func (t *Sessions) Authorize(ctx context.Context, id string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.state[id]; ok && tenant.FromContext(ctx).Owns(t.owners[id]) {
		return nil
	}
	return errs.New(errs.NotFound, errs.Session(id), "no such session on this host")
}

// State is the session's state; "" for a session the table never had.
func (t *Sessions) State(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.state[id]
}

// Worker is the handle the session is served by now.
func (t *Sessions) Worker(id string) checkpoint.Worker {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workers[id]
}

// MovedTo is the address the session's client was last told to move to.
func (t *Sessions) MovedTo(id string) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.moved[id]
}

func (t *Sessions) move(id string, from []string, to string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if from != nil && !slices.Contains(from, t.state[id]) {
		return errs.New(errs.FailedPrecondition, errs.Session(id), "cannot go from %q to %s", t.state[id], to)
	}
	t.state[id] = to
	return nil
}

func (t *Sessions) Begin(_ context.Context, id string) (checkpoint.Worker, error) {
	if err := t.move(id, []string{"running", "detached"}, "quiescing"); err != nil {
		return nil, err
	}
	return t.Worker(id), nil
}

func (t *Sessions) Dumped(id string) error {
	return t.move(id, []string{"quiescing"}, "checkpointing")
}

func (t *Sessions) Migrating(id string) error {
	return t.move(id, []string{"checkpointing"}, "migrating")
}

func (t *Sessions) Released(id string) error { return t.move(id, nil, "stopped") }

func (t *Sessions) Resumed(id string, w checkpoint.Worker) error {
	t.mu.Lock()
	t.workers[id] = w
	t.mu.Unlock()
	return t.move(id, nil, "running")
}

func (t *Sessions) Moved(id, addr string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.moved[id] = addr
	return nil
}

func (t *Sessions) LastImage(_ context.Context, id string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.last[id], nil
}

// Adopt registers a restored session of owner, detached and waiting for
// its client; one already live here is errs.AlreadyExists.
func (t *Sessions) Adopt(_ context.Context, id string, w checkpoint.Worker, image, owner string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.state[id]; s != "" && s != "stopped" {
		return errs.New(errs.AlreadyExists, errs.Session(id), "already live on this host")
	}
	t.state[id], t.workers[id], t.last[id], t.owners[id] = "detached", w, image, owner
	return nil
}

// WantFailedStep fails the test unless err is a pipeline's failure at
// step, classified as kind, whose message contains named (e.g.
// errs.Image("img-1"); "" skips that check).
func WantFailedStep(t testing.TB, err error, step string, kind errs.Kind, named string) {
	t.Helper()
	if err == nil {
		t.Fatalf("the pipeline succeeded; want a failure at step %q", step)
	}
	if checkpoint.FailedStep(err) != step || errs.KindOf(err) != kind {
		t.Errorf("step %q kind %q, want %q %q: %v", checkpoint.FailedStep(err), errs.KindOf(err), step, kind, err)
	}
	if named != "" && !strings.Contains(err.Error(), named) {
		t.Errorf("the error does not name %s: %v", named, err)
	}
}
