package criu

import (
	"errors"
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
