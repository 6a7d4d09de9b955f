package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// afterGoodbye is the client library's line for a call made after the
// program's goodbye: something used the device later at exit than the
// library's own teardown, and was refused.
const afterGoodbye = "after the program's exit ended its session"

// TestSessionEndsAtExit: a program that exits normally says goodbye and
// its session, worker included, is gone from gpud within a second, with
// every exit-time call answered first; a forked child's exit says nothing
// for its parent, whose session goes on serving it; a program killed
// with SIGKILL says nothing either, and its session waits detached for
// the grace period, as one whose connection was cut.
func TestSessionEndsAtExit(t *testing.T) {
	c := harness.New(t)
	const grace = 3 * time.Second
	host := c.NewHost("gpu-a", harness.HostOptions{Args: []string{"--grace", grace.String()}})
	client := c.NewNode("client")
	prog := c.CompileC(filepath.Join(c.Build.Root, "e2e/harness/testdata/exits.c"))

	for _, mode := range []string{"exit", "fork"} {
		t.Run(mode, func(t *testing.T) {
			r := client.RunClient(host, time.Minute, nil, prog, mode)
			if r.Code != 0 || !strings.Contains(r.Stdout, "exits: "+mode+" ok") || strings.Contains(r.Stderr, afterGoodbye) {
				t.Fatalf("exits %s: exit %d after %v\nstdout: %s\nstderr: %s", mode, r.Code, r.Duration, r.Stdout, r.Stderr)
			}
			waitNoSessions(t, host, time.Second)
		})
	}

	t.Run("SIGKILL", func(t *testing.T) {
		r := client.RunClient(host, time.Minute, nil, prog, "kill")
		killed := time.Now()
		if r.Code != 128+9 || !strings.Contains(r.Stdout, "killing myself") {
			t.Fatalf("exits kill: exit %d, want 137\nstdout: %s\nstderr: %s", r.Code, r.Stdout, r.Stderr)
		}
		time.Sleep(grace / 3)
		list := sessions(t, host)
		if len(list) != 1 || list[0]["state"] != "detached" {
			t.Fatalf("%v after SIGKILL: %v, want one detached session", time.Since(killed).Round(time.Millisecond), list)
		}
		waitNoSessions(t, host, grace+5*time.Second)
		if d := time.Since(killed); d < grace-200*time.Millisecond {
			t.Errorf("the killed program's session ended after %v, before the grace period of %v", d, grace)
		}
	})
}

// TestRuntimeSessionEndsAtExit: runtime-API programs, with static and
// shared cudart, whose last device work runs at exit (an atexit handler
// and cudart's own teardown, which releases the primary context and runs
// the context-local-storage destructors; or cudaDeviceReset before
// returning) get every such call answered, and their sessions are gone
// within a second of the exit.
func TestRuntimeSessionEndsAtExit(t *testing.T) {
	c := harness.New(t)
	nvcc := nvccDir(t, c.Build.Root)
	bins := compileRuntime(t, nvcc, filepath.Join(c.Build.Root, "e2e/runtime/testdata"), []runtimeProgram{{"exits", true}})
	host := c.NewHost("gpu-a", harness.HostOptions{Args: []string{"--grace", "30s"}})
	client := c.NewNode("client")
	for _, b := range bins {
		for _, mode := range []string{"teardown", "reset"} {
			t.Run(b.label+"/"+mode, func(t *testing.T) {
				r := client.RunClient(host, 2*time.Minute, nil, b.path, mode)
				want := []string{"exits ok"}
				if mode == "teardown" {
					want = append(want, "exits: at exit ok")
				}
				for _, w := range want {
					if r.Code != 0 || !strings.Contains(r.Stdout, w) || strings.Contains(r.Stderr, afterGoodbye) {
						t.Fatalf("exit %d after %v, want %q\nstdout: %s\nstderr: %s", r.Code, r.Duration, w, r.Stdout, r.Stderr)
					}
				}
				waitNoSessions(t, host, time.Second)
			})
		}
	}
}
