package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestTargetDiesAfterStaging kills the target of a live migration once
// it has staged the first pre-copy round's table: the migration fails
// with an error naming the session, the session runs on where it was
// and its client finishes bit-exact, and nothing of the migration is
// left in the source's store after gc.
func TestTargetDiesAfterStaging(t *testing.T) {
	w := newWorld(t, true)
	old := w.sessions(w.a)
	// 32 MiB held for 8 s: the client is still there when the migration
	// fails, then reads every word back and checks it.
	run := w.start(w.a, w.workload, 32, 0, 8000)
	s := w.session(w.a, old...)
	time.Sleep(time.Second) // the fill is done
	done := make(chan error, 1)
	go func() {
		_, err := w.ctl(w.a, "migrate", s.ID, "--to", w.b.API())
		done <- err
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(w.b.Log(), "action=chunks.stage") {
		select {
		case err := <-done:
			t.Fatalf("the migration ended before the target staged anything: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the target never staged a pre-copy round")
		}
		time.Sleep(5 * time.Millisecond)
	}
	w.b.Kill()
	err := <-done
	if err == nil {
		t.Fatal("the migration succeeded although its target died")
	}
	if !strings.Contains(err.Error(), s.ID) {
		t.Errorf("error does not name session %s: %v", s.ID, err)
	}
	if got := w.find(w.a, s.ID); got.State == "stopped" || got.State == "migrating" {
		t.Errorf("session %s is %s on the source after the failed migration", s.ID, got.State)
	}
	w.result(<-run)
	w.cleanAfterGC(w.a)
	t.Logf("migration with its target killed after staging: %v", err)
}
