package interposer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/remoting/interposer/testserver"
	"github.com/gpuctl/gpuctl/remoting/modcache"
)

// stats is what GPUCTL_STATS=FILE writes at exit.
type stats struct {
	RoundTrips map[string]int `json:"round_trips"`
	Async      map[string]int `json:"async"`
	Total      int            `json:"total_round_trips"`
}

func readStats(t *testing.T, path string) stats {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the client wrote no statistics: %v", err)
	}
	var s stats
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("statistics %q: %v", b, err)
	}
	return s
}

func cachetest(ctx context.Context, t *testing.T, srv *testserver.Server, statsFile string, env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(build(t), "cachetest"), args...)
	cmd.Env = append(os.Environ(), "GPUCTL_SERVER="+srv.Addr(), "GPUCTL_TOKEN=secret-token", "GPUCTL_RECONNECT_TIMEOUT=5",
		"GPUCTL_STATS="+statsFile)
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

// TestClientCachesAnswerLocally asks the hot questions of a training step
// a thousand times: with the caches they cost a handful of round trips in
// all; without (GPUCTL_NO_CACHE) one each. The uncached case asks them a
// hundred times only: ten thousand round trips prove nothing more and take
// over a minute on a loaded machine.
func TestClientCachesAnswerLocally(t *testing.T) {
	srv := startServer(t)
	build(t) // outside the deadline, which is for the runs
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name     string
		env      []string
		rounds   int
		min, max int
	}{
		{"cached", nil, 1000, 1, 20},
		{"uncached", []string{"GPUCTL_NO_CACHE=1"}, 100, 100 * 10, 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "stats.json")
			out, err := cachetest(ctx, t, srv, f, tc.env, "hot", strconv.Itoa(tc.rounds)).CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("PASS hot")) {
				t.Fatalf("cachetest hot: %v\n%s", err, out)
			}
			s := readStats(t, f)
			if s.Total < tc.min || s.Total > tc.max {
				t.Fatalf("%d round trips for %d rounds of questions, want %d..%d: %v", s.Total, tc.rounds, tc.min, tc.max, s.RoundTrips)
			}
			t.Logf("%d round trips: %v", s.Total, s.RoundTrips)
		})
	}
}

// TestClientCachesRefreshAfterReconnect cuts the connection half-way: the
// answers stay the same, and the attributes are fetched again, once, by
// the first question after the reconnect.
func TestClientCachesRefreshAfterReconnect(t *testing.T) {
	srv := startServer(t)
	build(t) // outside the deadline, which is for the run
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := filepath.Join(t.TempDir(), "stats.json")
	cmd := cachetest(ctx, t, srv, f, []string{"GPUCTL_CACHETEST_PAUSE=1"}, "hot", "200")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "READY" {
		t.Fatalf("cachetest did not pause: %q\n%s", sc.Text(), stderr.String())
	}
	if srv.DropConnections() == 0 {
		t.Fatal("no connection to drop")
	}
	fmt.Fprintln(stdin)
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(rest.String(), "PASS hot") {
		t.Fatalf("cachetest hot: %v\n%s%s", err, rest.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "reconnected") {
		t.Fatalf("the client never reconnected:\n%s", stderr.String())
	}
	s := readStats(t, f)
	if got := s.RoundTrips["DeviceAttributes"]; got != 2 {
		t.Fatalf("attributes fetched %d times, want 2 (once per connection): %v", got, s.RoundTrips)
	}
}

// TestModuleUploadByHash loads modules of awkward sizes from two processes
// against a server with a module cache: the first uploads each, the
// second sends hashes only. The server checks every upload against its
// hash, so a wrong SHA-256 in the client fails the loads.
func TestModuleUploadByHash(t *testing.T) {
	mc, err := modcache.Open(t.TempDir(), 64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testserver.StartWith("127.0.0.1:0", "secret-token", nil, testserver.Options{ModuleCache: mc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const modules = 11
	// The first run hashes with the portable code, the second with the
	// CPU's SHA extensions where it has them: the second finding every
	// image proves the two agree.
	for i, want := range []int{modules, 0} {
		f := filepath.Join(t.TempDir(), "stats.json")
		var env []string
		if i == 0 {
			env = []string{"GPUCTL_SHA_PORTABLE=1"}
		}
		out, err := cachetest(ctx, t, srv, f, env, "sizes").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("PASS sizes")) {
			t.Fatalf("run %d: cachetest sizes: %v\n%s", i+1, err, out)
		}
		s := readStats(t, f)
		if s.RoundTrips["ModuleUpload"] != want || s.RoundTrips["ModuleLoadCached"] != modules || s.RoundTrips["ModuleLoad"] != 0 {
			t.Fatalf("run %d: %v; want %d uploads and %d loads by hash", i+1, s.RoundTrips, want, modules)
		}
		// The server keeps uploads beside the session's next calls:
		// wait for them before the next process looks.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if n, _ := mc.Stats(); n == modules || time.Now().After(deadline) {
				break
			}
		}
	}
	if n, _ := mc.Stats(); n != modules {
		t.Fatalf("the cache holds %d images, want %d", n, modules)
	}
	// Turned off, every load sends the image.
	f := filepath.Join(t.TempDir(), "stats.json")
	out, err := cachetest(ctx, t, srv, f, []string{"GPUCTL_NO_CACHE=1"}, "sizes").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("PASS sizes")) {
		t.Fatalf("cachetest sizes without the cache: %v\n%s", err, out)
	}
	if s := readStats(t, f); s.RoundTrips["ModuleLoad"] != modules {
		t.Fatalf("without the cache: %v", s.RoundTrips)
	}
}

// TestGraphReplayAcrossDrops replays a captured graph thousands of times
// while the connection is cut again and again: each replay's launches run
// exactly once.
func TestGraphReplayAcrossDrops(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := cachetest(ctx, t, srv, filepath.Join(t.TempDir(), "stats.json"), nil, "graph", "3000")
	out, done := startCombined(t, cmd)
	drops := 0
	var err error
	for waiting := true; waiting; {
		select {
		case err = <-done:
			waiting = false
		case <-time.After(15 * time.Millisecond):
			drops += srv.DropAfterProgress()
		}
	}
	if err != nil || !strings.Contains(out.String(), "PASS graph") {
		t.Fatalf("cachetest graph: %v\n%s", err, out.String())
	}
	t.Logf("%d connections dropped", drops)
}

// TestRuntimeSurfaceOnCaches runs the CUDA runtime's calls on top of the
// client's caches and module cache, twice against one server: the
// library's image goes up by hash (uploaded by the first process only),
// CUDA 13's context-taking queries and the occupancy calculator cost no
// round trip per call, and a CUkernel works in graphs and captures.
func TestRuntimeSurfaceOnCaches(t *testing.T) {
	mc, err := modcache.Open(t.TempDir(), 64<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testserver.StartWith("127.0.0.1:0", "secret-token", nil, testserver.Options{ModuleCache: mc})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, uploads := range []int{1, 0} {
		f := filepath.Join(t.TempDir(), "stats.json")
		out, err := cachetest(ctx, t, srv, f, nil, "runtime", "500").CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("PASS runtime")) {
			t.Fatalf("run %d: cachetest runtime: %v\n%s", i+1, err, out)
		}
		s := readStats(t, f)
		for op, want := range map[string]int{
			"ModuleUpload": uploads, "ModuleLoadCached": 1, "ModuleLoad": 0,
			"CtxDevice": 0, "DeviceAttribute": 0, "DeviceAttributes": 1, "PrimaryCtxState": 1,
		} {
			if got := s.RoundTrips[op]; got != want {
				t.Errorf("run %d: %d round trips of %s, want %d", i+1, got, op, want)
			}
		}
		// 500 rounds of four questions answered locally: what remains
		// are creations, loads, synchronisations and copies.
		if s.Total > 40 {
			t.Errorf("run %d: %d round trips in all, want at most 40", i+1, s.Total)
		}
		t.Logf("run %d: %d round trips: %v", i+1, s.Total, s.RoundTrips)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if n, _ := mc.Stats(); n == 1 || time.Now().After(deadline) {
				break
			}
		}
	}
}

// TestLaunchChecksCostNoRoundTrips: the client checks every launch
// against its device's limits, read from the attribute cache (filled with
// one DeviceAttributes) also under GPUCTL_NO_CACHE, and the function's,
// fetched by its first launch; the launches stay asynchronous.
func TestLaunchChecksCostNoRoundTrips(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const n = 300
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"cached", nil},
		{"uncached", []string{"GPUCTL_NO_CACHE=1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "stats.json")
			out, err := cachetest(ctx, t, srv, f, tc.env, "launches", fmt.Sprint(n)).CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("PASS launches")) {
				t.Fatalf("cachetest launches: %v\n%s", err, out)
			}
			s := readStats(t, f)
			for op, want := range map[string]int{"DeviceAttributes": 1, "DeviceAttribute": 0, "FuncGetAttribute": 2, "Launch": 0} {
				if got := s.RoundTrips[op]; got != want {
					t.Errorf("%d round trips of %s, want %d", got, op, want)
				}
			}
			if got := s.Async["Launch"]; got != n {
				t.Errorf("%d launches sent, want %d (the refused one never leaves the client)", got, n)
			}
			if s.Total > 25 {
				t.Errorf("%d round trips for %d launches, want at most 25: %v", s.Total, n, s.RoundTrips)
			}
		})
	}
}
