package checkpoint_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/checkpointtest"
	"github.com/gpuctl/gpuctl/checkpoint/proctest"
	"github.com/gpuctl/gpuctl/errs"
)

func TestMain(m *testing.M) { proctest.Main(m) }

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
			t0 := time.Now()
			child := h.Start(c.tcp)
			pid := child.Process.Pid
			calls := &checkpointtest.Calls{}
			for op, err := range c.fail {
				calls.Fail(op, err)
			}
			w := checkpointtest.Worker{Pid: pid, Calls: calls}
			store := checkpointtest.NewImages(t)
			store.Fail = c.storeFail
			p := &checkpoint.Pipeline{WorkDir: t.TempDir(), Suspender: checkpointtest.Suspender{Calls: calls}, Store: store,
				Reattach: &checkpointtest.Reattacher{Calls: calls}, Host: "host-a", Backend: "emulated"}
			fr, err := p.Checkpoint(ctx, checkpoint.Request{Session: "s-000000000001", Worker: w, Parent: "img-0"})
			if got := calls.String(); got != c.wantCalls {
				t.Errorf("calls %q, want %q", got, c.wantCalls)
			}
			if c.wantStep != "" {
				checkpointtest.WantFailedStep(t, err, c.wantStep, c.wantKind, errs.Session("s-000000000001"))
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
			// A migration's downtime starts at the quiesce.
			if fr.Quiesced.Before(t0) || fr.Quiesced.After(time.Now()) || time.Since(fr.Quiesced) < time.Duration(fr.StallMS)*time.Millisecond {
				t.Errorf("quiesced at %v, stall %d ms, checkpoint from %v", fr.Quiesced, fr.StallMS, t0)
			}
			if m := store.Last(); m.Session != "s-000000000001" || m.Parent != "img-0" || m.AttachNonce != fr.Nonce || m.Host != "host-a" || !strings.HasPrefix(m.CRIU, "4.") || m.Kernel == "" {
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
			calls.Reset()
			if _, err := fr.Resume(ctx); err != nil {
				t.Fatalf("resume: %v", err)
			}
			if got := calls.String(); got != "reattach backend-resume resume" {
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
	calls := &checkpointtest.Calls{}
	w := checkpointtest.Worker{Pid: child.Process.Pid, Calls: calls}
	p := &checkpoint.Pipeline{WorkDir: t.TempDir(), Store: checkpointtest.NewImages(t), Reattach: &checkpointtest.Reattacher{Calls: calls}}
	fr, err := p.Checkpoint(ctx, checkpoint.Request{Session: "s-2", Worker: w})
	if err != nil {
		t.Fatal(err)
	}
	if got := calls.String(); got != "quiesce detach" {
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
	step := func(name string, doErr, undoErr error) checkpoint.Step {
		return checkpoint.Step{Name: name,
			Do:   func(context.Context) error { order = append(order, "do "+name); return doErr },
			Undo: func(context.Context) error { order = append(order, "undo "+name); return undoErr }}
	}
	ctx, cancel := context.WithCancel(context.Background())
	steps := []checkpoint.Step{
		step("a", nil, nil),
		step("b", nil, errors.New("b will not undo")),
		{Name: "c", Do: func(context.Context) error { cancel(); return errors.New("c broke") }},
		step("d", nil, nil),
	}
	timings, err := checkpoint.Run(ctx, nil, "checkpoint", errs.Session("s-3"), steps)
	if got := strings.Join(order, ", "); got != "do a, do b, undo b, undo a" {
		t.Errorf("order %q", got)
	}
	var se *checkpoint.StepError
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
