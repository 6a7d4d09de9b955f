package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// clientStats is what the client library writes with GPUCTL_STATS=FILE.
type clientStats struct {
	RoundTrips map[string]int `json:"round_trips"`
}

func readClientStats(t *testing.T, path string) clientStats {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the client wrote no statistics: %v", err)
	}
	var s clientStats
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("statistics %q: %v", b, err)
	}
	return s
}

// cached reports whether host h's module cache holds the image in file.
func cached(t *testing.T, stateDir, file string) bool {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	_, err = os.Stat(filepath.Join(stateDir, "modules", hex.EncodeToString(sum[:])))
	return err == nil
}

// TestCheckpointRestorePoolAndVMM checkpoints a session whose device
// memory is VMM mappings (2 MiB allocations back to back) and pool
// memory, stops it, and restores it on the same host: the client goes on
// and its result equals an unmigrated run's.
func TestCheckpointRestorePoolAndVMM(t *testing.T) {
	w := newWorld(t, false)
	// The reference keeps its state in plain allocations.
	want := w.result(<-w.start(w.a, w.stateful, 4, wlSteps, 0))
	w.env = append(w.env, "STATEFUL_MEMORY=vmm+pool")

	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, 4, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)
	var ck checkpointResult
	w.ctlJSON(w.a, &ck, "checkpoint", s.ID)
	if ck.Bytes < 4<<20 {
		t.Errorf("the image is %d bytes; it must hold the 4 MiB of mapped memory", ck.Bytes)
	}
	time.Sleep(500 * time.Millisecond) // the client stalls meanwhile
	var rs struct {
		Session string `json:"session"`
	}
	w.ctlJSON(w.a, &rs, "restore", ck.Image)
	if rs.Session != s.ID {
		t.Errorf("restored session %q, want %q", rs.Session, s.ID)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("restored run: %q, unmigrated: %q", got, want)
	}
}

// TestMigrateModuleCache migrates a session that keeps loading a large
// module: each host's first load uploads the image into that host's
// cache, later loads send its hash only, and a new process on the target
// host finds the image there.
func TestMigrateModuleCache(t *testing.T) {
	w := newWorld(t, true)
	want := w.reference()
	ptx := filepath.Join(w.c.Build.Root, "e2e/kernels/ptx/floatmath.sm_75.ptx")
	stats := filepath.Join(t.TempDir(), "stats.json")
	w.env = append(w.env, "STATEFUL_MEMORY=vmm+pool", "STATEFUL_LOAD=floatmath", "GPUCTL_STATS="+stats)

	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)
	var m migrateResult
	w.ctlJSON(w.a, &m, "migrate", s.ID, "--to", w.b.API())
	if got := w.result(<-run); got != want {
		t.Errorf("migrated run: %q, unmigrated: %q", got, want)
	}
	st := readClientStats(t, stats)
	if st.RoundTrips["ModuleUpload"] != 2 || st.RoundTrips["ModuleLoadCached"] != wlSteps {
		t.Errorf("%d uploads and %d loads by hash over %d steps on two hosts; want 2 and %d: %v",
			st.RoundTrips["ModuleUpload"], st.RoundTrips["ModuleLoadCached"], wlSteps, wlSteps, st.RoundTrips)
	}
	for _, h := range []struct {
		name, dir string
	}{{"A", w.a.StateDir}, {"B", w.b.StateDir}} {
		if !cached(t, h.dir, ptx) {
			t.Errorf("host %s's module cache lacks the module", h.name)
		}
	}
	// A new process on B sends hashes only.
	if got := w.result(<-w.start(w.b, w.stateful, wlMiB, 3, 0)); !strings.HasPrefix(got, "RESULT ") {
		t.Fatalf("second run on B: %q", got)
	}
	if st := readClientStats(t, stats); st.RoundTrips["ModuleUpload"] != 0 || st.RoundTrips["ModuleLoadCached"] != 3 {
		t.Errorf("a second process on B: %v; want no uploads and 3 loads by hash", st.RoundTrips)
	}
}
