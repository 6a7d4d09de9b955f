package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestMigrateToFullHost refuses, before the session is touched, a target
// whose device has less memory free than the session holds; the session
// runs on where it was, with its memory intact.
func TestMigrateToFullHost(t *testing.T) {
	w := newWorld(t, true, "--emulated-mem", "33554432") // B: a 32 MiB device
	old := w.sessions(w.a)
	run := w.start(w.a, w.workload, 64, 0, 6000) // 64 MiB, then idle for 6 s
	s := w.session(w.a, old...)
	time.Sleep(2 * time.Second) // the fill is done

	t0 := time.Now()
	out, err := w.ctl(w.a, "migrate", s.ID, "--to", w.b.API())
	if err == nil {
		t.Fatalf("migration to a full host succeeded: %s", out)
	}
	if took := time.Since(t0); took > 10*time.Second {
		t.Errorf("migration to a full host took %v to fail", took)
	}
	for _, want := range []string{"precheck", w.b.API(), "device memory free"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
	if got := w.find(w.a, s.ID); got.State != "running" && got.State != "detached" {
		t.Errorf("session on A after the refused migration: %+v", got)
	}
	if ss := w.sessions(w.b); len(ss) != 0 {
		t.Errorf("B lists sessions after a refused migration: %+v", ss)
	}
	w.result(<-run)
}
