package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/proctest"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/restore"
)

func TestMain(m *testing.M) {
	proctest.MaybeChild()
	os.Exit(m.Run())
}

// procWorker is a worker handle on a real process.
type procWorker struct {
	pid int
	log *[]string
	mu  *sync.Mutex
}

func (w procWorker) note(s string) {
	w.mu.Lock()
	*w.log = append(*w.log, s)
	w.mu.Unlock()
}
func (w procWorker) PID() int                             { return w.pid }
func (w procWorker) Quiesce(context.Context) error        { w.note("quiesce"); return nil }
func (w procWorker) Resume(context.Context) error         { w.note("resume"); return nil }
func (w procWorker) Detach(context.Context, string) error { w.note("detach"); return nil }
func (w procWorker) Reattach(_ context.Context, pid int, _ string) (checkpoint.Worker, error) {
	w.note("reattach")
	if err := syscall.Kill(pid, 0); err != nil {
		return nil, fmt.Errorf("worker %d is gone: %w", pid, err)
	}
	return procWorker{pid: pid, log: w.log, mu: w.mu}, nil
}

// table is a host's session table with the state machine's effects.
type table struct {
	mu      sync.Mutex
	state   map[string]string
	workers map[string]checkpoint.Worker
	moved   map[string]string
}

func newTable() *table {
	return &table{state: map[string]string{}, workers: map[string]checkpoint.Worker{}, moved: map[string]string{}}
}

func (t *table) get(id string) string { t.mu.Lock(); defer t.mu.Unlock(); return t.state[id] }
func (t *table) set(id, from, to string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if from != "" && !strings.Contains(from, t.state[id]+"|") {
		return errs.New(errs.FailedPrecondition, errs.Session(id), "cannot go from %q to %s", t.state[id], to)
	}
	t.state[id] = to
	return nil
}
func (t *table) Begin(_ context.Context, id string) (checkpoint.Worker, error) {
	if err := t.set(id, "running|detached|", "quiescing"); err != nil {
		return nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.workers[id], nil
}
func (t *table) Dumped(id string) error    { return t.set(id, "quiescing|", "checkpointing") }
func (t *table) Migrating(id string) error { return t.set(id, "checkpointing|", "migrating") }
func (t *table) Released(id string) error  { return t.set(id, "", "stopped") }
func (t *table) Resumed(id string, w checkpoint.Worker) error {
	t.mu.Lock()
	t.workers[id] = w
	t.mu.Unlock()
	return t.set(id, "", "running")
}
func (t *table) Moved(id, addr string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.moved[id] = addr
	return nil
}
func (t *table) LastImage(context.Context, string) (string, error) { return "", nil }
func (t *table) Adopt(_ context.Context, id string, w checkpoint.Worker, _ string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.state[id]; s != "" && s != "stopped" {
		return errs.New(errs.AlreadyExists, errs.Session(id), "already live here")
	}
	t.state[id], t.workers[id] = "detached", w
	return nil
}

// dirStore keeps images as directories: root/<id>/ and root/<id>.json.
type dirStore struct {
	root string
	mu   sync.Mutex
	n    int
}

func (s *dirStore) Commit(_ context.Context, dir string, meta checkpoint.Meta) (checkpoint.Stored, error) {
	s.mu.Lock()
	s.n++
	id := fmt.Sprintf("img-%s-%d", filepath.Base(s.root), s.n)
	s.mu.Unlock()
	n, err := copyDir(dir, filepath.Join(s.root, id))
	if err != nil {
		return checkpoint.Stored{}, err
	}
	b, _ := json.Marshal(meta)
	return checkpoint.Stored{Image: id, Bytes: n, StoredBytes: n}, os.WriteFile(filepath.Join(s.root, id+".json"), b, 0o600)
}

func (s *dirStore) Checkout(_ context.Context, id, dir string) (checkpoint.Meta, error) {
	var m checkpoint.Meta
	b, err := os.ReadFile(filepath.Join(s.root, id+".json"))
	if err != nil {
		return m, errs.Wrap(err, errs.NotFound, errs.Image(id), "not in the store")
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, err
	}
	_, err = copyDir(filepath.Join(s.root, id), dir)
	return m, err
}

func copyDir(from, to string) (int64, error) {
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

// pusher copies an image from A's store into B's, as a chunk push would.
type pusher struct {
	from, to *dirStore
	fail     error
}

func (p *pusher) Push(_ context.Context, image string, _ *control.Client) (PushStats, error) {
	if p.fail != nil {
		return PushStats{}, p.fail
	}
	n, err := copyDir(filepath.Join(p.from.root, image), filepath.Join(p.to.root, image))
	if err != nil {
		return PushStats{}, err
	}
	b, err := os.ReadFile(filepath.Join(p.from.root, image+".json"))
	if err != nil {
		return PushStats{}, err
	}
	return PushStats{Chunks: 1, Bytes: n}, os.WriteFile(filepath.Join(p.to.root, image+".json"), b, 0o600)
}

// hostB is a second gpud's API: GET /v1/host and the real restore route.
func hostB(t *testing.T, store *dirStore, tab *table, reportBackend, restoreBackend, socketNS string, ra checkpoint.Reattacher) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/host", func(w http.ResponseWriter, r *http.Request) {
		control.WriteJSON(w, map[string]any{"backend": reportBackend, "listen": "127.0.0.1:17070", "socket_ns": socketNS,
			"gpus": []map[string]any{{"index": 0, "name": "emulated", "uuid": "GPU-b"}}})
	})
	svc := &restore.Service{
		Restorer: &restore.Restorer{WorkDir: t.TempDir(), Store: store, Reattach: ra, Backend: restoreBackend},
		Sessions: tab, Listen: "127.0.0.1:17070",
	}
	svc.Register(mux)
	srv := httptest.NewServer(control.RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestMigrate(t *testing.T) {
	h := proctest.New(t)
	const id = "s-0000000000b1"
	cases := []struct {
		name           string
		to             string // "" = host B
		reportBackend  string
		restoreBackend string
		pushErr        error
		checkErr       error
		movedErr       error // the moved notice cannot be written (failpoint migrate/moved)
		wantStep       string
		wantKind       errs.Kind
		wantCalls      string // on A's worker
	}{
		{name: "moves", reportBackend: "emulated", restoreBackend: "emulated", wantCalls: "quiesce detach"},
		// B has adopted the session when the notice fails: undoing now would
		// run the session on both hosts, so the migration stands.
		{name: "client not told", reportBackend: "emulated", restoreBackend: "emulated", wantCalls: "quiesce detach",
			movedErr: errors.New("client link down")},
		{name: "target down", to: "127.0.0.1:1", wantStep: "precheck", wantKind: errs.Unavailable},
		{name: "target on another backend", reportBackend: "cuda", restoreBackend: "cuda", wantStep: "precheck", wantKind: errs.FailedPrecondition},
		{name: "target has no matching GPU", reportBackend: "emulated", restoreBackend: "emulated", checkErr: errs.New(errs.FailedPrecondition, "", "no GPU of the session's model"),
			wantStep: "precheck", wantKind: errs.FailedPrecondition},
		{name: "push fails", reportBackend: "emulated", restoreBackend: "emulated", pushErr: errs.New(errs.ResourceExhausted, "", "disk full"),
			wantStep: "push", wantKind: errs.ResourceExhausted, wantCalls: "quiesce detach reattach resume"},
		{name: "target cannot restore", reportBackend: "emulated", restoreBackend: "cuda",
			wantStep: "restore", wantKind: errs.FailedPrecondition, wantCalls: "quiesce detach reattach resume"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var fp failpoint.Set
			if c.movedErr != nil {
				fp.On("migrate/moved", failpoint.Fail(c.movedErr))
				ctx = failpoint.With(ctx, &fp)
			}
			child := h.Start(false)
			pid := child.Process.Pid
			var calls []string
			w := procWorker{pid: pid, log: &calls, mu: &sync.Mutex{}}
			tabA, tabB := newTable(), newTable()
			tabA.state[id], tabA.workers[id] = "running", w
			storeA, storeB := &dirStore{root: t.TempDir()}, &dirStore{root: t.TempDir()}
			to := c.to
			if to == "" {
				var bcalls []string // B's reattaches are its own
				to = hostB(t, storeB, tabB, c.reportBackend, c.restoreBackend, "", procWorker{log: &bcalls, mu: &sync.Mutex{}})
			}
			svc := &Service{
				Checkpoint: &checkpoint.Service{
					Pipeline: &checkpoint.Pipeline{WorkDir: t.TempDir(), Store: storeA, Reattach: w, Backend: "emulated"},
					Sessions: tabA,
				},
				Push:    &pusher{from: storeA, to: storeB, fail: c.pushErr},
				Token:   "tok",
				Backend: "emulated",
			}
			if c.checkErr != nil {
				svc.CheckTarget = func(h backend.HostInfo) error {
					if len(h.GPUs) != 1 || h.GPUs[0].UUID != "GPU-b" {
						t.Errorf("CheckTarget got %+v, want B's host info", h)
					}
					return c.checkErr
				}
			}
			before := h.Counting(pid)
			t0 := time.Now()
			res, err := svc.Migrate(ctx, id, to)
			if got := strings.Join(calls, " "); got != c.wantCalls {
				t.Errorf("A's worker saw %q, want %q", got, c.wantCalls)
			}
			if c.wantStep != "" {
				if err == nil {
					t.Fatal("migration succeeded")
				}
				if checkpoint.FailedStep(err) != c.wantStep || errs.KindOf(err) != c.wantKind {
					t.Errorf("step %q kind %q, want %q %q: %v", checkpoint.FailedStep(err), errs.KindOf(err), c.wantStep, c.wantKind, err)
				}
				if c.wantStep != "push" && !strings.Contains(err.Error(), to) {
					t.Errorf("error does not name the target host: %v", err)
				}
				if c.wantStep == "precheck" && time.Since(t0) > 5*time.Second {
					t.Errorf("a dead target took %v to fail", time.Since(t0))
				}
				if s := tabA.get(id); s != "running" {
					t.Errorf("session on A is %q, want running", s)
				}
				if s := tabB.get(id); s != "" {
					t.Errorf("session on B is %q after a failed migration", s)
				}
				h.Counting(pid) // still running on A
				return
			}
			if err != nil {
				t.Fatalf("migrate: %v", err)
			}
			if res.Session != id || res.To != to || res.Listen != "127.0.0.1:17070" || res.SentBytes <= 0 || res.Image == "" {
				t.Errorf("result %+v", res)
			}
			if res.DowntimeMS < 0 || res.DowntimeMS > res.DurationMS+1 {
				t.Errorf("downtime %d ms of %d ms", res.DowntimeMS, res.DurationMS)
			}
			if c.movedErr != nil && fp.Hits("migrate/moved") != 1 {
				t.Errorf("migrate/moved reached %d times", fp.Hits("migrate/moved"))
			}
			if tabA.get(id) != "stopped" || tabA.moved[id] != "127.0.0.1:17070" {
				t.Errorf("A: state %q moved %q", tabA.get(id), tabA.moved[id])
			}
			if tabB.get(id) != "detached" {
				t.Errorf("B: state %q, want detached (waiting for the client)", tabB.get(id))
			}
			if err := child.Wait(); err == nil {
				t.Error("A's worker exited cleanly; it should have been released (killed)")
			}
			bpid := tabB.workers[id].PID()
			if bpid == pid {
				t.Fatalf("B's worker has A's pid %d", pid)
			}
			if n := h.Next(bpid); n < before {
				t.Errorf("B's worker counts from %d, below the %d A reached: memory lost", n, before)
			}
			h.Counting(bpid)
			_ = syscall.Kill(bpid, syscall.SIGKILL)
			var ws syscall.WaitStatus
			if _, err := syscall.Wait4(bpid, &ws, 0, nil); err != nil && !errors.Is(err, syscall.ECHILD) {
				t.Errorf("reap B's worker: %v", err)
			}
		})
	}
}

func TestMigrateBadInput(t *testing.T) {
	svc := &Service{Checkpoint: &checkpoint.Service{Sessions: newTable()}}
	cases := []struct{ id, to string }{
		{"not-a-session", "127.0.0.1:1"},
		{"s-0000000000b1", ""},
	}
	for _, c := range cases {
		if _, err := svc.Migrate(context.Background(), c.id, c.to); !errs.IsInvalidArgument(err) {
			t.Errorf("Migrate(%q, %q) = %v, want invalid argument", c.id, c.to, err)
		}
	}
}

// TestMigrateHandover: when B shares A's abstract socket names, A releases
// its frozen worker before B restores, and a failure on B restores the
// image on A instead of resuming the released worker.
func TestMigrateHandover(t *testing.T) {
	h := proctest.New(t)
	const id, ns = "s-0000000000c1", "machine/net:1"
	for _, c := range []struct {
		name, restoreBackend string
		wantErr              bool
	}{
		{"moves", "emulated", false},
		{"target cannot restore", "cuda", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			child := h.Start(false)
			var calls, bcalls []string
			w := procWorker{pid: child.Process.Pid, log: &calls, mu: &sync.Mutex{}}
			tabA, tabB := newTable(), newTable()
			tabA.state[id], tabA.workers[id] = "running", w
			storeA, storeB := &dirStore{root: t.TempDir()}, &dirStore{root: t.TempDir()}
			to := hostB(t, storeB, tabB, "emulated", c.restoreBackend, ns, procWorker{log: &bcalls, mu: &sync.Mutex{}})
			var restoredHere []string
			svc := &Service{
				Checkpoint: &checkpoint.Service{
					Pipeline: &checkpoint.Pipeline{WorkDir: t.TempDir(), Store: storeA, Reattach: w, Backend: "emulated"},
					Sessions: tabA,
				},
				Push: &pusher{from: storeA, to: storeB}, Token: "tok", Backend: "emulated", SocketNS: ns,
				RestoreHere: func(_ context.Context, image string) error {
					restoredHere = append(restoredHere, image)
					return nil
				},
			}
			res, err := svc.Migrate(ctx, id, to)
			if got := strings.Join(calls, " "); got != "quiesce detach" {
				t.Errorf("A's worker saw %q; a handed-over worker is never resumed", got)
			}
			exited := make(chan error, 1)
			go func() { exited <- child.Wait() }()
			select {
			case werr := <-exited:
				if werr == nil {
					t.Error("A's frozen worker exited by itself; it should have been killed")
				}
			case <-time.After(10 * time.Second):
				t.Error("A's frozen worker was not released")
			}
			if !c.wantErr {
				if err != nil || res.Session != id {
					t.Fatalf("migrate: %+v, %v", res, err)
				}
				if len(restoredHere) != 0 {
					t.Errorf("restored on A after a successful migration: %v", restoredHere)
				}
				return
			}
			if err == nil || checkpoint.FailedStep(err) != "restore" {
				t.Fatalf("want a failure at restore, got %v", err)
			}
			if len(restoredHere) != 1 || restoredHere[0] == "" {
				t.Errorf("the image was not restored on A after B failed: %v", restoredHere)
			}
		})
	}
}
