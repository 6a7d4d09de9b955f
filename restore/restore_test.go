package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/checkpointtest"
	"github.com/gpuctl/gpuctl/checkpoint/criu"
	"github.com/gpuctl/gpuctl/checkpoint/proctest"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

func TestMain(m *testing.M) { proctest.Main(m) }

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
	meta := images.Meta{Session: "s-00000000000a", Backend: "emulated", AttachNonce: "n-1", GPUs: gpus}
	noNonce := meta
	noNonce.AttachNonce = ""
	cuda := meta
	cuda.Backend = "cuda"
	store := checkpointtest.NewImages(t)
	for _, img := range []struct {
		id, dir string
		meta    images.Meta
	}{{"img-good", good, meta}, {"img-broken", broken, meta}, {"img-nononce", good, noNonce}, {"img-cuda", good, cuda}} {
		if err := store.Put(img.id, img.dir, img.meta); err != nil {
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
			calls := &checkpointtest.Calls{}
			calls.Fail("reattach", c.attachErr)
			ra := &checkpointtest.Reattacher{Calls: calls, Nonce: "n-1"}
			rs := &checkpointtest.Resumer{ResumeErr: c.resumeErr, CheckErr: c.checkErr}
			r := &Restorer{WorkDir: t.TempDir(), Store: store, Resumer: rs, Reattach: ra, Backend: "emulated"}
			res, err := r.Restore(ctx, c.image)
			if c.wantStep != "" {
				checkpointtest.WantFailedStep(t, err, c.wantStep, c.wantKind, errs.Image(c.image))
				// Whatever CRIU restored was killed and reaped.
				for _, pid := range ra.PIDs() {
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
			if g := rs.GPUs(); len(g) != 1 || g[0].UUID != "GPU-e" {
				t.Errorf("backend resume got GPUs %+v, want the image's", g)
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

func TestRestoreService(t *testing.T) {
	h := proctest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	child := h.Start(false)
	dump := t.TempDir()
	if err := criu.Dump(ctx, child.Process.Pid, dump, criu.Options{}); err != nil {
		t.Fatal(err)
	}
	store := checkpointtest.NewImages(t)
	if err := store.Put("img-1", dump, images.Meta{Session: "s-00000000000b", AttachNonce: "n-1", Backend: "emulated", Tenant: "alice"}); err != nil {
		t.Fatal(err)
	}
	tab := checkpointtest.NewSessions()
	svc := &Service{
		Restorer: &Restorer{WorkDir: t.TempDir(), Store: store, Reattach: &checkpointtest.Reattacher{Nonce: "n-1"}, Backend: "emulated"},
		Sessions: tab, Listen: "10.1.0.2:7070",
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
			if got := tab.Owner(res.Session); got != "alice" {
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

// TestIsWorkerOf: a stalled restore kills only a worker of the image's
// session (remoting/worker's command line), nothing else gpud runs.
func TestIsWorkerOf(t *testing.T) {
	const id = "s-0123456789ab"
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"/usr/bin/gpud", "worker", "--backend", "cuda", "--device", "0", "--session", id}, true},
		{[]string{"/usr/bin/gpud", "worker", "--backend", "cuda", "--session", id, "--seed", "x"}, true},
		{[]string{"/usr/bin/gpud", "worker", "--session", "s-999999999999"}, false},
		{[]string{"/usr/bin/gpud", "--session", id}, false},
		{[]string{"/usr/bin/gpud", "worker", "--session"}, false},
		{[]string{"sleep", "10"}, false},
		{nil, false},
	} {
		if got := isWorkerOf(tc.args, id); got != tc.want {
			t.Errorf("isWorkerOf(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
