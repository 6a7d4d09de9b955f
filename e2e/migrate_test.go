// Package e2e holds the end-to-end tests: real gpuds in network
// namespaces, real CRIU, real client programs built with gcc against our
// cuda.h and libcuda, all on the emulated device.
package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The workload's shape in these tests: small enough for the emulated
// device to step quickly, long enough to migrate mid-run.
const (
	wlMiB   = 4
	wlSteps = 40
	wlSleep = 100 // ms
)

// migrateResult is gpuctl migrate --json's output.
type migrateResult struct {
	Session    string `json:"session"`
	To         string `json:"to"`
	Listen     string `json:"listen"`
	Image      string `json:"image"`
	Bytes      int64  `json:"bytes"`
	SentBytes  int64  `json:"sent_bytes"`
	DowntimeMS int64  `json:"downtime_ms"`
}

type checkpointResult struct {
	Image       string `json:"image"`
	Session     string `json:"session"`
	Bytes       int64  `json:"bytes"`
	StoredBytes int64  `json:"stored_bytes"`
}

// reference is the RESULT of an unmigrated run of the same workload.
func reference(t *testing.T, c *cluster) string {
	t.Helper()
	r := c.runWorkload(c.hosts["a"], wlMiB, wlSteps, 0)
	res := r.result(t, 3*time.Minute)
	if !strings.HasSuffix(res, " OK") {
		t.Fatalf("the unmigrated run is wrong: %s", res)
	}
	return res
}

// TestMigrateRoundTrip migrates a running workload A -> B -> A; its
// result must be bit-identical to a run without migration.
func TestMigrateRoundTrip(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	want := reference(t, c)

	r := c.runWorkload(a, wlMiB, wlSteps, wlSleep)
	r.waitStep(t, 5)
	s := c.session(a)
	var m1, m2 migrateResult
	if err := c.ctlJSON(a, &m1, "migrate", s.ID, "--to", b.api); err != nil {
		t.Fatalf("migrate A->B: %v", err)
	}
	if m1.Session != s.ID || m1.To != b.api || m1.SentBytes <= 0 || m1.DowntimeMS <= 0 {
		t.Errorf("migrate A->B reported %+v", m1)
	}
	if got := c.session(b); got.ID != s.ID {
		t.Errorf("B holds session %q, want %q", got.ID, s.ID)
	}
	r.waitStep(t, 15)
	if err := c.ctlJSON(b, &m2, "migrate", s.ID, "--to", a.api); err != nil {
		t.Fatalf("migrate B->A: %v", err)
	}
	// A already holds the first image's chunks: the way back sends less.
	if m2.SentBytes >= m1.SentBytes {
		t.Errorf("B->A sent %d bytes, A->B %d: chunks A had were sent again", m2.SentBytes, m1.SentBytes)
	}
	if got := r.result(t, 3*time.Minute); got != want {
		t.Errorf("migrated run: %q, unmigrated: %q", got, want)
	}
	t.Logf("downtime A->B %d ms (%d bytes sent), B->A %d ms (%d bytes sent)", m1.DowntimeMS, m1.SentBytes, m2.DowntimeMS, m2.SentBytes)
}

// TestExportKillImportRestore checkpoints a session on A, exports the
// image, kills A's gpud, imports and restores on B, and moves A's address
// to B: the client reconnects there and finishes correctly.
func TestExportKillImportRestore(t *testing.T) {
	c := newCluster(t)
	a, b := c.start("a"), c.start("b")
	want := reference(t, c)

	r := c.runWorkload(a, wlMiB, wlSteps, wlSleep)
	r.waitStep(t, 5)
	s := c.session(a)
	var ck checkpointResult
	if err := c.ctlJSON(a, &ck, "checkpoint", s.ID); err != nil {
		t.Fatalf("checkpoint: %v", err)
	}
	file := filepath.Join(c.work, "session.img")
	if _, err := c.ctl(a, "images", "export", ck.Image, file); err != nil {
		t.Fatalf("export: %v", err)
	}
	c.stop(a, false) // A dies
	if _, err := c.ctl(b, "images", "import", file); err != nil {
		t.Fatalf("import on B: %v", err)
	}
	var rs struct {
		Session string `json:"session"`
	}
	if err := c.ctlJSON(b, &rs, "restore", ck.Image); err != nil {
		t.Fatalf("restore on B: %v", err)
	}
	if rs.Session != s.ID {
		t.Errorf("restored session %q, want %q", rs.Session, s.ID)
	}
	// B takes over A's address; the client's reconnects reach B.
	c.in(a.ns, "ip", "addr", "del", a.ip+"/24", "dev", a.ifname)
	c.in(b.ns, "ip", "addr", "add", a.ip+"/24", "dev", b.ifname)
	if got := r.result(t, 3*time.Minute); got != want {
		t.Errorf("run restored on B: %q, unmigrated: %q", got, want)
	}
}

// TestLinkCut takes the client's link down for a few seconds mid-run.
func TestLinkCut(t *testing.T) {
	c := newCluster(t)
	a := c.start("a")
	want := reference(t, c)

	r := c.runWorkload(a, wlMiB, wlSteps, wlSleep)
	r.waitStep(t, 5)
	cl := c.hosts["c"]
	c.in(cl.ns, "ip", "link", "set", cl.ifname, "down")
	time.Sleep(3 * time.Second)
	c.in(cl.ns, "ip", "link", "set", cl.ifname, "up")
	if got := r.result(t, 3*time.Minute); got != want {
		t.Errorf("run with a cut link: %q, unmigrated: %q", got, want)
	}
}

// TestMigrateToDeadHost fails fast and cleanly; the session runs on.
func TestMigrateToDeadHost(t *testing.T) {
	c := newCluster(t)
	a := c.start("a")
	want := reference(t, c)

	r := c.runWorkload(a, wlMiB, wlSteps, wlSleep)
	r.waitStep(t, 5)
	s := c.session(a)
	dead := fmt.Sprintf("%s:%d", c.hosts["b"].ip, apiPort) // B's namespace, no gpud
	t0 := time.Now()
	out, err := c.ctl(a, "migrate", s.ID, "--to", dead)
	if err == nil {
		t.Fatalf("migration to a dead host succeeded: %s", out)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("migration to a dead host took %v to fail", took)
	}
	for _, w := range []string{dead, "precheck"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error does not mention %q: %v", w, err)
		}
	}
	if got := c.session(a); got.ID != s.ID || got.State == "stopped" {
		t.Errorf("session on A after the failed migration: %+v", got)
	}
	if got := r.result(t, 3*time.Minute); got != want {
		t.Errorf("run after a failed migration: %q, unmigrated: %q", got, want)
	}
}

// TestIdleCheckpointsDedup checkpoints an idle session twice: the second
// checkpoint stores at most 10% new bytes.
func TestIdleCheckpointsDedup(t *testing.T) {
	c := newCluster(t)
	a := c.start("a")
	r := c.runWorkload(a, 64, 0, 600000) // 64 MiB, held idle
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(r.output(), "workload:") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	s := c.session(a)
	var c1, c2 checkpointResult
	if err := c.ctlJSON(a, &c1, "checkpoint", s.ID, "--leave-running"); err != nil {
		t.Fatalf("first checkpoint: %v", err)
	}
	if err := c.ctlJSON(a, &c2, "checkpoint", s.ID, "--leave-running"); err != nil {
		t.Fatalf("second checkpoint: %v", err)
	}
	if c1.Bytes < 64<<20 {
		t.Errorf("first image is %d bytes; it should hold the 64 MiB of device memory", c1.Bytes)
	}
	if c2.StoredBytes*10 > c2.Bytes {
		t.Errorf("second checkpoint stored %d new bytes of %d (> 10%%)", c2.StoredBytes, c2.Bytes)
	}
	t.Logf("first: %d bytes, %d stored; second: %d bytes, %d stored", c1.Bytes, c1.StoredBytes, c2.Bytes, c2.StoredBytes)
}
