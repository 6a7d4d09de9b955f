// Package e2e holds the end-to-end tests: real gpuds in network
// namespaces (package harness), real CRIU, real client programs built with
// gcc against our cuda.h and libcuda, all on the emulated device.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// The stateful client (e2e/cprogs/stateful.c) in these tests: small
// enough for the emulated device to step quickly, long enough to act on
// mid-run.
const (
	wlMiB   = 1
	wlSteps = 24
	wlSleep = 100 // ms between steps
)

type migrateResult struct {
	Session   string `json:"session"`
	To        string `json:"to"`
	Image     string `json:"image"`
	Bytes     int64  `json:"bytes"`
	SentBytes int64  `json:"sent_bytes"`
	// The process image's chunks went to B while A stored them; the
	// push then carried little more than the manifest.
	StreamedBytes int64 `json:"streamed_bytes"`
	PushBytes     int64 `json:"push_bytes"`
	DowntimeMS    int64 `json:"downtime_ms"`
	// Memory: the rounds were staged in B's memory only, and the image
	// stored and pushed after B ran the session.
	Memory     bool   `json:"memory"`
	ImageError string `json:"image_error"`
	Rounds     []struct {
		Blocks    int   `json:"blocks"`
		Bytes     int64 `json:"bytes"`
		SentBytes int64 `json:"sent_bytes"`
	} `json:"rounds"`
	TargetSteps []struct {
		Step string `json:"step"`
	} `json:"target_steps"`
	FreezeSteps []struct {
		Step string `json:"step"`
	} `json:"freeze_steps"`
	// Ahead: B restored the session from this image's dump before the
	// freeze, which reused it.
	Ahead      string `json:"ahead"`
	AheadError string `json:"ahead_error"`
}

// targetHas and freezeHas report whether the target's restore and the
// freeze ran step.
func (m migrateResult) targetHas(step string) bool {
	for _, s := range m.TargetSteps {
		if s.Step == step {
			return true
		}
	}
	return false
}

func (m migrateResult) freezeHas(step string) bool {
	for _, s := range m.FreezeSteps {
		if s.Step == step {
			return true
		}
	}
	return false
}

// prepared says whether the target restored the session ahead of its
// image (its restore's steps end in "prepared").
func (m migrateResult) prepared() bool {
	for _, s := range m.TargetSteps {
		if s.Step == "prepared" {
			return true
		}
	}
	return false
}

type checkpointResult struct {
	Image       string `json:"image"`
	Session     string `json:"session"`
	Bytes       int64  `json:"bytes"`
	StoredBytes int64  `json:"stored_bytes"`
	StallMS     int64  `json:"stall_ms"`
	DurationMS  int64  `json:"duration_ms"`
	MemBytes    int64  `json:"mem_bytes"`
	MemSent     int64  `json:"mem_sent_bytes"`
	MemCopied   int64  `json:"mem_copied_bytes"`
	ProcessOf   string `json:"process_of"`
	Steps       []struct {
		Step string `json:"step"`
	} `json:"steps"`
}

// has reports whether the checkpoint ran step.
func (c checkpointResult) has(step string) bool {
	for _, s := range c.Steps {
		if s.Step == step {
			return true
		}
	}
	return false
}

type sessionInfo struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

// world is one test's hosts A and B (sharing a token, so they migrate to
// each other), a client node and the compiled client programs.
type world struct {
	t        *testing.T
	c        *harness.Cluster
	a, b     *harness.Host
	client   *harness.Node
	stateful string // e2e/cprogs/stateful.c: prints "RESULT <checksum>"
	workload string // e2e/demo/workload.c: can hold its memory idle
	env      []string
}

func newWorld(t *testing.T, withB bool, bArgs ...string) *world {
	t.Helper()
	return newWorldWith(t, withB, harness.HostOptions{}, bArgs...)
}

// newWorldWith is newWorld with host a started with aOpts (its token file
// is the world's).
func newWorldWith(t *testing.T, withB bool, aOpts harness.HostOptions, bArgs ...string) *world {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("the end-to-end tests compile their client with gcc; run make deps")
	}
	c := harness.New(t)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(fmt.Sprintf("e2e-%d\n", time.Now().UnixNano())), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, c: c}
	aOpts.TokenFile = tok
	w.a = c.NewHost("a", aOpts)
	if withB {
		w.b = c.NewHost("b", harness.HostOptions{TokenFile: tok, Args: bArgs})
	}
	w.client = c.NewNode("client")
	w.stateful = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	w.workload = c.CompileC(filepath.Join(c.Build.Root, "e2e/demo/workload.c"))
	w.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx")}
	w.requireRoutes(w.a)
	return w
}

// requireRoutes skips when this gpud build does not serve the checkpoint
// routes at all (the mux's plain 404, not a session that is not found):
// the parts are built separately and wired into gpud last.
func (w *world) requireRoutes(h *harness.Host) {
	w.t.Helper()
	_, err := w.ctl(h, "checkpoint", "s-000000000000")
	if err != nil && strings.Contains(err.Error(), "HTTP 404") {
		w.t.Skipf("gpud does not serve POST /v1/sessions/{id}/checkpoint in this build: %v", err)
	}
}

func (w *world) ctl(h *harness.Host, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	return h.Gpuctl(ctx, args...)
}

func (w *world) ctlJSON(h *harness.Host, v any, args ...string) {
	w.t.Helper()
	out, err := w.ctl(h, append(args, "--json")...)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		w.t.Fatalf("gpuctl %s --json: %v: %q", strings.Join(args, " "), err, out)
	}
}

// start runs prog MIB STEPS SLEEP_MS on h in the background.
func (w *world) start(h *harness.Host, prog string, mib, steps, sleepMS int) <-chan harness.Result {
	ch := make(chan harness.Result, 1)
	go func() {
		ch <- w.client.RunClient(h, 4*time.Minute, w.env, prog, fmt.Sprint(mib), fmt.Sprint(steps), fmt.Sprint(sleepMS))
	}()
	return ch
}

// reference is the RESULT line of an unmigrated run of the stateful client.
func (w *world) reference() string {
	w.t.Helper()
	return w.result(<-w.start(w.a, w.stateful, wlMiB, wlSteps, 0))
}

// result checks that a run succeeded and returns its RESULT line; the
// workload's own verdict (" OK") must be good too.
func (w *world) result(r harness.Result) string {
	w.t.Helper()
	if r.Code != 0 {
		w.t.Fatalf("client exited %d\nstdout:\n%s\nstderr:\n%s", r.Code, r.Stdout, r.Stderr)
	}
	for _, l := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(l, "RESULT ") {
			if strings.Contains(l, " BAD") {
				w.t.Fatalf("the client's result does not check out: %s", l)
			}
			return l
		}
	}
	w.t.Fatalf("client printed no RESULT line:\n%s", r.Stdout)
	return ""
}

// sessions lists h's sessions.
func (w *world) sessions(h *harness.Host) []sessionInfo {
	w.t.Helper()
	var ss []sessionInfo
	out, err := w.ctl(h, "sessions", "--json")
	if err != nil {
		w.t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), &ss); err != nil {
		w.t.Fatalf("gpuctl sessions --json: %v: %q", err, out)
	}
	return ss
}

// session waits until h lists a session that is not in old (a session of
// an earlier run may still be listed while it ends) and returns it.
func (w *world) session(h *harness.Host, old ...sessionInfo) sessionInfo {
	w.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		for _, s := range w.sessions(h) {
			if !slices.ContainsFunc(old, func(o sessionInfo) bool { return o.ID == s.ID }) {
				return s
			}
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no new session on %s", h.Name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// find returns h's session id, or fails the test.
func (w *world) find(h *harness.Host, id string) sessionInfo {
	w.t.Helper()
	for _, s := range w.sessions(h) {
		if s.ID == id {
			return s
		}
	}
	w.t.Fatalf("%s does not list session %s", h.Name, id)
	return sessionInfo{}
}

// TestMigrateRoundTrip migrates a running workload A -> B -> A; its
// result must be bit-identical to a run without migration. A -> B is a
// memory pre-copy (the default), B -> A goes through the stores (B runs
// with --durable-precopy), streaming the process image as it is stored.
func TestMigrateRoundTrip(t *testing.T) {
	w := newWorld(t, true, "--durable-precopy")
	want := w.reference()

	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)
	var m1, m2 migrateResult
	w.ctlJSON(w.a, &m1, "migrate", s.ID, "--to", w.b.API())
	if m1.Session != s.ID || m1.To != w.b.API() || m1.SentBytes <= 0 || m1.DowntimeMS <= 0 {
		t.Errorf("migrate A->B reported %+v", m1)
	}
	if !m1.Memory || m1.StreamedBytes != 0 {
		t.Errorf("migrate A->B: memory pre-copy %v, %d bytes streamed; want a memory pre-copy, whose image follows the adoption", m1.Memory, m1.StreamedBytes)
	}
	// Its image was stored after the adoption and pushed to B.
	if m1.Image == "" || m1.ImageError != "" {
		t.Errorf("migrate A->B left no image (%q)", m1.ImageError)
	} else if out, err := w.ctl(w.b, "images", "ls", "--json"); err != nil || !strings.Contains(out, m1.Image) {
		t.Errorf("B does not list the migration's image %s (%v): %s", m1.Image, err, out)
	}
	// The device memory went ahead while the session ran: the first
	// round sent all of it.
	if len(m1.Rounds) == 0 || m1.Rounds[0].Bytes < wlMiB<<20 {
		t.Errorf("migrate A->B reported pre-copy rounds %+v; want a first round of the session's %d MiB", m1.Rounds, wlMiB)
	}
	if got := w.find(w.b, s.ID); got.State == "stopped" {
		t.Errorf("session on B after the migration: %+v", got)
	}
	// B restored the dump while A stored and pushed the image.
	if !m1.prepared() {
		t.Errorf("migrate A->B: the target did not restore the session ahead of its image; its steps: %+v", m1.TargetSteps)
	}
	time.Sleep(time.Second)
	w.ctlJSON(w.b, &m2, "migrate", s.ID, "--to", w.a.API())
	// A still holds the first image's chunks: beside the stream (which
	// sends the whole process image as it is stored), the way back sends
	// little more than the session's buffer, which the client rewrites
	// every step: once in the round, and again when a step lands between
	// the round and the freeze.
	if rest := m2.SentBytes - m2.StreamedBytes; rest >= wlMiB<<21+512<<10 {
		t.Errorf("B->A sent %d bytes beside the stream, the session holds %d MiB: chunks A had were sent again", rest, wlMiB)
	}
	if m2.Memory || m2.StreamedBytes <= 0 || m2.PushBytes >= m2.StreamedBytes {
		t.Errorf("migrate B->A (durable): memory %v, streamed %d bytes of the process image and pushed %d after the freeze; want most of it streamed", m2.Memory, m2.StreamedBytes, m2.PushBytes)
	}
	if !m2.prepared() {
		t.Errorf("migrate B->A: the target did not restore the session ahead of its image; its steps: %+v", m2.TargetSteps)
	}
	// B took A->B's image, pushed after the adoption, as the session's
	// parent: B's image of the way back names it.
	if out, err := w.ctl(w.a, "images", "inspect", m2.Image, "--json"); err != nil || !strings.Contains(out, `"parent": "`+m1.Image+`"`) {
		t.Errorf("B->A's image %s does not name A->B's %s as its parent (%v): %.400s", m2.Image, m1.Image, err, out)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("migrated run: %q, unmigrated: %q", got, want)
	}
	t.Logf("downtime A->B %d ms (%d of %d bytes sent, %d streamed, %d pushed, rounds %+v), B->A %d ms (%d bytes sent, %d streamed, %d pushed, rounds %+v)",
		m1.DowntimeMS, m1.SentBytes, m1.Bytes, m1.StreamedBytes, m1.PushBytes, m1.Rounds, m2.DowntimeMS, m2.SentBytes, m2.StreamedBytes, m2.PushBytes, m2.Rounds)
}

// TestMigratePreparedFaults fails a migration after its target began to
// restore the session from the dump (faults at the push and at the
// restore step, while or after the target prepares it): each fails with
// one error naming the session and the step, leaves the session running
// on A and no worker of it on B. The migration after them is prepared
// on B, and the program finishes as if it had never moved.
func TestMigratePreparedFaults(t *testing.T) {
	w, fp, want, run, s := faultedRun(t, true)
	onB := map[uint64]bool{netnsInode(t, w.b.NS): true}
	for _, step := range []string{"push", "restore"} {
		arm(t, fp, "migrate/"+step+" fail")
		out, err := w.ctl(w.a, "migrate", s.ID, "--to", w.b.API())
		arm(t, fp, "")
		if err == nil {
			t.Fatalf("%s: the migration succeeded: %s", step, out)
		}
		for _, want := range []string{s.ID, step} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the error does not say %q: %v", step, want, err)
			}
		}
		if got := w.find(w.a, s.ID); got.State != "running" && got.State != "detached" {
			t.Errorf("%s: session on A after the failed migration: %+v", step, got)
		}
		// B kills what it prepared when A drops the staging.
		deadline := time.Now().Add(10 * time.Second)
		for len(workerPIDs(w.c.Build.Gpud, onB)[s.ID]) > 0 {
			if time.Now().After(deadline) {
				t.Errorf("%s: a worker of the session still runs on B after the failed migration: %v", step, workerPIDs(w.c.Build.Gpud, onB)[s.ID])
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The last one's image fails after B took the session over: the
	// session runs on B all the same, and the reply says why there is no
	// image.
	arm(t, fp, "migrate/image fail")
	var m migrateResult
	w.ctlJSON(w.a, &m, "migrate", s.ID, "--to", w.b.API())
	arm(t, fp, "")
	if !m.prepared() {
		t.Errorf("the migration after the failed ones was not prepared on B; its steps: %+v", m.TargetSteps)
	}
	if !m.Memory || m.Image != "" || !strings.Contains(m.ImageError, "migrate/image") {
		t.Errorf("a memory pre-copy whose image failed reported memory %v, image %q, image_error %q", m.Memory, m.Image, m.ImageError)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("after two failed migrations and a good one: %q, never migrated: %q", got, want)
	}
}

// TestExportKillImportRestore checkpoints a session on A, exports the
// image, kills A's gpud, imports and restores on B, and gives B A's
// address: the client reconnects there and finishes correctly.
func TestExportKillImportRestore(t *testing.T) {
	// B listens on every address, so that A's address reaches it.
	w := newWorld(t, true, "--listen", "0.0.0.0:"+harness.ListenPort)
	want := w.reference()

	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)
	var ck checkpointResult
	w.ctlJSON(w.a, &ck, "checkpoint", s.ID)
	file := filepath.Join(t.TempDir(), "session.img")
	if _, err := w.ctl(w.a, "images", "export", ck.Image, file); err != nil {
		t.Fatalf("export: %v", err)
	}
	w.a.Kill()
	if _, err := w.ctl(w.b, "images", "import", file); err != nil {
		t.Fatalf("import on B: %v", err)
	}
	var rs struct {
		Session string `json:"session"`
	}
	w.ctlJSON(w.b, &rs, "restore", ck.Image)
	if rs.Session != s.ID {
		t.Errorf("restored session %q, want %q", rs.Session, s.ID)
	}
	for _, args := range [][]string{
		{"-n", w.a.NS, "addr", "del", w.a.IP + "/24", "dev", "eth0"},
		{"-n", w.b.NS, "addr", "add", w.a.IP + "/24", "dev", "eth0"},
		{"-n", w.client.NS, "neigh", "flush", "all"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	if got := w.result(<-run); got != want {
		t.Errorf("run restored on B: %q, unmigrated: %q", got, want)
	}
}

// TestLinkCut takes the client's link down for a few seconds mid-run.
func TestLinkCut(t *testing.T) {
	w := newWorld(t, false)
	want := w.reference()

	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	w.session(w.a, old...)
	time.Sleep(time.Second)
	<-w.client.CutLink(3 * time.Second)
	if got := w.result(<-run); got != want {
		t.Errorf("run with a cut link: %q, unmigrated: %q", got, want)
	}
}

// TestMigrateToDeadHost fails fast and cleanly; the session runs on.
func TestMigrateToDeadHost(t *testing.T) {
	w := newWorld(t, false)
	want := w.reference()
	dead := w.c.NewNode("dead") // a host with no gpud

	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)
	to := dead.IP + ":" + harness.APIPort
	t0 := time.Now()
	out, err := w.ctl(w.a, "migrate", s.ID, "--to", to)
	if err == nil {
		t.Fatalf("migration to a dead host succeeded: %s", out)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("migration to a dead host took %v to fail", took)
	}
	for _, want := range []string{to, "precheck"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
	if got := w.find(w.a, s.ID); got.State != "running" && got.State != "detached" {
		t.Errorf("session on A after the failed migration: %+v", got)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("run after a failed migration: %q, unmigrated: %q", got, want)
	}
}

// TestRestoreFromHostMemory: a checkpoint that ends a session keeps its
// saved device memory in the host's memory, and a restore of the image
// on that host reloads the worker from there instead of the store; the
// program finishes as if it had never stopped.
func TestRestoreFromHostMemory(t *testing.T) {
	w := newWorld(t, false)
	want := w.reference()
	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(800 * time.Millisecond)
	var ck checkpointResult
	w.ctlJSON(w.a, &ck, "checkpoint", s.ID)
	var rs struct {
		Session string `json:"session"`
		Steps   []struct {
			Step string `json:"step"`
		} `json:"steps"`
	}
	w.ctlJSON(w.a, &rs, "restore", ck.Image)
	host := false
	for _, st := range rs.Steps {
		host = host || st.Step == "memread.host"
	}
	if rs.Session != s.ID || !host {
		t.Errorf("restore of %s: session %q, steps %+v; want %s reloaded from host memory (memread.host)", ck.Image, rs.Session, rs.Steps, s.ID)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("checkpointed, restored from host memory: %q, never stopped: %q", got, want)
	}
}

// TestIdleCheckpointsDedup checkpoints an idle session twice: the second
// checkpoint stores at most 10% new bytes, and reuses the first one's dump
// of the worker (it changed nothing). A third checkpoint ends the session,
// reusing that dump again, and the session restored from it finishes with
// its memory intact: the restored worker took the third checkpoint's
// protocol state.
func TestIdleCheckpointsDedup(t *testing.T) {
	w := newWorld(t, false)
	old := w.sessions(w.a)
	run := w.start(w.a, w.workload, 64, 0, 20000) // 64 MiB, then idle for 20 s
	s := w.session(w.a, old...)
	time.Sleep(2 * time.Second) // the fill is done
	var c1, c2 checkpointResult
	w.ctlJSON(w.a, &c1, "checkpoint", s.ID, "--leave-running")
	w.ctlJSON(w.a, &c2, "checkpoint", s.ID, "--leave-running")
	if c1.Bytes < 64<<20 {
		t.Errorf("the first image is %d bytes; it must hold the 64 MiB of device memory", c1.Bytes)
	}
	if c2.StoredBytes*10 > c2.Bytes {
		t.Errorf("the second checkpoint stored %d new bytes of %d (> 10%%)", c2.StoredBytes, c2.Bytes)
	}
	// The worker saved its device memory itself: the second checkpoint
	// copied only what changed (the idle client changes nothing), and
	// the client stalled no longer than the whole checkpoint took.
	if c2.MemBytes < 64<<20 || c2.MemSent*100 > c2.MemBytes {
		t.Errorf("the second checkpoint found %d of %d bytes of device memory changed (want <= 1%%)", c2.MemSent, c2.MemBytes)
	}
	if c2.StallMS <= 0 || c2.StallMS > c2.DurationMS {
		t.Errorf("second checkpoint: stall %d ms, duration %d ms", c2.StallMS, c2.DurationMS)
	}
	// The first ran on from parked memory (a snapshot held outside the
	// worker across the dump), and the snapshot was saved after. The
	// second dumped nothing: it saved what changed on the device and
	// kept the first's dump.
	for _, step := range []string{"park", "resume.unpark", "dump", "save", "store"} {
		if !c1.has(step) {
			t.Errorf("checkpoint %s has no step %q: %+v", c1.Image, step, c1.Steps)
		}
	}
	if c1.ProcessOf != "" || c2.ProcessOf != c1.Image || !c2.has("reuse") || !c2.has("save") || c2.has("dump") || c2.has("park") {
		t.Errorf("the second checkpoint reused the dump of %q (want %s): %+v", c2.ProcessOf, c1.Image, c2.Steps)
	}
	// gpud kept the first save in host memory: the second copied only
	// the changed blocks into it, not the session's whole memory.
	if c1.MemCopied < 64<<20 || c2.MemCopied*100 > c2.MemBytes {
		t.Errorf("the checkpoints copied %d and then %d of %d bytes of device memory (want all, then <= 1%%)", c1.MemCopied, c2.MemCopied, c2.MemBytes)
	}
	t.Logf("first: %d bytes, %d stored, stall %d ms of %d; second: %d bytes, %d stored, stall %d ms of %d, %d of %d bytes of device memory changed",
		c1.Bytes, c1.StoredBytes, c1.StallMS, c1.DurationMS, c2.Bytes, c2.StoredBytes, c2.StallMS, c2.DurationMS, c2.MemSent, c2.MemBytes)
	var c3 checkpointResult
	w.ctlJSON(w.a, &c3, "checkpoint", s.ID)
	if c3.ProcessOf != c1.Image || c3.has("dump") {
		t.Errorf("the checkpoint that ended the session reused the dump of %q (want %s): %+v", c3.ProcessOf, c1.Image, c3.Steps)
	}
	var rs struct {
		Session string `json:"session"`
		Steps   []struct {
			Step string `json:"step"`
		} `json:"steps"`
	}
	w.ctlJSON(w.a, &rs, "restore", c3.Image)
	state := false
	for _, st := range rs.Steps {
		state = state || st.Step == "state"
	}
	if rs.Session != s.ID || !state {
		t.Errorf("restore of %s: session %q, steps %+v; want %s with the image's protocol state (step state)", c3.Image, rs.Session, rs.Steps, s.ID)
	}
	w.result(<-run) // and the session's memory is still intact
}

// TestMigrateAhead: a session checkpointed once and idle since migrates
// with its target restoring the image's dump before the freeze; the
// freeze reuses the dump (no dump, no driver checkpoint), hands over the
// changed blocks and the protocol state, and the target catches the
// prepared worker up. The session goes on bit-exact on B, B's next
// checkpoint reuses the same dump, and it migrates back the same way.
func TestMigrateAhead(t *testing.T) {
	w := newWorld(t, true)
	old := w.sessions(w.a)
	run := w.start(w.a, w.workload, 64, 0, 25000) // 64 MiB, then idle for 25 s
	s := w.session(w.a, old...)
	time.Sleep(2 * time.Second) // the fill is done
	var c1 checkpointResult
	w.ctlJSON(w.a, &c1, "checkpoint", s.ID, "--leave-running")
	var m1 migrateResult
	w.ctlJSON(w.a, &m1, "migrate", s.ID, "--to", w.b.API())
	if m1.Ahead != c1.Image || m1.AheadError != "" || !m1.Memory {
		t.Errorf("migrate A->B: ahead of %q (error %q), memory %v; want the target to restore image %s's dump ahead of a memory pre-copy's freeze", m1.Ahead, m1.AheadError, m1.Memory, c1.Image)
	}
	if m1.freezeHas("dump") || m1.freezeHas("suspend") || !m1.freezeHas("reuse") {
		t.Errorf("migrate A->B: the freeze dumped the worker: %+v", m1.FreezeSteps)
	}
	if !m1.targetHas("catchup") || !m1.targetHas("prepared") {
		t.Errorf("migrate A->B: the target did not catch its ahead restore up: %+v", m1.TargetSteps)
	}
	if m1.Image == "" || m1.ImageError != "" {
		t.Errorf("migrate A->B left no image (%q)", m1.ImageError)
	}
	t.Logf("A->B: downtime %d ms, freeze %+v, target %+v", m1.DowntimeMS, m1.FreezeSteps, m1.TargetSteps)
	// B runs the process that image's dump holds: its checkpoint
	// reuses the dump too.
	time.Sleep(time.Second)
	var c2 checkpointResult
	w.ctlJSON(w.b, &c2, "checkpoint", s.ID, "--leave-running")
	if c2.ProcessOf != c1.Image || c2.has("dump") {
		t.Errorf("checkpoint on B reused the dump of %q (want %s): %+v", c2.ProcessOf, c1.Image, c2.Steps)
	}
	var m2 migrateResult
	w.ctlJSON(w.b, &m2, "migrate", s.ID, "--to", w.a.API())
	if m2.Ahead != c2.Image || m2.freezeHas("dump") || !m2.targetHas("catchup") {
		t.Errorf("migrate B->A: ahead of %q (want %s; error %q), freeze %+v, target %+v", m2.Ahead, c2.Image, m2.AheadError, m2.FreezeSteps, m2.TargetSteps)
	}
	r := <-run
	w.result(r) // and the session's memory is intact
	// The client, idle throughout, reads A's moved notice when it wakes
	// (B has sent it back to A by then, which B's welcome says).
	if !strings.Contains(r.Stderr, "session moved to "+w.b.Listen()) {
		t.Errorf("the client was not told the session moved to %s:\n%s", w.b.Listen(), r.Stderr)
	}
}

// TestMigrateAheadBusy: a checkpointed session that keeps running
// migrates with its target restoring the image's dump ahead of the
// freeze. One that only launches kernels and copies since (the stateful
// client rewrites its buffer every step) is still what the dump holds:
// the freeze reuses it and the target copies in the changed blocks. One
// that loads a module every step is not: the freeze dumps the worker and
// the target's normal prepare replaces the one made ahead. Either way
// the session finishes bit-exact on B.
func TestMigrateAheadBusy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		env   []string
		ahead bool
	}{
		{"launches and copies", nil, true},
		{"loads modules", []string{"STATEFUL_LOAD=floatmath"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, true)
			want := w.reference()
			w.env = append(w.env, tc.env...)
			old := w.sessions(w.a)
			run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
			s := w.session(w.a, old...)
			time.Sleep(300 * time.Millisecond)
			var c1 checkpointResult
			w.ctlJSON(w.a, &c1, "checkpoint", s.ID, "--leave-running")
			var m migrateResult
			w.ctlJSON(w.a, &m, "migrate", s.ID, "--to", w.b.API())
			if tc.ahead {
				if m.Ahead != c1.Image || m.freezeHas("dump") || !m.targetHas("catchup") {
					t.Errorf("migrated with ahead %q (want %s; error %q), freeze %+v, target %+v; want the dump reused and the target caught up", m.Ahead, c1.Image, m.AheadError, m.FreezeSteps, m.TargetSteps)
				}
			} else if m.Ahead != "" || !m.freezeHas("dump") || !m.prepared() || m.targetHas("catchup") {
				t.Errorf("migrated with ahead %q, freeze %+v, target %+v; want a dump and the normal prepare", m.Ahead, m.FreezeSteps, m.TargetSteps)
			}
			if got := w.result(<-run); got != want {
				t.Errorf("migrated run: %q, unmigrated: %q", got, want)
			}
		})
	}
}
