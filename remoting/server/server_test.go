package server

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/control/tlstest"

	"github.com/gpuctl/gpuctl/remoting/wire"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/remoting/worker/testclient"
	"github.com/gpuctl/gpuctl/session"
	"github.com/gpuctl/gpuctl/store"
)

// The test binary doubles as the worker process.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(worker.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

const testToken = "t0ken-for-tests"

// testServer is a listener in front of a real session table whose
// records are in a real store.
type testServer struct {
	addr string
	m    *session.Manager
	st   *store.Store
	stop func()
	// tls is how clients reach a TLS listener; nil for plaintext.
	tls *tls.Config
}

func startServer(t *testing.T, grace time.Duration) *testServer {
	t.Helper()
	return startServerWith(t, grace, nil, false)
}

// startServerWith starts a server whose metrics are met (nil:
// unregistered), serving TLS when overTLS is set.
func startServerWith(t *testing.T, grace time.Duration, met *Metrics, overTLS bool) *testServer {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("workers start in a new PID namespace, which needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	m, err := session.NewManager(session.Config{
		Host: "test", Grace: grace, Records: st,
		Worker: worker.Options{Backend: worker.BackendEmulated, Device: "0", EmulatedMemBytes: 1 << 30, Exe: exe},
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &Listener{Sessions: m, Token: testToken, HandshakeTimeout: 300 * time.Millisecond, MaxHandshakes: 8, Metrics: met}
	ts := &testServer{addr: ln.Addr().String(), m: m, st: st}
	if overTLS {
		ca := tlstest.NewCA(t, "listener")
		cert := ca.Issue(t, "gpud", "127.0.0.1")
		if l.TLS, err = control.ServerTLS(cert.CertFile, cert.KeyFile, time.Now()); err != nil {
			t.Fatal(err)
		}
		if ts.tls, err = control.ClientTLS(ca.CertFile, "127.0.0.1"); err != nil {
			t.Fatal(err)
		}
		l.KernelTLS = true // where the kernel has it; user space elsewhere
	}
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, ln) }()
	ts.stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		sctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer c2()
		m.Shutdown(sctx)
	}
	t.Cleanup(ts.stop)
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

// both runs a test against a plaintext and a TLS listener.
func both(t *testing.T, f func(t *testing.T, overTLS bool)) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls"}[overTLS], func(t *testing.T) { f(t, overTLS) })
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func openFDs() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	return len(ents)
}

func TestSessionLifecycle(t *testing.T) { both(t, testSessionLifecycle) }

func testSessionLifecycle(t *testing.T, overTLS bool) {
	ts := startServerWith(t, 500*time.Millisecond, nil, overTLS)
	fds := openFDs()

	cl, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	id, secret := cl.Welcome.SessionID, cl.Welcome.Secret
	if len(id) != 14 || id[:2] != "s-" || len(secret) != 32 {
		t.Fatalf("welcome id %q secret %q", id, secret)
	}
	c, err := cl.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MemAlloc(c, 1<<20); err != nil {
		t.Fatal(err)
	}
	list := ts.m.List(context.Background())
	if len(list) != 1 || list[0].ID != id || list[0].State != session.Running || list[0].MemBytes != 1<<20 || list[0].Client == "" {
		t.Fatalf("list %+v", list)
	}
	pid := list[0].WorkerPID

	for _, tc := range []struct {
		name   string
		hello  wire.Hello
		status wire.Status
	}{
		{"wrong token", wire.Hello{Token: "nope"}, wire.StatusBadToken},
		{"wrong secret", wire.Hello{Token: testToken, Flags: wire.HelloResume, SessionID: id, Secret: "x"}, wire.StatusUnknownSession},
		{"unknown session", wire.Hello{Token: testToken, Flags: wire.HelloResume, SessionID: "s-000000000000", Secret: secret}, wire.StatusUnknownSession},
		{"old version", wire.Hello{Token: testToken, Version: 99}, wire.StatusVersionMismatch},
	} {
		bad, err := dial(t, ts, tc.hello)
		if err == nil || bad == nil || bad.Welcome.Status != tc.status {
			t.Errorf("%s: err=%v welcome=%+v, want status %s", tc.name, err, bad, tc.status)
		}
	}

	// The client disconnects; the session waits, detached, and a
	// reconnect with the secret finds its memory intact.
	cl.Close()
	waitFor(t, "detached", func() bool { i, err := ts.m.Get(id); return err == nil && i.State == session.Detached })
	cl2, err := dial(t, ts, wire.Hello{Token: testToken, Flags: wire.HelloResume, SessionID: id, Secret: secret, LastSeq: 3})
	if err != nil {
		t.Fatal(err)
	}
	if cl2.Welcome.LastExecuted != 2 {
		t.Fatalf("last executed %d, want 2", cl2.Welcome.LastExecuted)
	}
	if free, total, err := cl2.MemGetInfo(c); err != nil || total-free != 1<<20 {
		t.Fatalf("memory after reconnect: free %d total %d err %v", free, total, err)
	}
	if i, _ := ts.m.Get(id); i.State != session.Running {
		t.Fatalf("state after reconnect %s", i.State)
	}

	// Gone for longer than the grace period: the worker is ended.
	cl2.Close()
	waitFor(t, "session to end", func() bool { _, err := ts.m.Get(id); return err != nil })
	waitFor(t, "worker to exit", func() bool { return unix.Kill(pid, 0) != nil })
	if after := openFDs(); after > fds {
		t.Fatalf("descriptors leaked: %d before, %d after", fds, after)
	}
	if recs, _ := ts.st.ListSessions(context.Background()); len(recs) != 0 {
		t.Fatalf("records left: %+v", recs)
	}
}

// Garbage, oversized and half-open connections are refused and do not
// disturb a session in progress, on a plaintext and on a TLS listener.
func TestHostileConnections(t *testing.T) { both(t, testHostileConnections) }

func testHostileConnections(t *testing.T, overTLS bool) {
	ts := startServerWith(t, time.Minute, nil, overTLS)
	good, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	oversized := make([]byte, wire.HelloSize)
	copy(oversized, wire.HelloMagic[:])
	binary.LittleEndian.PutUint16(oversized[4:], wire.Version)
	binary.LittleEndian.PutUint16(oversized[8:], 60000) // token length
	// send returns what to read from until gpud closes the connection.
	raw := func(b []byte) func(t *testing.T, c net.Conn) net.Conn {
		return func(t *testing.T, c net.Conn) net.Conn {
			if b != nil {
				c.Write(b)
			}
			return c
		}
	}
	// inTLS completes a TLS handshake, then sends b inside it.
	inTLS := func(b []byte) func(t *testing.T, c net.Conn) net.Conn {
		return func(t *testing.T, c net.Conn) net.Conn {
			tc := tls.Client(c, ts.tls)
			if err := tc.Handshake(); err != nil {
				t.Fatalf("handshake: %v", err)
			}
			if b != nil {
				tc.Write(b)
			}
			return tc
		}
	}
	for _, tc := range []struct {
		name    string
		tlsOnly bool
		send    func(t *testing.T, c net.Conn) net.Conn
	}{
		{"http", false, raw([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))},
		{"garbage", false, raw([]byte("\x00\xff\x13\x37 this is not a hello at all......"))},
		{"oversized token", false, raw(oversized)},
		{"half open", false, raw(nil)},
		{"short", false, raw([]byte("GPUH"))},
		{"handshake cut short", true, raw([]byte{22, 3, 1, 0, 200, 1, 0, 0, 196, 3, 3})},
		{"oversized client hello record", true, raw([]byte{22, 3, 1, 0xff, 0xff, 1})},
		{"garbage inside TLS", true, inTLS([]byte("\x00\xff\x13\x37 this is not a hello at all......"))},
		{"oversized token inside TLS", true, inTLS(oversized)},
		{"silent after the TLS handshake", true, inTLS(nil)},
		{"garbage after the TLS handshake", true, func(t *testing.T, c net.Conn) net.Conn {
			tc := tls.Client(c, ts.tls)
			if err := tc.Handshake(); err != nil {
				t.Fatalf("handshake: %v", err)
			}
			c.Write([]byte("\x17\x03\x03\x00\x20 not a sealed record, 32 bytes.."))
			return tc
		}},
	} {
		if tc.tlsOnly && !overTLS {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", ts.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			r := tc.send(t, c)
			start := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = io.Copy(io.Discard, r) // returns when gpud closes
			// Bytes gpud never read make its close a reset: closed too;
			// so does an alert, inside TLS.
			var alert tls.AlertError
			if err != nil && !errors.Is(err, unix.ECONNRESET) && !errors.As(err, &alert) && !strings.Contains(err.Error(), "remote error") {
				t.Fatalf("connection not closed by gpud: %v", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Fatalf("closed after %v; the handshake deadline is 300ms", took)
			}
			if n, err := good.DeviceCount(); err != nil || n != 1 {
				t.Fatalf("established session disturbed: %d %v", n, err)
			}
		})
	}
	if n := len(ts.m.List(context.Background())); n != 1 {
		t.Fatalf("%d sessions, want only the good one", n)
	}
}

// A client that speaks the other side of TLS than the listener is
// refused with one line that says so.
func TestTLSMismatch(t *testing.T) {
	reg := prometheus.NewRegistry()
	tlsSrv := startServerWith(t, time.Minute, NewMetrics(reg), true)
	cl, err := testclient.Dial(tlsSrv.addr, wire.Hello{Token: testToken}, 5*time.Second)
	if err == nil || cl == nil || cl.Welcome.Status != wire.StatusTLSRequired || !strings.Contains(cl.Welcome.Message, "GPUCTL_TLS_CA") {
		t.Fatalf("plaintext client on a TLS listener: %v, %+v", err, cl)
	}
	if got := counter(t, reg, "gpud_connections_total", "result", "plaintext_client"); got != 1 {
		t.Errorf("plaintext_client counted %v times", got)
	}

	reg2 := prometheus.NewRegistry()
	plain := startServerWith(t, time.Minute, NewMetrics(reg2), false)
	c, err := net.Dial("tcp", plain.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	err = tls.Client(c, tlsSrv.tls).Handshake()
	if err == nil {
		t.Fatal("a TLS handshake with a plaintext listener succeeded")
	}
	if got := counter(t, reg2, "gpud_connections_total", "result", "tls_client"); got != 1 {
		t.Errorf("tls_client counted %v times (handshake error %v)", got, err)
	}
	if n := len(plain.m.List(context.Background())) + len(tlsSrv.m.List(context.Background())); n != 0 {
		t.Fatalf("%d sessions from refused clients", n)
	}
}

// Sessions are isolated: one client's handles mean nothing in another's
// session.
func TestSessionsAreIsolated(t *testing.T) {
	ts := startServer(t, time.Minute)
	a, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ca, _ := a.PrimaryCtxRetain(0)
	p, err := a.MemAlloc(ca, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.MemcpyHtoD(ca, p, []byte("secret data")); err != nil {
		t.Fatal(err)
	}
	cb, _ := b.PrimaryCtxRetain(0)
	if _, err := b.MemcpyDtoH(cb, p, 11); err == nil {
		t.Fatal("session b read session a's memory")
	}
	list := ts.m.List(context.Background())
	if len(list) != 2 || list[0].WorkerPID == list[1].WorkerPID {
		t.Fatalf("sessions do not have their own workers: %+v", list)
	}
}

// A worker that dies takes only its own session with it: the session is
// forgotten, its client's connection closes, and other sessions go on.
func TestWorkerCrashIsContained(t *testing.T) {
	ts := startServer(t, time.Minute)
	victim, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	other, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	info, err := ts.m.Get(victim.Welcome.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Kill(info.WorkerPID, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the crashed session to go", func() bool { _, err := ts.m.Get(info.ID); return err != nil })
	_ = victim.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := victim.DeviceCount(); err == nil {
		t.Fatal("a call on the crashed session succeeded")
	} else if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatal("the crashed session's client was left hanging")
	}
	if n, err := other.DeviceCount(); err != nil || n != 1 {
		t.Fatalf("the other session was disturbed: %d %v", n, err)
	}
}

// A flood of silent connections fills the handshake slots; the excess is
// refused at once, established sessions keep working, and once the
// deadline frees the slots new clients get in.
func TestHandshakeFlood(t *testing.T) {
	ts := startServer(t, time.Minute)
	good, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	time.Sleep(100 * time.Millisecond) // its handshake slot is freed just after its Welcome
	var idle []net.Conn
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	for i := 0; i < 8; i++ {
		c, err := net.Dial("tcp", ts.addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	time.Sleep(50 * time.Millisecond) // let gpud accept them all
	// On loopback the refusal (a reset) can beat connect's return.
	if extra, err := net.Dial("tcp", ts.addr); err == nil {
		defer extra.Close()
		_ = extra.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := extra.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection beyond the handshake limit was not refused at once: %v", err)
		}
	} else if !errors.Is(err, unix.ECONNRESET) {
		t.Fatalf("dial beyond the limit: %v", err)
	}
	if n, err := good.DeviceCount(); err != nil || n != 1 {
		t.Fatalf("established session disturbed by the flood: %d %v", n, err)
	}
	// The silent ones time out; a new client gets in.
	time.Sleep(500 * time.Millisecond)
	late, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatalf("a client after the flood: %v", err)
	}
	late.Close()
}
