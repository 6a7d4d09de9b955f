package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/criu"
	"github.com/gpuctl/gpuctl/checkpoint/proctest"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

func TestMain(m *testing.M) {
	proctest.MaybeChild()
	os.Exit(m.Run())
}

// dirStore serves images kept as plain directories: root/<id>/ holds the
// CRIU files and metas[id] the manifest meta.
type dirStore struct {
	root  string
	metas map[string]checkpoint.Meta
}

func (s *dirStore) Checkout(_ context.Context, id, dir string) (checkpoint.Meta, error) {
	m, ok := s.metas[id]
	if !ok {
		return checkpoint.Meta{}, errs.New(errs.NotFound, errs.Image(id), "not in the store")
	}
	ents, err := os.ReadDir(filepath.Join(s.root, id))
	if err != nil {
		return checkpoint.Meta{}, err
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(s.root, id, e.Name()))
		if err != nil {
			return checkpoint.Meta{}, err
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o600); err != nil {
			return checkpoint.Meta{}, err
		}
	}
	return m, nil
}

// worker is the handle Reattach returns.
type worker struct{ pid int }

func (w worker) PID() int                             { return w.pid }
func (w worker) Quiesce(context.Context) error        { return nil }
func (w worker) Resume(context.Context) error         { return nil }
func (w worker) Detach(context.Context, string) error { return nil }

// reattacher checks what a real reattach needs: a live process and the
// image's nonce.
type reattacher struct {
	nonce string
	fail  error
	pids  []int
}

func (r *reattacher) Reattach(_ context.Context, pid int, nonce string) (checkpoint.Worker, error) {
	r.pids = append(r.pids, pid)
	if r.fail != nil {
		return nil, r.fail
	}
	if nonce != r.nonce {
		return nil, fmt.Errorf("nonce %q, want %q", nonce, r.nonce)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		return nil, fmt.Errorf("restored worker %d is not alive: %w", pid, err)
	}
	return worker{pid}, nil
}

type resumer struct {
	fail  error
	gpus  []backend.GPU
	check error
}

func (r *resumer) Check([]backend.GPU, string) error { return r.check }

func (r *resumer) Resume(_ context.Context, pid int, g []backend.GPU) error {
	r.gpus = g
	return r.fail
}

func TestRestore(t *testing.T) {
	h := proctest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// One real image of a counting worker, and a broken copy of it.
	child := h.Start(false)
	before := h.Counting(child.Process.Pid)
	root := t.TempDir()
	good := filepath.Join(root, "img-good")
	if err := os.Mkdir(good, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := criu.Dump(ctx, child.Process.Pid, good, criu.Options{}); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(root, "img-broken")
	if err := os.Mkdir(broken, 0o700); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(good)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "pstree") { // no process tree: CRIU cannot restore
			continue
		}
		b, _ := os.ReadFile(filepath.Join(good, e.Name()))
		_ = os.WriteFile(filepath.Join(broken, e.Name()), b, 0o600)
	}
	gpus := []backend.GPU{{Index: 0, Name: "emulated", UUID: "GPU-e"}}
	meta := checkpoint.Meta{Session: "s-00000000000a", Backend: "emulated", Nonce: "n-1", GPUs: gpus}
	noNonce := meta
	noNonce.Nonce = ""
	cuda := meta
	cuda.Backend = "cuda"
	store := &dirStore{root: root, metas: map[string]checkpoint.Meta{
		"img-good": meta, "img-broken": meta, "img-nononce": noNonce, "img-cuda": cuda,
	}}
	for _, id := range []string{"img-nononce", "img-cuda"} {
		if err := os.Symlink(good, filepath.Join(root, id)); err != nil {
			t.Fatal(err)
		}
	}

	cases := []struct {
		name      string
		image     string
		resumeErr error
		attachErr error
		checkErr  error
		wantStep  string
		wantKind  errs.Kind
	}{
		{name: "restores", image: "img-good"},
		{name: "restores again beside the first", image: "img-good"},
		{name: "unknown image", image: "img-none", wantStep: "checkout", wantKind: errs.NotFound},
		{name: "manifest without nonce", image: "img-nononce", wantStep: "checkout", wantKind: errs.DataLoss},
		{name: "other backend", image: "img-cuda", wantStep: "checkout", wantKind: errs.FailedPrecondition},
		{name: "broken image", image: "img-broken", wantStep: "criu", wantKind: errs.Internal},
		{name: "host cannot run it", image: "img-good", checkErr: errs.New(errs.FailedPrecondition, "", "no H200 here"),
			wantStep: "checkout", wantKind: errs.FailedPrecondition},
		{name: "backend resume fails", image: "img-good", resumeErr: errs.New(errs.FailedPrecondition, "", "GPU gone"),
			wantStep: "resume", wantKind: errs.FailedPrecondition},
		{name: "reattach fails", image: "img-good", attachErr: errors.New("worker never dialled"),
			wantStep: "reattach", wantKind: errs.Internal},
	}
	var live []int
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ra := &reattacher{nonce: "n-1", fail: c.attachErr}
			rs := &resumer{fail: c.resumeErr, check: c.checkErr}
			r := &Restorer{WorkDir: t.TempDir(), Store: store, Resumer: rs, Reattach: ra, Backend: "emulated"}
			res, err := r.Restore(ctx, c.image)
			if c.wantStep != "" {
				if err == nil {
					t.Fatal("restore succeeded")
				}
				if checkpoint.FailedStep(err) != c.wantStep || errs.KindOf(err) != c.wantKind {
					t.Errorf("step %q kind %q, want %q %q: %v", checkpoint.FailedStep(err), errs.KindOf(err), c.wantStep, c.wantKind, err)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("image %q", c.image)) {
					t.Errorf("error does not name the image: %v", err)
				}
				// Whatever CRIU restored was killed and reaped.
				for _, pid := range ra.pids {
					if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("restored pid %d left behind after a failed restore", pid)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("restore: %v", err)
			}
			if res.Session != "s-00000000000a" || res.Worker == nil || res.Worker.PID() != res.PID {
				t.Errorf("result %+v", res)
			}
			if len(rs.gpus) != 1 || rs.gpus[0].UUID != "GPU-e" {
				t.Errorf("backend resume got GPUs %+v, want the image's", rs.gpus)
			}
			if n := h.Next(res.PID); n < before {
				t.Errorf("restored worker counts from %d, below %d: memory lost", n, before)
			}
			h.Counting(res.PID)
			live = append(live, res.PID)
		})
	}
	if len(live) != 2 || live[0] == live[1] {
		t.Fatalf("want two distinct live restores, got %v", live)
	}
	for _, pid := range live {
		h.Counting(pid) // both still alive at once
		if err := kill(pid); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("pid %d not reaped", pid)
		}
	}
}

func TestRestoreNeedsAnImage(t *testing.T) {
	r := &Restorer{WorkDir: t.TempDir()}
	if _, err := r.Restore(context.Background(), ""); !errs.IsInvalidArgument(err) {
		t.Errorf("empty image id: %v", err)
	}
}

// adopter records adoptions and their owners, and refuses a session
// already live here.
type adopter struct {
	live   map[string]bool
	owners map[string]string
}

func (a *adopter) Adopt(_ context.Context, id string, w checkpoint.Worker, image, owner string) error {
	if a.live[id] {
		return errs.New(errs.AlreadyExists, errs.Session(id), "already live on this host")
	}
	a.live[id] = true
	if a.owners == nil {
		a.owners = map[string]string{}
	}
	a.owners[id] = owner
	return nil
}

func TestRestoreService(t *testing.T) {
	h := proctest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	child := h.Start(false)
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "img-1"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := criu.Dump(ctx, child.Process.Pid, filepath.Join(root, "img-1"), criu.Options{}); err != nil {
		t.Fatal(err)
	}
	store := &dirStore{root: root, metas: map[string]checkpoint.Meta{"img-1": {Session: "s-00000000000b", Nonce: "n-1", Backend: "emulated", Tenant: "alice"}}}
	ad := &adopter{live: map[string]bool{}}
	svc := &Service{
		Restorer: &Restorer{WorkDir: t.TempDir(), Store: store, Reattach: &reattacher{nonce: "n-1"}, Backend: "emulated"},
		Sessions: ad, Listen: "10.1.0.2:7070",
	}
	cases := []struct {
		name, image string
		wantKind    errs.Kind
	}{
		{"first restore is adopted", "img-1", ""},
		{"second restore of a live session is refused", "img-1", errs.AlreadyExists},
		{"malformed id", "../etc", errs.InvalidArgument},
	}
	var adopted []int
	defer func() {
		for _, pid := range adopted {
			_ = kill(pid)
		}
	}()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res, err := svc.Restore(ctx, c.image)
			if c.wantKind != "" {
				if errs.KindOf(err) != c.wantKind {
					t.Fatalf("err %v, want kind %s", err, c.wantKind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Session != "s-00000000000b" || res.Listen != "10.1.0.2:7070" || res.PID <= 0 {
				t.Errorf("response %+v", res)
			}
			if got := ad.owners[res.Session]; got != "alice" {
				t.Errorf("adopted as %q's session, want the image's tenant alice", got)
			}
			h.Counting(res.PID)
			adopted = append(adopted, res.PID)
		})
	}
	// The refused restore's worker was killed and reaped: only the
	// adopted one is a child of ours.
	n := 0
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 && f[1] == fmt.Sprint(os.Getpid()) && f[0] != "Z" {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d live children, want 1 (the adopted restore)", n)
	}
}
