package session_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/control/tlstest"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/server"
	"github.com/gpuctl/gpuctl/remoting/wire"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/remoting/worker/testclient"
	"github.com/gpuctl/gpuctl/session"
)

// The test binary doubles as the worker process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(worker.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

const testToken = "t0ken-for-tests"

type testServer struct {
	addr string
	m    *session.Manager
	tls  *tls.Config // how clients reach a TLS listener; nil for plaintext
}

// startServer runs a session table with real workers (emulated backend)
// behind gpud's client listener; met may be nil.
func startServer(t *testing.T, grace time.Duration, met *session.Metrics) *testServer {
	return startServerTLS(t, grace, met, false)
}

// startServerTLS is startServer with the listener on TLS when overTLS;
// opts adjust the session table's configuration.
func startServerTLS(t *testing.T, grace time.Duration, met *session.Metrics, overTLS bool, opts ...func(*session.Config)) *testServer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("workers start in a new PID namespace, which needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := session.Config{
		Host: "test", Grace: grace, Metrics: met,
		Worker: worker.Options{Backend: worker.BackendEmulated, Device: "0", EmulatedMemBytes: 1 << 30, Exe: exe},
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := session.NewManager(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &server.Listener{Sessions: m, Token: testToken}
	ts := &testServer{addr: ln.Addr().String(), m: m}
	if overTLS {
		ca := tlstest.NewCA(t, "sessions")
		cert := ca.Issue(t, "gpud", "127.0.0.1")
		if l.TLS, err = control.ServerTLS(cert.CertFile, cert.KeyFile, time.Now()); err != nil {
			t.Fatal(err)
		}
		if ts.tls, err = control.ClientTLS(ca.CertFile, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		sctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer c2()
		m.Shutdown(sctx)
	})
	return ts
}

// dial connects a client to ts, over TLS when ts serves it.
func dial(t *testing.T, ts *testServer, h wire.Hello) (*testclient.Client, error) {
	t.Helper()
	if ts.tls == nil {
		return testclient.Dial(ts.addr, h, 5*time.Second)
	}
	c, err := tls.Dial("tcp", ts.addr, ts.tls)
	if err != nil {
		return nil, err
	}
	cl, err := testclient.Handshake(c, h, 5*time.Second)
	if err != nil {
		c.Close()
	}
	return cl, err
}

// The checkpoint pipeline's view of the session table: a session claimed,
// dumped and released stays listed as stopped; its client, coming back, is
// told to retry, or after a migration where the session went. Over TLS,
// the record layer goes from the worker to gpud at the quiesce and back
// at the resume, and gpud's "moved" notice is sealed where the worker
// left off.
func TestPipelineSessionTable(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls"}[overTLS], func(t *testing.T) { testPipelineSessionTable(t, overTLS) })
	}
}

func testPipelineSessionTable(t *testing.T, overTLS bool) {
	ts := startServerTLS(t, time.Minute, nil, overTLS)
	ctx := context.Background()
	cl, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	id, secret := cl.Welcome.SessionID, cl.Welcome.Secret
	if _, err := ts.m.Begin(ctx, "s-000000000000"); !errs.IsNotFound(err) {
		t.Fatalf("begin of an unknown session: %v", err)
	}
	w, err := ts.m.Begin(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ts.m.Begin(ctx, id); !errs.IsFailedPrecondition(err) {
		t.Fatalf("second begin: %v", err)
	}
	if err := w.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	// A failed checkpoint resumes the session on the socket gpud kept.
	if err := w.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ts.m.Resumed(id, w); err != nil {
		t.Fatal(err)
	}
	if n, err := cl.DeviceCount(); err != nil || n != 1 {
		t.Fatalf("after resume: %d %v", n, err)
	}
	// Twice more, with calls in between.
	for i := 0; i < 2; i++ {
		if err := w.Quiesce(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Resume(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := cl.DeviceCount(); err != nil || n != 1 {
			t.Fatalf("after resume %d: %d %v", i+2, n, err)
		}
	}

	for _, step := range []func() error{
		func() error {
			w, err := ts.m.Begin(ctx, id)
			if err != nil {
				return err
			}
			// A real pipeline's dump ends this worker; here nothing does,
			// and gpud's shutdown would wait its full deadline for it.
			t.Cleanup(func() { _ = syscall.Kill(w.PID(), syscall.SIGKILL) })
			return w.Quiesce(ctx)
		},
		func() error { return ts.m.Dumped(id) },
		func() error { return ts.m.Migrating(id) },
		func() error { return ts.m.Moved(id, "10.9.9.9:7070") },
		func() error { return ts.m.Released(id) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	// The client reads the notice on the connection it had.
	_ = cl.Conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := cl.DeviceCount(); err == nil || !strings.Contains(err.Error(), "10.9.9.9:7070") {
		t.Fatalf("the client did not read the moved notice: %v", err)
	}
	if i, _ := ts.m.Get(id); i.State != session.Stopped {
		t.Fatalf("state after release: %s", i.State)
	}
	back, err := dial(t, ts, wire.Hello{Token: testToken, Flags: wire.HelloResume, SessionID: id, Secret: secret})
	if err == nil || back == nil || back.Welcome.Status != wire.StatusMoved || back.Welcome.Message != "10.9.9.9:7070" {
		t.Fatalf("returning client: %v %+v", err, back)
	}
	if err := ts.m.Dumped(id); !errs.IsFailedPrecondition(err) {
		t.Fatalf("stopped -> checkpointing: %v", err)
	}
}

// A client that asked for keepalives hears them while gpud holds its
// socket for a quiesced session, and nothing while it is idle. Over TLS
// they are records sealed with the record layer the worker handed back,
// which then stands past them: after a resume the worker's replies, and
// after a migration the moved notice, open where the keepalives left off.
func TestQuiescedKeepalives(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls"}[overTLS], func(t *testing.T) { testQuiescedKeepalives(t, overTLS) })
	}
}

func testQuiescedKeepalives(t *testing.T, overTLS bool) {
	const every = 50 * time.Millisecond
	ts := startServerTLS(t, time.Minute, nil, overTLS, func(c *session.Config) { c.Keepalive = every })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := dial(t, ts, wire.Hello{Token: testToken, Flags: wire.HelloKeepalive})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id := cl.Welcome.SessionID
	if cl.Welcome.KeepaliveMS != uint32(every.Milliseconds()) {
		t.Fatalf("the Welcome announces keepalives every %d ms, want %d", cl.Welcome.KeepaliveMS, every.Milliseconds())
	}
	if n, err := cl.DeviceCount(); err != nil || n != 1 {
		t.Fatalf("device count: %d %v", n, err)
	}
	// Idle: no call runs, nothing is sent.
	_ = cl.Conn.SetReadDeadline(time.Now().Add(6 * every))
	if n, err := cl.Conn.Read(make([]byte, 1)); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an idle connection carried %d bytes (%v)", n, err)
	}
	// Read a few whole keepalive frames from gpud, leaving the rest.
	keepalives := func(n int) {
		t.Helper()
		_ = cl.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [wire.ReplyHeaderSize]byte
		for i := range n {
			if _, err := io.ReadFull(cl.Conn, b[:]); err != nil {
				t.Fatalf("keepalive %d: %v", i, err)
			}
			h, err := wire.DecodeReplyHeader(b[:], wire.DefaultMaxFrame)
			if err != nil || h.Kind != wire.KindKeepalive || h.Len != 0 || h.Executed != 0 {
				t.Fatalf("frame %d while quiesced: %+v, %v; want a keepalive from gpud", i, h, err)
			}
		}
		_ = cl.Conn.SetReadDeadline(time.Time{})
	}
	w, err := ts.m.Begin(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	keepalives(3)
	if err := w.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	if err := ts.m.Resumed(id, w); err != nil {
		t.Fatal(err)
	}
	if n, err := cl.DeviceCount(); err != nil || n != 1 {
		t.Fatalf("after keepalives and a resume: %d %v", n, err)
	}

	w, err = ts.m.Begin(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	keepalives(2)
	for _, step := range []func() error{
		func() error { return ts.m.Dumped(id) },
		func() error { return ts.m.Migrating(id) },
		func() error { return ts.m.Moved(id, "10.9.9.9:7070") },
		func() error { return ts.m.Released(id) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	_ = cl.Conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := cl.DeviceCount(); err == nil || !strings.Contains(err.Error(), "10.9.9.9:7070") {
		t.Fatalf("the client did not read the moved notice after keepalives: %v", err)
	}
	// What a checkpoint's release does to the frozen worker.
	w.(interface{ Handle() *worker.Handle }).Handle().Kill()
}

// The session metrics are read from the table at scrape time.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	met := session.NewMetrics(reg)
	ts := startServer(t, time.Minute, met)
	cl, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	c, _ := cl.PrimaryCtxRetain(0)
	if _, err := cl.MemAlloc(c, 3<<20); err != nil {
		t.Fatal(err)
	}
	met.ObserveStep("dump", 250*time.Millisecond)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	value := func(name, label, lv string) float64 {
		for _, f := range fams {
			if f.GetName() != name {
				continue
			}
			for _, m := range f.GetMetric() {
				if label != "" && !hasLabel(m.GetLabel(), label, lv) {
					continue
				}
				switch {
				case m.Counter != nil:
					return m.Counter.GetValue()
				case m.Gauge != nil:
					return m.Gauge.GetValue()
				case m.Histogram != nil:
					return float64(m.Histogram.GetSampleCount())
				}
			}
		}
		return -1
	}
	for _, tc := range []struct {
		name, label, value string
		check              func(float64) bool
	}{
		{"gpud_sessions", "state", "running", func(v float64) bool { return v == 1 }},
		{"gpud_sessions", "state", "detached", func(v float64) bool { return v == 0 }},
		{"gpud_calls_total", "", "", func(v float64) bool { return v == 2 }},
		{"gpud_client_bytes_total", "direction", "in", func(v float64) bool { return v > 0 }},
		{"gpud_device_memory_in_use_bytes", "", "", func(v float64) bool { return v == 3<<20 }},
		{"gpud_worker_starts_total", "how", "start", func(v float64) bool { return v == 1 }},
		{"gpud_checkpoint_duration_seconds", "step", "dump", func(v float64) bool { return v == 1 }},
	} {
		if v := value(tc.name, tc.label, tc.value); !tc.check(v) {
			t.Errorf("%s{%s=%q} = %v", tc.name, tc.label, tc.value, v)
		}
	}
}

func hasLabel[L interface {
	GetName() string
	GetValue() string
}](ls []L, k, v string) bool {
	for _, l := range ls {
		if l.GetName() == k && l.GetValue() == v {
			return true
		}
	}
	return false
}

// Fencing on one host: once a session has moved on (here: to another
// host), its frozen worker is a stale copy. Thawed and reattached, it is
// refused the next epoch and refused a client, each time with an error
// that says why; and an image of an older epoch than the session's is not
// admitted for a restore.
func TestStaleCopyIsFenced(t *testing.T) {
	ts := startServer(t, time.Minute, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	id := cl.Welcome.SessionID
	if i, _ := ts.m.Get(id); i.Epoch != 1 {
		t.Fatalf("a new session is at epoch %d, want 1", i.Epoch)
	}
	w, err := ts.m.Begin(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	pid := w.PID()
	const nonce = "fence0"
	for _, step := range []func() error{
		func() error { return w.Quiesce(ctx) },
		func() error { return w.Detach(ctx, nonce) },
		func() error { return ts.m.Dumped(id) },
		func() error { return ts.m.Migrating(id) },
		func() error { return ts.m.Moved(id, "10.9.9.9:7070") },
		func() error { return ts.m.Released(id) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if i, _ := ts.m.Get(id); i.Epoch != 2 {
		t.Fatalf("after the move the session here is at epoch %d, want 2", i.Epoch)
	}
	// The frozen original, thawed: it still holds epoch 1.
	thawed, err := ts.m.Reattach(ctx, pid, nonce)
	if err != nil {
		t.Fatal(err)
	}
	fw, ok := thawed.(interface{ Fence(context.Context) error })
	if !ok {
		t.Fatal("the session table's workers cannot be fenced")
	}
	for name, try := range map[string]func() error{
		"claim the next epoch": func() error { return fw.Fence(ctx) },
		"serve again":          func() error { return thawed.Resume(ctx) },
	} {
		err := try()
		if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "fenced") || !strings.Contains(err.Error(), "epoch 1") {
			t.Errorf("the thawed original tried to %s: %v", name, err)
		}
	}
	if st, err := thawed.(interface{ Handle() *worker.Handle }).Handle().Stats(ctx); err != nil || st.Epoch != 1 || st.Serving {
		t.Errorf("the thawed original after being refused: %+v, %v", st, err)
	}
	// Images: the epoch the session moved on from is stale here; the
	// current one, or a later one from elsewhere, may be restored.
	for _, tc := range []struct {
		epoch uint64
		ok    bool
	}{{1, false}, {2, true}, {3, true}} {
		err := ts.m.Admit(id, tc.epoch)
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "fenced")) {
			t.Errorf("admit an image at epoch %d: %v", tc.epoch, err)
		}
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
}
