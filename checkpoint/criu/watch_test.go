package criu

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
)

// TestDumpStallLetsTheTaskGo reproduces, where this host's breakpoints do
// not trap, the dump that waits for them forever: an operator's own
// CRIU_FAULT replaces the 130 gpuctl would set, so 129 (FI_NO_MEMFD, the
// parasite loaded without a memfd, harmless) keeps the breakpoints. The
// watchdog must end the dump with ErrStalled and leave the task running.
// Where breakpoints work the dump simply succeeds.
func TestDumpStallLetsTheTaskGo(t *testing.T) {
	forced := !criubin.Breakpoints().Work
	t.Setenv("CRIU_FAULT", "129")
	bin, ctx, rep, pid := countingChild(t)
	err := Dump(ctx, pid, t.TempDir(), Options{Binary: bin, LogDir: t.TempDir(), LeaveRunning: true, Stall: 3 * time.Second})
	var st *criubin.ErrStalled
	switch {
	case !forced && err != nil:
		t.Fatalf("dump with working breakpoints: %v", err)
	case forced && !errors.As(err, &st):
		t.Fatalf("dump that waits for a breakpoint trap returned %v, want criubin.ErrStalled", err)
	}
	if forced {
		t.Logf("stopped: %v", err)
	}
	// Either way the task runs on.
	rep.counting(t, pid, "the dump")
}

// TestRestoreStallIsStopped restores an image where the restore waits
// for a breakpoint trap that never comes (an operator's CRIU_FAULT=129 on
// a host whose breakpoints do not trap): the watchdog ends the restore
// with criubin.ErrStalled instead of leaving the caller waiting for good.
// Where breakpoints work, the same restore simply succeeds.
func TestRestoreStallIsStopped(t *testing.T) {
	forced := !criubin.Breakpoints().Work
	bin, ctx, _, pid := countingChild(t)
	img := t.TempDir()
	if err := Dump(ctx, pid, img, Options{Binary: bin}); err != nil {
		t.Fatalf("dump: %v", err)
	}
	t.Setenv("CRIU_FAULT", "129")
	t0 := time.Now()
	self := os.Args[0]
	p, err := Restore(ctx, img, Options{Binary: bin, LogDir: t.TempDir(), Stall: 3 * time.Second,
		Stray: func(args []string) bool { return len(args) > 0 && args[0] == self }})
	if !forced {
		if err != nil {
			t.Fatalf("restore with working breakpoints: %v", err)
		}
		reap(t, p)
		return
	}
	var st *criubin.ErrStalled
	if !errors.As(err, &st) {
		t.Fatalf("restore that waits for a breakpoint trap returned %v, want criubin.ErrStalled", err)
	}
	if took := time.Since(t0); took > 30*time.Second {
		t.Errorf("the stalled restore took %v to end, with a 3 s bound", took)
	}
	t.Logf("stopped after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	// The task CRIU had put back ran its own code again, as our child:
	// Stray named it, and the restore killed it. (Or CRIU failed to stop
	// it, killed it itself and then stood still: nothing is left either.)
	if left := children(); len(left) > 0 {
		t.Errorf("children left running after the stalled restore: %v", left)
		for c := range left {
			_ = syscall.Kill(c, syscall.SIGKILL)
			_, _ = syscall.Wait4(c, nil, 0, nil)
		}
	}
	if !strings.Contains(err.Error(), "were killed") && !strings.Contains(err.Error(), "no task it had put back was left running") {
		t.Errorf("the error does not say what became of the task put back: %v", err)
	}
}
