package session_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/remoting/wire"
	"github.com/gpuctl/gpuctl/remoting/worker/testclient"
	"github.com/gpuctl/gpuctl/session"
)

// TestGoodbyeEndsSession: a client that says goodbye leaves no session
// behind (worker stopped, table empty) well within the grace period, and
// its connection is closed; one that only disconnects keeps its session
// detached for the grace period. Over TLS the goodbye is a record like
// any request.
func TestGoodbyeEndsSession(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls"}[overTLS], func(t *testing.T) {
			ts := startServerTLS(t, time.Minute, nil, overTLS)
			for _, tc := range []struct {
				name    string
				goodbye bool
				want    session.State // "" for no session
			}{
				{"goodbye", true, ""},
				{"disconnect", false, session.Detached},
			} {
				t.Run(tc.name, func(t *testing.T) {
					cl, err := dial(t, ts, wire.Hello{Token: testToken})
					if err != nil {
						t.Fatal(err)
					}
					defer cl.Close()
					id := cl.Welcome.SessionID
					ctx, err := cl.PrimaryCtxRetain(0)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := cl.MemAlloc(ctx, 1<<20); err != nil {
						t.Fatal(err)
					}
					if tc.goodbye {
						if _, err := cl.Send(wire.OpGoodbye, nil, nil, true); err != nil {
							t.Fatal(err)
						}
						// gpud closes the connection once the session ended.
						_ = cl.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
						if _, err := io.ReadAll(cl.Conn); err != nil {
							t.Fatalf("the connection was not closed after the goodbye: %v", err)
						}
					} else {
						cl.Close()
					}
					got := waitState(t, ts.m, id, tc.want, 5*time.Second)
					if got != tc.want {
						t.Fatalf("session %s is %q after the client's %s, want %q", id, got, tc.name, tc.want)
					}
				})
			}
		})
	}
}

// TestGoodbyeDuringCheckpoint: a goodbye that reaches a session while a
// checkpoint holds it (read by the worker after the checkpoint claimed
// the session, or waiting on the socket gpud holds while the worker is
// quiesced) does not disturb the checkpoint; the session ends once the
// checkpoint resumes it, instead of waiting out the grace period.
func TestGoodbyeDuringCheckpoint(t *testing.T) {
	for _, quiesced := range []bool{false, true} {
		t.Run(map[bool]string{false: "claimed", true: "quiesced"}[quiesced], func(t *testing.T) {
			ts := startServer(t, time.Minute, nil)
			cl, err := dial(t, ts, wire.Hello{Token: testToken})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			id := cl.Welcome.SessionID
			if _, err := cl.DeviceCount(); err != nil {
				t.Fatal(err)
			}
			bg := context.Background()
			// Begin claims the session; its worker serves until the
			// quiesce.
			w, err := ts.m.Begin(bg, id)
			if err != nil {
				t.Fatal(err)
			}
			if quiesced {
				if err := w.Quiesce(bg); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := cl.Send(wire.OpGoodbye, nil, nil, true); err != nil {
				t.Fatal(err)
			}
			time.Sleep(300 * time.Millisecond)
			if i, err := ts.m.Get(id); err != nil || i.State != session.Quiescing {
				t.Fatalf("a claimed session whose client said goodbye: %+v %v, want it quiescing still", i, err)
			}
			if !quiesced {
				if err := w.Quiesce(bg); err != nil {
					t.Fatal(err)
				}
			}
			if err := ts.m.Dumped(id); err != nil {
				t.Fatal(err)
			}
			if err := w.Resume(bg); err != nil {
				t.Fatal(err)
			}
			if err := ts.m.Resumed(id, w); err != nil {
				t.Fatal(err)
			}
			if got := waitState(t, ts.m, id, "", 5*time.Second); got != "" {
				t.Fatalf("session %s is %q after the checkpoint resumed it, want it ended", id, got)
			}
		})
	}
}

// waitState waits up to d for session id to reach state want ("": gone)
// and returns the state it has then.
func waitState(t *testing.T, m *session.Manager, id string, want session.State, d time.Duration) session.State {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		var got session.State
		if i, err := m.Get(id); err == nil {
			got = i.State
		}
		if got == want || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestGoodbyeFreesTenantLimits: a tenant at its max_sessions and its
// max_mem_bytes gets both back as soon as one of its programs exits
// normally; a program that only disconnected keeps counting for the grace
// period.
func TestGoodbyeFreesTenantLimits(t *testing.T) {
	ts, _ := startTenantServer(t) // alice: 2 sessions, 1 MiB
	hold := func() (*testclient.Client, uint64) {
		t.Helper()
		cl, err := dial(t, ts, wire.Hello{Token: aliceToken})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		ctx, err := cl.PrimaryCtxRetain(0)
		if err != nil {
			t.Fatal(err)
		}
		return cl, ctx
	}
	a1, c1 := hold()
	if _, err := a1.MemAlloc(c1, 1<<20); err != nil {
		t.Fatalf("alice's first session takes her whole 1 MiB: %v", err)
	}
	a2, _ := hold()

	// The first program exits: its session, and its megabyte, are free.
	if _, err := a1.Send(wire.OpGoodbye, nil, nil, true); err != nil {
		t.Fatal(err)
	}
	if got := waitState(t, ts.m, a1.Welcome.SessionID, "", 5*time.Second); got != "" {
		t.Fatalf("the exited program's session is %q", got)
	}
	a3, c3 := hold() // a third session fits again
	if _, err := a3.MemAlloc(c3, 1<<20); err != nil {
		t.Fatalf("the exited program's megabyte is still counted: %v", err)
	}

	// The second only disconnects: it still counts, detached.
	a2.Close()
	if got := waitState(t, ts.m, a2.Welcome.SessionID, session.Detached, 5*time.Second); got != session.Detached {
		t.Fatalf("a disconnected session is %q, want detached", got)
	}
	refused, err := dial(t, ts, wire.Hello{Token: aliceToken})
	if err == nil || refused == nil || refused.Welcome.Status != wire.StatusRefused {
		t.Fatalf("a session past max_sessions while one waits detached: %v %+v, want refused", err, refused)
	}
}
