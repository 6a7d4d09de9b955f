package e2e

import (
	"testing"
	"time"
)

// TestPreemptAndResume is what a scheduler does to a low-priority session:
// checkpoint it without --leave-running (the worker and its device memory
// are released, the client stalls), keep it off the GPU for a while, then
// restore it on the same host. The client must finish as if nothing had
// happened.
func TestPreemptAndResume(t *testing.T) {
	w := newWorld(t, false)
	want := w.reference()

	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)

	var ck checkpointResult
	w.ctlJSON(w.a, &ck, "checkpoint", s.ID)
	if ck.Session != s.ID || ck.Image == "" || ck.Bytes <= 0 {
		t.Fatalf("checkpoint reported %+v", ck)
	}
	if got := w.find(w.a, s.ID); got.State != "stopped" {
		t.Errorf("session after a checkpoint that released it: %+v, want stopped", got)
	}
	time.Sleep(3 * time.Second) // preempted: nothing of it runs

	var rs struct {
		Session string `json:"session"`
	}
	w.ctlJSON(w.a, &rs, "restore", ck.Image)
	if rs.Session != s.ID {
		t.Errorf("restored session %q, want %q", rs.Session, s.ID)
	}
	if got := w.result(<-run); got != want {
		t.Errorf("preempted and resumed run: %q, unmigrated: %q", got, want)
	}
}
