package checkpoint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/proctest"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
)

func TestMain(m *testing.M) {
	proctest.MaybeChild()
	os.Exit(m.Run())
}

// recWorker drives a real process and records what the pipeline asked of
// it, in order, across reattaches.
type recWorker struct {
	pid   int
	calls *[]string
	mu    *sync.Mutex
	fail  map[string]error // op -> injected failure
}

func (w *recWorker) record(op string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	*w.calls = append(*w.calls, op)
	return w.fail[op]
}
func (w *recWorker) PID() int                                     { return w.pid }
func (w *recWorker) Quiesce(context.Context) error                { return w.record("quiesce") }
func (w *recWorker) Resume(context.Context) error                 { return w.record("resume") }
func (w *recWorker) Detach(_ context.Context, nonce string) error { return w.record("detach") }

// Reattach reaches the process the way a detached worker is reached: it
// must be alive.
func (w *recWorker) Reattach(_ context.Context, pid int, nonce string) (Worker, error) {
	if err := w.record("reattach"); err != nil {
		return nil, err
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return nil, fmt.Errorf("worker %d is gone: %w", pid, err)
	}
	return &recWorker{pid: pid, calls: w.calls, mu: w.mu, fail: w.fail}, nil
}

// recSuspender records the backend hook calls into the same list.
type recSuspender struct{ w *recWorker }

func (s recSuspender) Suspend(context.Context, int) error { return s.w.record("suspend") }
func (s recSuspender) Resume(context.Context, int) error  { return s.w.record("backend-resume") }

// dirStore copies image directories into a folder per image, the way a
// store keeps them, and counts bytes.
type dirStore struct {
	root string
	n    int
	fail error
	meta images.Meta
}

func (s *dirStore) Commit(_ context.Context, dir string, meta images.Meta) (*images.Manifest, images.Stats, error) {
	if s.fail != nil {
		return nil, images.Stats{}, s.fail
	}
	s.n++
	id := fmt.Sprintf("img-%d", s.n)
	dst := filepath.Join(s.root, id)
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return nil, images.Stats{}, err
	}
	var total int64
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, images.Stats{}, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, images.Stats{}, err
		}
		total += int64(len(b))
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
			return nil, images.Stats{}, err
		}
	}
	mb, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(s.root, id+".json"), mb, 0o600); err != nil {
		return nil, images.Stats{}, err
	}
	s.meta = meta
	meta.ID = id
	return &images.Manifest{Meta: meta}, images.Stats{LogicalBytes: total, StoredBytes: total}, nil
}

func TestCheckpointPipeline(t *testing.T) {
	h := proctest.New(t)
	boom := errs.New(errs.ResourceExhausted, "", "store full")
	cases := []struct {
		name      string
		tcp       bool             // the worker holds a TCP connection: CRIU refuses
		fail      map[string]error // worker or backend op -> error
		storeFail error
		wantStep  string // "" = success
		wantKind  errs.Kind
		wantCalls string
		wantLog   string // the error quotes CRIU's log with this
	}{
		{name: "success", wantCalls: "quiesce suspend detach"},
		{name: "quiesce fails", fail: map[string]error{"quiesce": errors.New("worker busy")},
			wantStep: "quiesce", wantKind: errs.Internal, wantCalls: "quiesce"},
		{name: "suspend fails", fail: map[string]error{"suspend": errs.New(errs.FailedPrecondition, "", "driver says no")},
			wantStep: "suspend", wantKind: errs.FailedPrecondition, wantCalls: "quiesce suspend resume"},
		{name: "detach fails", fail: map[string]error{"detach": errors.New("control socket closed")},
			wantStep: "detach", wantKind: errs.Internal, wantCalls: "quiesce suspend detach backend-resume resume"},
		{name: "dump fails", tcp: true,
			wantStep: "dump", wantKind: errs.Internal, wantCalls: "quiesce suspend detach reattach backend-resume resume", wantLog: "TCP"},
		{name: "store fails", storeFail: boom,
			wantStep: "store", wantKind: errs.ResourceExhausted, wantCalls: "quiesce suspend detach reattach backend-resume resume"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			child := h.Start(c.tcp)
			pid := child.Process.Pid
			var calls []string
			w := &recWorker{pid: pid, calls: &calls, mu: &sync.Mutex{}, fail: c.fail}
			store := &dirStore{root: t.TempDir(), fail: c.storeFail}
			p := &Pipeline{WorkDir: t.TempDir(), Suspender: recSuspender{w}, Store: store, Reattach: w,
				Host: "host-a", Backend: "emulated"}
			fr, err := p.Checkpoint(ctx, Request{Session: "s-000000000001", Worker: w, Parent: "img-0"})
			if got := strings.Join(calls, " "); got != c.wantCalls {
				t.Errorf("calls %q, want %q", got, c.wantCalls)
			}
			if c.wantStep != "" {
				if err == nil {
					t.Fatal("checkpoint succeeded")
				}
				if FailedStep(err) != c.wantStep || errs.KindOf(err) != c.wantKind {
					t.Errorf("step %q kind %q, want %q %q: %v", FailedStep(err), errs.KindOf(err), c.wantStep, c.wantKind, err)
				}
				if !strings.Contains(err.Error(), `session "s-000000000001"`) {
					t.Errorf("error does not name the session: %v", err)
				}
				if c.wantLog != "" && !strings.Contains(err.Error(), c.wantLog) {
					t.Errorf("error does not quote CRIU's log (%q): %v", c.wantLog, err)
				}
				h.Counting(pid) // rolled back: the original still runs
				if n := countDirs(t, p.WorkDir, "img"); n != 0 {
					t.Errorf("%d image directories left behind", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("checkpoint: %v", err)
			}
			if fr.Image == "" || fr.Bytes <= 0 || fr.Session != "s-000000000001" || len(fr.Nonce) != 32 {
				t.Errorf("result %+v", fr.Result)
			}
			if m := store.meta; m.Session != "s-000000000001" || m.Parent != "img-0" || m.AttachNonce != fr.Nonce || m.Host != "host-a" || !strings.HasPrefix(m.CRIU, "4.") || m.Kernel == "" {
				t.Errorf("manifest meta %+v", m)
			}
			var names []string
			for _, s := range fr.Steps {
				names = append(names, s.Step)
			}
			if got := strings.Join(names, " "); got != "quiesce suspend detach dump store" {
				t.Errorf("steps %q", got)
			}
			h.Counting(pid) // left running by CRIU, frozen only in our protocol

			// Resume: reattach, backend resume, worker resume, in that order.
			calls = calls[:0]
			if _, err := fr.Resume(ctx); err != nil {
				t.Fatalf("resume: %v", err)
			}
			if got := strings.Join(calls, " "); got != "reattach backend-resume resume" {
				t.Errorf("resume calls %q", got)
			}
			if _, err := fr.Resume(ctx); !errs.IsFailedPrecondition(err) {
				t.Errorf("second resume: %v", err)
			}
			if err := fr.Release(ctx); !errs.IsFailedPrecondition(err) {
				t.Errorf("release after resume: %v", err)
			}
			if n := countDirs(t, p.WorkDir, ""); n != 0 {
				t.Errorf("work dir not cleaned: %d entries", n)
			}
		})
	}
}

func TestCheckpointRelease(t *testing.T) {
	h := proctest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	child := h.Start(false)
	var calls []string
	w := &recWorker{pid: child.Process.Pid, calls: &calls, mu: &sync.Mutex{}}
	p := &Pipeline{WorkDir: t.TempDir(), Store: &dirStore{root: t.TempDir()}, Reattach: w}
	fr, err := p.Checkpoint(ctx, Request{Session: "s-2", Worker: w})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(calls, " "); got != "quiesce detach" {
		t.Errorf("without a suspender: calls %q", got)
	}
	if err := fr.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := child.Wait(); err == nil {
		t.Error("released worker exited cleanly; it should have been killed")
	}
}

func TestUndoFailureIsReported(t *testing.T) {
	var order []string
	step := func(name string, doErr, undoErr error) Step {
		return Step{Name: name,
			Do:   func(context.Context) error { order = append(order, "do "+name); return doErr },
			Undo: func(context.Context) error { order = append(order, "undo "+name); return undoErr }}
	}
	ctx, cancel := context.WithCancel(context.Background())
	steps := []Step{
		step("a", nil, nil),
		step("b", nil, errors.New("b will not undo")),
		{Name: "c", Do: func(context.Context) error { cancel(); return errors.New("c broke") }},
		step("d", nil, nil),
	}
	timings, err := Run(ctx, nil, "checkpoint", errs.Session("s-3"), steps)
	if got := strings.Join(order, ", "); got != "do a, do b, undo b, undo a" {
		t.Errorf("order %q", got)
	}
	var se *StepError
	if !errors.As(err, &se) || se.Step != "c" || len(se.Undo) != 1 || len(timings) != 3 {
		t.Fatalf("err %v timings %d", err, len(timings))
	}
	if msg := err.Error(); !strings.Contains(msg, `session "s-3": checkpoint failed at step "c": c broke`) || !strings.Contains(msg, "b will not undo") {
		t.Errorf("message %q", msg)
	}
}

func countDirs(t *testing.T, root, name string) int {
	t.Helper()
	n := 0
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && p != root && (name == "" || d.Name() == name) {
			n++
		}
		return nil
	})
	return n
}
