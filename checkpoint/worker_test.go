package checkpoint_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/checkpointtest"
	"github.com/gpuctl/gpuctl/checkpoint/proctest"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/restore"
)

// The test binary doubles as the worker binary (`gpud worker ...`).
func init() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(worker.Main(os.Args[2:]))
	}
}

// handle adapts a real worker handle the way gpud's session table does,
// for a session with no client attached.
type handle struct{ h *worker.Handle }

func (w handle) PID() int                         { return w.h.PID() }
func (w handle) Resume(ctx context.Context) error { return w.h.Resume(ctx, nil, nil, 0) }
func (w handle) Quiesce(ctx context.Context) error {
	_, err := w.h.Quiesce(ctx)
	return err
}
func (w handle) Detach(ctx context.Context, n string) error { return w.h.Detach(ctx, n) }

type reattacher struct{ opts worker.Options }

func (r reattacher) Reattach(ctx context.Context, pid int, nonce string) (checkpoint.Worker, error) {
	h, err := worker.Reattach(ctx, pid, nonce, nil, r.opts)
	if err != nil {
		return nil, err
	}
	return handle{h}, nil
}

// TestRealWorker runs the pipelines on a real worker process (emulated
// backend): checkpoint leaving it running, then two restores of the image
// beside it, each reattached through its nonce and reporting the session.
func TestRealWorker(t *testing.T) {
	proctest.NeedCRIU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const id = "s-0000000000e1"
	opts := worker.Options{Backend: "emulated", Device: "0", SessionID: id, Exe: os.Args[0], EmulatedMemBytes: 64 << 20}
	h, err := worker.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(func() { h.Kill(); _ = h.Wait() })

	store := checkpointtest.NewImages(t)
	p := &checkpoint.Pipeline{WorkDir: t.TempDir(), Store: store, Reattach: reattacher{opts}, Backend: "emulated"}
	fr, err := p.Checkpoint(ctx, checkpoint.Request{Session: id, Worker: handle{h}})
	if err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	w, err := fr.Resume(ctx)
	if err != nil {
		t.Fatalf("resume after checkpoint: %v", err)
	}
	orig := w.(handle).h
	if st, err := orig.Stats(ctx); err != nil || st.SessionID != id {
		t.Fatalf("original after resume: %+v, %v", st, err)
	}

	r := &restore.Restorer{WorkDir: t.TempDir(), Store: store, Reattach: reattacher{opts}, Backend: "emulated"}
	var pids []int
	for i := 0; i < 2; i++ {
		res, err := r.Restore(ctx, fr.Image)
		if err != nil {
			t.Fatalf("restore %d: %v", i+1, err)
		}
		rh := res.Worker.(handle).h
		st, err := rh.Stats(ctx)
		if err != nil || st.SessionID != id || res.Session != id {
			t.Fatalf("restored worker %d reports %+v, %v", res.PID, st, err)
		}
		if err := rh.Resume(ctx, nil, nil, 0); err != nil {
			t.Fatalf("resume restored worker: %v", err)
		}
		pids = append(pids, res.PID)
	}
	if pids[0] == pids[1] || pids[0] == h.PID() {
		t.Fatalf("pids %v beside original %d", pids, h.PID())
	}
	// The original still answers, beside both copies.
	if _, err := orig.Stats(ctx); err != nil {
		t.Fatalf("original stopped answering: %v", err)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		if got, err := syscall.Wait4(pid, &ws, 0, nil); got != pid {
			t.Errorf("reap restored worker %d: %v", pid, err)
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !os.IsNotExist(err) {
			t.Errorf("restored worker %d still in /proc", pid)
		}
	}
}
