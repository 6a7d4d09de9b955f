package e2e

import (
	"testing"
	"time"
)

// TestContextLimitsSurviveCheckpoint runs the stateful client with a
// stack limit of its own, which it reads back (cuCtxGetLimit through the
// interposer) at every step: a checkpoint that leaves the session running
// and a live migration to B must leave the program's limit as it set it,
// whatever the backend does with its reservation while the session is
// paused (the cuda backend trims it).
func TestContextLimitsSurviveCheckpoint(t *testing.T) {
	w := newWorld(t, true)
	w.env = append(w.env, "STATEFUL_STACK=4096")
	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)
	var ck checkpointResult
	w.ctlJSON(w.a, &ck, "checkpoint", s.ID, "--leave-running")
	time.Sleep(300 * time.Millisecond)
	var m migrateResult
	w.ctlJSON(w.a, &m, "migrate", s.ID, "--to", w.b.API())
	if got := w.find(w.b, s.ID); got.State == "stopped" {
		t.Errorf("session on B after the migration: %+v", got)
	}
	// The client fails a step whose limit reads back otherwise.
	w.result(<-run)
}
