package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/registry/registrytest"
	"github.com/gpuctl/gpuctl/session"
)

// node is one host's side of the cluster, with its own registry
// connection (which a partition closes).
type node struct {
	name string
	c    *cluster
	conn *registry.Client
	live bool // a worker serves the session here
}

func newNode(t *testing.T, ep, name string) *node {
	t.Helper()
	conn, err := registry.Dial(context.Background(), []string{ep}, registry.Options{DialTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	m, err := conn.Join(context.Background(), registry.Host{Name: name}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &node{name: name, conn: conn, c: &cluster{r: conn, member: m, host: name, log: slog.New(slog.DiscardHandler),
		claimed: map[string]bool{}, metrics: newOpsMetrics(nil)}}
}

// TestMigrationFaults drives a migration's ownership protocol — the calls
// migrate.Service makes through its Fence and the target's restore makes
// through admitRestore — between real registry clients, and at each step
// kills the source (it stops acting: no undo), partitions it from the
// registry (it goes on, but every registry call of its fails), or the
// target fails to restore. Then it checks the invariant: never
// two live copies; and, after the operator's recovery (restore the
// session's image wherever the registry allows), exactly one.
func TestMigrationFaults(t *testing.T) {
	ep := registrytest.Start(t)
	steps := []string{"precheck", "freeze", "push", "transfer", "restore", "moved"}
	for si, step := range steps {
		for _, fault := range []string{"kill", "partition", "target-fails"} {
			t.Run(step+"/"+fault, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				id := fmt.Sprintf("s-%012x", time.Now().UnixNano()&0xffffffffffff)
				a, b := newNode(t, ep, "a-"+id), newNode(t, ep, "b-"+id)
				const image = "img-0000000000aa"
				if err := a.c.admitRestore(ctx, id, image, 1); err != nil { // a runs the session
					t.Fatal(err)
				}
				a.live = true
				check := func(when string) {
					t.Helper()
					if a.live && b.live {
						t.Fatalf("%s: the session is live on both hosts", when)
					}
				}

				// The migration, with the source faulted at step si.
				frozen, transferred, restored := false, false, false
				faulted := false
				for i, s := range steps {
					if i == si && fault == "kill" {
						faulted = true
						break
					}
					if i == si && fault == "partition" {
						// a goes on with the migration, but can no longer
						// reach the registry.
						faulted = true
						a.conn.Close()
					}
					var err error
					switch s {
					case "freeze":
						frozen, a.live = true, false
					case "transfer":
						err = a.c.Handover(ctx, id, b.name, image)
						transferred = err == nil
					case "restore":
						if i == si && fault == "target-fails" {
							err = fmt.Errorf("restore failed on the target")
							break
						}
						if err = b.c.admitRestore(ctx, id, image, 1); err == nil {
							b.live, restored = true, true
						}
					}
					check("after " + s)
					if err != nil {
						// The source's undo: take ownership back before
						// resuming; if that cannot be confirmed, stay down.
						if transferred {
							if rerr := a.c.Reclaim(ctx, id, b.name); rerr != nil {
								break
							}
						}
						if frozen {
							a.live = true
						}
						break
					}
				}
				check("after the fault")
				_ = restored

				// A killed source comes back from its state dir: its
				// session is stopped there, and the reconciler records it
				// as in its image if the registry still has it live there.
				if faulted && fault == "kill" {
					a.live = false
					a.c.stopped(ctx, id)
				}
				check("after restart")

				// Recovery: if nothing runs, restore the image on each
				// host in turn; the registry lets exactly the right ones.
				if !a.live && !b.live {
					if err := b.c.admitRestore(ctx, id, image, 1); err == nil {
						b.live = true
					}
				}
				check("after recovery")
				// A second restore of the session anywhere is fenced.
				other := b
				if b.live {
					other = a
				}
				if other == a && fault == "partition" && faulted {
					a2 := newNode(t, ep, a.name) // a, reconnected
					other = a2
				}
				if err := other.c.admitRestore(ctx, id, image, 1); err == nil {
					t.Fatalf("a second live copy was admitted on %s", other.name)
				}
				if !a.live && !b.live {
					t.Fatal("no live copy after recovery")
				}
				cur, err := b.conn.Owner(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if want := map[bool]string{true: a.name, false: b.name}[a.live]; cur.Host != want || !cur.Live {
					t.Fatalf("registry says %s (live %v); the live copy is on %s", cur.Host, cur.Live, want)
				}
			})
		}
	}
}

// TestStaleImageFenced: the registry carries the session's epoch, so an
// image older than one a newer copy was restored from is refused on any
// host, while the latest is taken over; the local epoch alone could not
// see it, since the refusing host never ran the session.
func TestStaleImageFenced(t *testing.T) {
	ep := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := fmt.Sprintf("s-%012x", time.Now().UnixNano()&0xffffffffffff)
	a, b := newNode(t, ep, "a-"+id), newNode(t, ep, "b-"+id)
	for _, step := range []struct {
		n     *node
		image string
		epoch uint64
		stop  bool
	}{{a, "img-000000000001", 1, true}, {a, "img-000000000002", 2, true}} {
		if err := step.n.c.admitRestore(ctx, id, step.image, step.epoch); err != nil {
			t.Fatalf("restore %s on %s: %v", step.image, step.n.name, err)
		}
		step.n.c.stopped(ctx, id)
	}
	o, err := a.conn.Owner(ctx, id)
	if err != nil || o.Epoch != 2 || o.Live {
		t.Fatalf("record after two restores and stops on a: %+v, %v", o, err)
	}
	err = b.c.admitRestore(ctx, id, "img-000000000001", 1)
	if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "holds epoch 1") {
		t.Fatalf("restore of the epoch-1 image on b after epoch 2 ran on a: %v, want fenced", err)
	}
	if err := b.c.admitRestore(ctx, id, "img-000000000002", 2); err != nil {
		t.Fatalf("takeover from the latest image: %v", err)
	}
	if o, _ := b.conn.Owner(ctx, id); o.Host != b.name || !o.Live || o.Epoch != 2 {
		t.Errorf("record after b's takeover: %+v", o)
	}
}

// TestRestartRecordsDeadSessions: a gpud restarted after a crash has no
// record of the sessions whose workers died with it; the registry still
// has them live there. At its first reconciliation round it records them
// as in their image (or in none), so that they may be resumed and their
// clients are told the truth: wait for the image, or the session is gone.
func TestRestartRecordsDeadSessions(t *testing.T) {
	ep := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := fmt.Sprintf("s-%012x", time.Now().UnixNano()&0xffffffffffff)
	bare := fmt.Sprintf("s-%012x", (time.Now().UnixNano()+1)&0xffffffffffff)
	a := newNode(t, ep, "a-"+id)
	const image = "img-0000000000aa"
	if err := a.c.admitRestore(ctx, id, image, 1); err != nil { // restored from an image
		t.Fatal(err)
	}
	if _, err := a.conn.Claim(ctx, bare, a.name, true, "", 1); err != nil { // never checkpointed
		t.Fatal(err)
	}

	a2 := newNode(t, ep, a.name) // a, restarted: its session table is empty
	if loc, wait := a2.c.Locate(ctx, id); loc != "" || !strings.Contains(wait, "being restored") {
		t.Fatalf("before the first round: Locate = %q, %q; want a retry", loc, wait)
	}
	a2.c.adoptLive(ctx)
	m, err := session.NewManager(session.Config{Host: a.name})
	if err != nil {
		t.Fatal(err)
	}
	a2.c.reconcileOnce(ctx, m)
	for _, c := range []struct {
		id, image, wait string
	}{{id, image, "waits in image " + image}, {bare, "", ""}} {
		o, err := a2.conn.Owner(ctx, c.id)
		if err != nil || o.Host != a.name || o.Live || o.Image != c.image {
			t.Errorf("record of %s after the restart: %+v, %v; want owner %s, not live, image %q", c.id, o, err, a.name, c.image)
		}
		if loc, wait := a2.c.Locate(ctx, c.id); loc != "" || (c.wait == "") != (wait == "") || !strings.Contains(wait, c.wait) {
			t.Errorf("Locate(%s) = %q, %q; want wait %q", c.id, loc, wait, c.wait)
		}
	}

	// Not joined yet (the listener answers before the join): retry.
	cold := &cluster{host: "c", log: a.c.log, metrics: a.c.metrics}
	if loc, wait := cold.Locate(ctx, id); loc != "" || !strings.Contains(wait, "retry") {
		t.Errorf("Locate before joining = %q, %q; want a retry", loc, wait)
	}
}

// TestFailedRestoreGivesBack: a migration's target whose restore fails
// after the registry admitted it records the session as in its image
// again at once, so that the source takes it back and resumes it instead
// of leaving it live on a host that does not run it.
func TestFailedRestoreGivesBack(t *testing.T) {
	ep := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := fmt.Sprintf("s-%012x", time.Now().UnixNano()&0xffffffffffff)
	a, b := newNode(t, ep, "a-"+id), newNode(t, ep, "b-"+id)
	const image = "img-0000000000aa"
	if err := a.c.admitRestore(ctx, id, image, 1); err != nil {
		t.Fatal(err)
	}
	// A take-back of a handover that did not happen keeps the record.
	if err := a.c.Reclaim(ctx, id, b.name); err != nil {
		t.Fatalf("take-back of a session still owned here: %v", err)
	}
	if err := a.c.Handover(ctx, id, b.name, image); err != nil {
		t.Fatal(err)
	}
	if err := b.c.admitRestore(ctx, id, image, 1); err != nil {
		t.Fatal(err)
	}
	if err := a.c.Reclaim(ctx, id, b.name); err == nil {
		t.Fatal("the source took back a session its target had admitted")
	}
	b.c.restoreFailed(ctx, id, image) // its CRIU restore failed
	if b.c.inRestore(id, false) {
		t.Error("the failed restore is still in its window")
	}
	if err := a.c.Reclaim(ctx, id, b.name); err != nil {
		t.Fatalf("the source could not take back a session whose restore failed on the target: %v", err)
	}
	if o, _ := a.conn.Owner(ctx, id); o.Host != a.name || !o.Live {
		t.Errorf("record after the reclaim: %+v", o)
	}
}

// TestEndedSessionNotLive: a session the last reconciliation round saw
// running here and that has since ended (its client exited) is recorded
// as not live; its record said live here forever.
func TestEndedSessionNotLive(t *testing.T) {
	ep := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := fmt.Sprintf("s-%012x", time.Now().UnixNano()&0xffffffffffff)
	a := newNode(t, ep, "a-"+id)
	if _, err := a.conn.Claim(ctx, id, a.name, true, "", 1); err != nil {
		t.Fatal(err)
	}
	a.c.liveHere = map[string]bool{id: true} // seen running last round
	m, err := session.NewManager(session.Config{Host: a.name})
	if err != nil {
		t.Fatal(err)
	}
	a.c.reconcileOnce(ctx, m) // and gone from the table now
	if o, err := a.conn.Owner(ctx, id); err != nil || o.Host != a.name || o.Live {
		t.Errorf("record of an ended session: %+v, %v; want owner %s, not live", o, err, a.name)
	}
	if len(a.c.liveHere) != 0 {
		t.Errorf("still tracked as live here: %v", a.c.liveHere)
	}
}

// TestRestoredSessionEndsBeforeARound: a session restored here whose
// client ends it before the next reconciliation round has seen it running
// is recorded as not live at that round, not left live for the whole
// restore window.
func TestRestoredSessionEndsBeforeARound(t *testing.T) {
	ep := registrytest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := fmt.Sprintf("s-%012x", time.Now().UnixNano()&0xffffffffffff)
	a := newNode(t, ep, "a-"+id)
	const image = "img-0000000000aa"
	if err := a.c.admitRestore(ctx, id, image, 1); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cluster: a.c}
	d.adoptedImage(images.Meta{ID: image, Session: id}) // restored, then ended at once
	m, err := session.NewManager(session.Config{Host: a.name})
	if err != nil {
		t.Fatal(err)
	}
	a.c.reconcileOnce(ctx, m)
	if o, err := a.conn.Owner(ctx, id); err != nil || o.Host != a.name || o.Live {
		t.Errorf("record of a restored session that ended before a round: %+v, %v; want owner %s, not live", o, err, a.name)
	}
}
