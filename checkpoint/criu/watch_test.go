package criu

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
)

// TestWatch: a call whose log or images keep growing runs on; one whose
// files stand still is cancelled with ErrStalled naming the log's last
// line.
func TestWatch(t *testing.T) {
	for _, tc := range []struct {
		name    string
		growing bool
	}{{"writing", true}, {"silent", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			log := filepath.Join(dir, "dump.log")
			if err := os.WriteFile(log, []byte("(00.01) first\n(00.02) Waiting for 7 to trap\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, stop := watch(context.Background(), "dump", log, dir, 300*time.Millisecond, 20*time.Millisecond)
			defer stop()
			end := time.Now().Add(time.Second)
			for time.Now().Before(end) && ctx.Err() == nil {
				if tc.growing {
					f, err := os.OpenFile(filepath.Join(dir, "pages-1.img"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
					if err != nil {
						t.Fatal(err)
					}
					_, _ = f.Write(make([]byte, 4096))
					f.Close()
				}
				time.Sleep(50 * time.Millisecond)
			}
			var st *ErrStalled
			switch {
			case tc.growing && ctx.Err() != nil:
				t.Fatalf("a call that kept writing was stopped: %v", context.Cause(ctx))
			case !tc.growing && !errors.As(context.Cause(ctx), &st):
				t.Fatalf("a silent call was not stopped within a second (cause %v)", context.Cause(ctx))
			case !tc.growing && st.Where != "(00.02) Waiting for 7 to trap":
				t.Errorf("stall names the log line %q", st.Where)
			}
		})
	}
}

// TestDumpStallLetsTheTaskGo reproduces, where this host's breakpoints do
// not trap, the dump that waits for them forever: an operator's own
// CRIU_FAULT replaces the 130 gpuctl would set, so 129 (FI_NO_MEMFD, the
// parasite loaded without a memfd, harmless) keeps the breakpoints. The
// watchdog must end the dump with ErrStalled and leave the task running.
// Where breakpoints work the dump simply succeeds.
func TestDumpStallLetsTheTaskGo(t *testing.T) {
	bin := needCRIU(t)
	forced := !criubin.Breakpoints().Work
	t.Setenv("CRIU_FAULT", "129")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, addr := listenReports(t)
	child := startChild(t, addr)
	pid := child.Process.Pid
	rep.next(t, pid, 10*time.Second)
	err := Dump(ctx, pid, t.TempDir(), Options{Binary: bin, LogDir: t.TempDir(), LeaveRunning: true, Stall: 3 * time.Second})
	var st *ErrStalled
	switch {
	case !forced && err != nil:
		t.Fatalf("dump with working breakpoints: %v", err)
	case forced && !errors.As(err, &st):
		t.Fatalf("dump that waits for a breakpoint trap returned %v, want ErrStalled", err)
	}
	if forced {
		t.Logf("stopped: %v", err)
	}
	// Either way the task runs on: it goes on counting.
	a := rep.next(t, pid, 10*time.Second)
	if b := rep.next(t, pid, 10*time.Second); b <= a {
		t.Fatalf("the task stopped counting after the dump (%d, then %d)", a, b)
	}
}
