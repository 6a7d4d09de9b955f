package session_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/childproc"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// DropClient lets a preempted session's client go at once, long before
// the grace period would; the client, retrying, is answered "preempted".
// A session that is not preempted keeps its client.
func TestDropClient(t *testing.T) {
	ts := startServer(t, time.Minute, nil)
	ctx := context.Background()
	cl, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	id, secret := cl.Welcome.SessionID, cl.Welcome.Secret
	if err := ts.m.DropClient(id); !errs.IsFailedPrecondition(err) {
		t.Fatalf("DropClient of a running session: %v, want failed precondition", err)
	}
	if err := ts.m.DropClient("s-000000000000"); !errs.IsNotFound(err) {
		t.Fatalf("DropClient of an unknown session: %v, want not found", err)
	}
	if n, err := cl.DeviceCount(); err != nil || n != 1 {
		t.Fatalf("the running session's client after a refused DropClient: %d %v", n, err)
	}

	w, err := ts.m.Begin(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ts.m.Dumped(id); err != nil {
		t.Fatal(err)
	}
	// As a preemption releases it.
	info, err := ts.m.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := childproc.Kill(info.WorkerPID); err != nil {
		t.Fatal(err)
	}
	if err := ts.m.Preempted(id, "img-000000000001", 1<<20, "request"); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := ts.m.DropClient(id); err != nil {
		t.Fatal(err)
	}
	// The held connection is closed now, not after the minute's grace.
	_ = cl.Conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := cl.DeviceCount(); err == nil {
		t.Fatal("the preempted session's client still has its connection")
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("the connection closed after %v", d)
	}
	back, err := dial(t, ts, wire.Hello{Token: testToken, Flags: wire.HelloResume, SessionID: id, Secret: secret})
	if back == nil || back.Welcome.Status != wire.StatusPreempted {
		t.Fatalf("returning client: %v %+v, want status preempted", err, back)
	}
}
