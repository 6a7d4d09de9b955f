package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// gcResult is what `gpuctl images gc --json` reports.
type gcResult struct {
	ChunksRemoved int `json:"chunks_removed"`
	PacksRemoved  int `json:"packs_removed"`
	OrphanFiles   int `json:"orphan_files"`
}

// cleanAfterGC collects h's store twice: the second collection must find
// nothing left (no chunk nor file that the first one missed), and every
// image must verify.
func (w *world) cleanAfterGC(host *harness.Host) {
	w.t.Helper()
	var g1, g2 gcResult
	w.ctlJSON(host, &g1, "images", "gc")
	w.ctlJSON(host, &g2, "images", "gc")
	if g2.ChunksRemoved != 0 || g2.PacksRemoved != 0 || g2.OrphanFiles != 0 {
		w.t.Errorf("a second gc still collected %+v", g2)
	}
	if out, err := w.ctl(host, "images", "verify"); err != nil {
		w.t.Errorf("verify after gc: %v\n%s", err, out)
	}
}

// onlyImage checks that host's store holds no image of session but good:
// failed checkpoints left none behind.
func (w *world) onlyImage(host *harness.Host, session, good string) {
	w.t.Helper()
	var imgs []struct {
		ID      string `json:"id"`
		Session string `json:"session"`
	}
	w.ctlJSON(host, &imgs, "images", "ls")
	for _, im := range imgs {
		if im.Session == session && im.ID != good {
			w.t.Errorf("image %s of a failed checkpoint of %s is in the store", im.ID, session)
		}
	}
}

// TestWorkerKilledMidSave kills a session's worker while a checkpoint
// saves its device memory: the checkpoint fails naming the session, no
// image of it is left, and the session's last good image restores.
func TestWorkerKilledMidSave(t *testing.T) {
	// The idle session's second checkpoint would reuse the first one's
	// dump and save only what changed, done before the kill lands: this
	// gpud dumps every time, so that the save is the long one.
	w := newWorldWith(t, false, harness.HostOptions{Args: []string{"--reuse-dump=false"}})
	old := w.sessions(w.a)
	run := w.start(w.a, w.workload, 256, 0, 60000)
	s := w.session(w.a, old...)
	time.Sleep(4 * time.Second) // the fill is done
	var good checkpointResult
	w.ctlJSON(w.a, &good, "checkpoint", s.ID, "--leave-running")
	var pid int
	var ss []struct {
		ID  string `json:"id"`
		PID int    `json:"worker_pid"`
	}
	out, err := w.ctl(w.a, "sessions", "--json")
	if err != nil || json.Unmarshal([]byte(out), &ss) != nil {
		t.Fatalf("sessions: %v: %s", err, out)
	}
	for _, x := range ss {
		if x.ID == s.ID {
			pid = x.PID
		}
	}
	if pid <= 0 {
		t.Fatalf("no worker pid for %s in %s", s.ID, out)
	}
	// A stop-and-copy checkpoint that saves all 256 MiB (no
	// --leave-running: the session's base is the good image, but the
	// worker is killed long before it is done hashing).
	done := make(chan error, 1)
	go func() {
		_, err := w.ctl(w.a, "checkpoint", s.ID)
		done <- err
	}()
	time.Sleep(60 * time.Millisecond)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill worker %d: %v", pid, err)
	}
	err = <-done
	if err == nil {
		t.Fatal("the checkpoint succeeded although its worker was killed")
	}
	if !strings.Contains(err.Error(), s.ID) {
		t.Errorf("error does not name session %s: %v", s.ID, err)
	}
	w.onlyImage(w.a, s.ID, good.Image)
	_ = run // the client lost its session; it is ended with the test
	w.cleanAfterGC(w.a)
	var rs struct {
		Session string `json:"session"`
	}
	w.ctlJSON(w.a, &rs, "restore", good.Image)
	if rs.Session != s.ID {
		t.Errorf("restored %q from the good image, want %s", rs.Session, s.ID)
	}
	t.Logf("checkpoint with its worker killed: %v", err)
}

// TestCorruptBlock flips a byte of a stored block: verify names the
// image, a restore fails with one error naming the image and the step,
// and once the image is removed gc leaves a clean store.
func TestCorruptBlock(t *testing.T) {
	w := newWorld(t, false)
	old := w.sessions(w.a)
	run := w.start(w.a, w.workload, 16, 0, 60000)
	s := w.session(w.a, old...)
	time.Sleep(2 * time.Second)
	var ck checkpointResult
	w.ctlJSON(w.a, &ck, "checkpoint", s.ID) // the session now lives in the image
	_ = run                                 // (its client waits; it is ended with the test)
	packs, _ := filepath.Glob(filepath.Join(w.a.StateDir, "blobs", "packs", "*.pack"))
	var big string
	var size int64
	for _, p := range packs {
		if fi, err := os.Stat(p); err == nil && fi.Size() > size {
			big, size = p, fi.Size()
		}
	}
	if size < 16<<20 {
		t.Fatalf("no pack holds the session's 16 MiB (largest %s, %d bytes)", big, size)
	}
	f, err := os.OpenFile(big, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	at := size / 2 // among the device memory's blocks, which are most of the pack
	if _, err := f.ReadAt(b, at); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, at); err != nil {
		t.Fatal(err)
	}
	f.Close()

	out, err := w.ctl(w.a, "images", "verify", ck.Image)
	if err == nil || !strings.Contains(err.Error()+out, ck.Image) {
		t.Errorf("verify of the damaged image: %v\n%s", err, out)
	}
	// This host kept the session's device memory after the checkpoint
	// (devstore.Keeper.Stash), which a restore here would use instead of
	// the store; a restart drops it, so the restore reads the damage.
	w.a = w.c.Restart(w.a)
	out, err = w.ctl(w.a, "restore", ck.Image)
	if err == nil {
		t.Fatalf("restore of a damaged image succeeded: %s", out)
	}
	for _, want := range []string{ck.Image, "step"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("restore error does not mention %q: %v", want, err)
		}
	}
	if strings.Count(err.Error(), "\n") > 2 {
		t.Errorf("restore error is not one error: %v", err)
	}
	if _, err := w.ctl(w.a, "images", "rm", ck.Image); err != nil {
		t.Fatal(err)
	}
	w.cleanAfterGC(w.a)
	t.Logf("restore of a damaged image: %v", err)
}

// TestParkedCheckpointFaults fails a checkpoint that leaves the session
// running at each step around its park: before the dump (the worker takes
// its parked memory back without the snapshot), and after the resume (the
// snapshot's save, the store). Each fails with one error naming the
// session and the step, leaves the session running and no image of it;
// the next checkpoint parks again and the program finishes as if nothing
// had happened.
func TestParkedCheckpointFaults(t *testing.T) {
	w, fp, want, run, s := faultedRun(t, false)
	for _, c := range []struct{ point, says string }{
		{"checkpoint/detach", "detach"},
		{"checkpoint/dump", "dump"},
		{"checkpoint/save", "not stored"},
		{"checkpoint/store", "not stored"},
	} {
		arm(t, fp, c.point+" fail")
		out, err := w.ctl(w.a, "checkpoint", s.ID, "--leave-running")
		arm(t, fp, "")
		if err == nil {
			t.Fatalf("%s: the checkpoint succeeded: %s", c.point, out)
		}
		for _, want := range []string{s.ID, c.says} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: the error does not say %q: %v", c.point, want, err)
			}
		}
		var ss []sessionInfo
		w.ctlJSON(w.a, &ss, "sessions")
		for _, x := range ss {
			if x.ID == s.ID && x.State != "running" {
				t.Errorf("%s: the session is %s after the failed checkpoint, want running", c.point, x.State)
			}
		}
	}
	var ck checkpointResult
	w.ctlJSON(w.a, &ck, "checkpoint", s.ID, "--leave-running")
	if !ck.has("park") || !ck.has("resume.unpark") {
		t.Errorf("the checkpoint after the failed ones did not park: %+v", ck.Steps)
	}
	w.onlyImage(w.a, s.ID, ck.Image)
	if got := w.result(<-run); got != want {
		t.Errorf("after four failed checkpoints and a good one: %q, never checkpointed: %q", got, want)
	}
	w.cleanAfterGC(w.a)
}

// faultedRun starts a world whose gpud a reads failpoints from fp, and on
// a a long run of the stateful client, whose unfaulted result is want.
func faultedRun(t *testing.T, withB bool) (w *world, fp, want string, run <-chan harness.Result, s sessionInfo) {
	t.Helper()
	fp = filepath.Join(t.TempDir(), "failpoints")
	w = newWorldWith(t, withB, harness.HostOptions{Env: []string{"GPUD_FAILPOINTS=" + fp}})
	const steps = 80
	want = w.result(<-w.start(w.a, w.stateful, wlMiB, steps, 0))
	old := w.sessions(w.a)
	run = w.start(w.a, w.stateful, wlMiB, steps, wlSleep)
	s = w.session(w.a, old...)
	time.Sleep(500 * time.Millisecond)
	return w, fp, want, run, s
}
