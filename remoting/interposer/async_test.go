package interposer_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/remoting/interposer/testserver"
)

func asynctest(ctx context.Context, t *testing.T, srv *testserver.Server, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(build(t), "asynctest"), args...)
	cmd.Env = append(os.Environ(), "GPUCTL_SERVER="+srv.Addr(), "GPUCTL_TOKEN=secret-token", "GPUCTL_RECONNECT_TIMEOUT=5")
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// TestAsyncCopies runs streams of page-locked uploads, kernels and
// downloads and checks their data and the order in which completion
// becomes visible (testdata/asynctest.c); the statistics show that the
// asynchronous copies made no round trip.
func TestAsyncCopies(t *testing.T) {
	srv := startServer(t)
	build(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	statsFile := filepath.Join(t.TempDir(), "stats.json")
	out, err := asynctest(ctx, t, srv, []string{"GPUCTL_STATS=" + statsFile}, "check").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("PASS check")) {
		t.Fatalf("asynctest check: %v\n%s", err, out)
	}
	st := readStats(t, statsFile)
	// The program's synchronous downloads: four after the reuse check
	// and one into pageable memory. Every other download is deferred and
	// every upload queued.
	if got := st.RoundTrips["MemcpyDtoH"]; got != 5 {
		t.Errorf("%d device-to-host copies waited for their reply, want the program's 5 synchronous ones", got)
	}
	if got := st.Async["MemcpyDtoH"]; got < 20 {
		t.Errorf("%d device-to-host copies were deferred, want at least 20", got)
	}
	if got := st.RoundTrips["MemcpyHtoD"]; got != 0 {
		t.Errorf("%d host-to-device copies waited, want none", got)
	}
}

// TestAsyncCopiesThreads runs rounds on four threads at once, with cut
// connections, and again under ThreadSanitizer: the deferred downloads
// share the reply reader with the other threads' synchronous calls.
func TestAsyncCopiesThreads(t *testing.T) {
	for _, tsan := range []bool{false, true} {
		t.Run(fmt.Sprintf("tsan=%v", tsan), func(t *testing.T) {
			exe := filepath.Join(build(t), "asynctest")
			if tsan {
				if testing.Short() {
					t.Skip("slow")
				}
				exe = filepath.Join(buildTSan(t), "asynctest")
			}
			srv := startServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, exe, "threads", "4", "8")
			cmd.Env = append(os.Environ(), "GPUCTL_SERVER="+srv.Addr(), "GPUCTL_TOKEN=secret-token", "GPUCTL_RECONNECT_TIMEOUT=5")
			out, done := startCombined(t, cmd)
			drops := 0
			var err error
			for waiting := true; waiting; {
				select {
				case err = <-done:
					waiting = false
				case <-time.After(30 * time.Millisecond):
					drops += srv.DropAfterProgress()
				}
			}
			if err != nil || strings.Contains(out.String(), "ThreadSanitizer") || !strings.Contains(out.String(), "PASS threads") {
				t.Fatalf("asynctest threads: %v\n%s", err, out.String())
			}
			t.Logf("%d drops", drops)
		})
	}
}

// TestAsyncCopiesReplay cuts the connection, or moves the session between
// two servers, while copies are in flight: each round's data must be
// exact, the first download of a buffer included, whose source later
// queued work overwrites (a resend must replay the data first read).
func TestAsyncCopiesReplay(t *testing.T) {
	for _, mode := range []string{"drops", "moves"} {
		t.Run(mode, func(t *testing.T) {
			a, b := startServer(t), startServer(t)
			build(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := asynctest(ctx, t, a, nil, "replay", "40")
			out, done := startCombined(t, cmd)
			events := 0
			var err error
			for from, to := a, b; ; {
				select {
				case err = <-done:
				case <-time.After(15 * time.Millisecond):
					if mode == "drops" {
						events += a.DropAfterProgress()
					} else if from.Sessions() == 1 {
						from.MoveTo(to)
						events++
						from, to = to, from
					}
					continue
				}
				break
			}
			if err != nil || !strings.Contains(out.String(), "PASS replay") {
				t.Fatalf("asynctest replay: %v\n%s", err, out.String())
			}
			if events == 0 || !strings.Contains(out.String(), "reconnect") && !strings.Contains(out.String(), "moved to") {
				t.Fatalf("%d %s; the test proved nothing\n%s", events, mode, out.String())
			}
			t.Logf("%d %s", events, mode)
		})
	}
}
