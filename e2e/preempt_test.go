package e2e

import (
	"encoding/json"
	"strings"
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

// TestFencing restores images that would make a session run twice, on one
// host, and sees each refused with a line that says why, while the session
// carries on and its client finishes with the unmigrated result:
//   - the image of a checkpoint that left the session running (the
//     session went on under the next epoch), once the session has been
//     preempted into a newer image;
//   - an image restored a second time, once the copy restored from it has
//     been preempted again.
//
// The latest image is restored every time, and the epoch grows by one at
// each checkpoint that leaves the session running and at each restore.
func TestFencing(t *testing.T) {
	w := newWorld(t, false)
	want := w.reference()
	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)

	epoch := func(want int) {
		t.Helper()
		out, err := w.ctl(w.a, "sessions", "--json")
		if err != nil {
			t.Fatal(err)
		}
		var ss []struct {
			ID    string `json:"id"`
			Epoch int    `json:"epoch"`
		}
		if err := json.Unmarshal([]byte(out), &ss); err != nil {
			t.Fatal(err)
		}
		for _, x := range ss {
			if x.ID == s.ID && x.Epoch != want {
				t.Errorf("session at epoch %d, want %d", x.Epoch, want)
			}
		}
	}
	restore := func(image string) error {
		_, err := w.ctl(w.a, "restore", image)
		return err
	}
	refused := func(image, why string) {
		t.Helper()
		err := restore(image)
		if err == nil || !strings.Contains(err.Error(), "fenced") || !strings.Contains(err.Error(), s.ID) {
			t.Fatalf("restore of %s (%s): %v, want a refusal that says fenced and names the session", image, why, err)
		}
		t.Logf("%s: %v", why, err)
	}

	var i1, i2, i3 checkpointResult
	epoch(1)
	w.ctlJSON(w.a, &i1, "checkpoint", s.ID, "--leave-running") // i1 at epoch 1, the session goes on at 2
	epoch(2)
	w.ctlJSON(w.a, &i2, "checkpoint", s.ID) // preempted into i2, at epoch 2
	refused(i1.Image, "the image of a checkpoint that left the session running")
	if err := restore(i2.Image); err != nil { // the session runs again at epoch 3
		t.Fatal(err)
	}
	epoch(3)
	time.Sleep(500 * time.Millisecond)
	w.ctlJSON(w.a, &i3, "checkpoint", s.ID) // preempted into i3, at epoch 3
	refused(i2.Image, "an image restored a second time")
	if err := restore(i3.Image); err != nil {
		t.Fatal(err)
	}
	epoch(4)
	if got := w.result(<-run); got != want {
		t.Errorf("fenced run: %q, unmigrated: %q", got, want)
	}
}
