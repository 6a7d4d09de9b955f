package session_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/server"
	"github.com/gpuctl/gpuctl/remoting/wire"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/remoting/worker/testclient"
	"github.com/gpuctl/gpuctl/session"
	"github.com/gpuctl/gpuctl/tenant"
)

// Tokens of the tenancy tests: the host's and two tenants'.
const (
	aliceToken = "alice-t0ken"
	bobToken   = "bob-t0ken"
)

// startTenantServer runs a session table with real workers behind the
// client listener, with tenants alice (at most 2 sessions and 1 MiB of
// device memory) and bob (no limits), and gpud's quota service.
func startTenantServer(t *testing.T) (*testServer, *tenant.Set) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("workers start in a new PID namespace, which needs root")
	}
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	file := write("tenants.json", `[{"name":"alice","token_file":"`+write("alice", aliceToken)+`","max_sessions":2,"max_mem_bytes":1048576},
		{"name":"bob","token_file":"`+write("bob", bobToken)+`"}]`)
	set, err := tenant.Load(file, testToken)
	if err != nil {
		t.Fatal(err)
	}
	q, err := worker.ListenQuota()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m, err := session.NewManager(session.Config{
		Host: "test", Grace: time.Minute, Tenants: set, QuotaSocket: q.Name(),
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
	l := &server.Listener{Sessions: m, Auth: set}
	done := make(chan error, 1)
	go func() { done <- l.Serve(ctx, ln) }()
	qdone := make(chan struct{})
	go func() { q.Serve(ctx, m, nil); close(qdone) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
		<-qdone
		sctx, c2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer c2()
		m.Shutdown(sctx)
	})
	return &testServer{addr: ln.Addr().String(), m: m}, set
}

func memFree(cl *testclient.Client, ctx, p uint64) cu.Result {
	var a testclient.Args
	a.U64(ctx)
	a.U64(p)
	r, err := cl.Call(wire.OpMemFree, a.B, nil)
	if err != nil {
		return cu.ErrorUnknown
	}
	return r.Result
}

func TestTenantSessionsAndQuotas(t *testing.T) {
	ts, set := startTenantServer(t)
	ctx := context.Background()
	asAlice := tenant.NewContext(ctx, tenant.Principal{Tenant: "alice"})

	a1, err := dial(t, ts, wire.Hello{Token: aliceToken})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := dial(t, ts, wire.Hello{Token: aliceToken})
	if err != nil {
		t.Fatal(err)
	}
	b1, err := dial(t, ts, wire.Hello{Token: bobToken})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := dial(t, ts, wire.Hello{Token: testToken})
	if err != nil {
		t.Fatal(err)
	}

	// A third session of alice's is refused at the handshake, with a
	// line that says why; bob and the administrator are not limited.
	third, err := dial(t, ts, wire.Hello{Token: aliceToken})
	if err == nil || third == nil || third.Welcome.Status != wire.StatusRefused ||
		!strings.Contains(third.Welcome.Message, `tenant "alice" already has 2 live session(s) on this host, its max_sessions`) {
		t.Fatalf("alice's third session: %v %+v", err, third)
	}

	owners := map[string]string{}
	for _, s := range ts.m.List(ctx) {
		owners[s.ID] = s.Tenant
	}
	want := map[string]string{a1.Welcome.SessionID: "alice", a2.Welcome.SessionID: "alice", b1.Welcome.SessionID: "bob", admin.Welcome.SessionID: ""}
	for id, owner := range want {
		if got, ok := owners[id]; !ok || got != owner {
			t.Errorf("session %s listed as %q's (listed: %v), want %q's", id, got, ok, owner)
		}
	}
	if len(owners) != len(want) {
		t.Errorf("sessions %v, want %v", owners, want)
	}

	// A session of another tenant is answered as a missing one.
	bid := b1.Welcome.SessionID
	missing := ts.m.Authorize(asAlice, "s-000000000000")
	other := ts.m.Authorize(asAlice, bid)
	if !errs.IsNotFound(other) || strings.ReplaceAll(other.Error(), bid, "s-000000000000") != missing.Error() {
		t.Fatalf("another tenant's session: %v; a missing one: %v", other, missing)
	}
	if err := ts.m.Authorize(asAlice, a1.Welcome.SessionID); err != nil {
		t.Fatalf("alice's own session: %v", err)
	}
	if err := ts.m.Authorize(ctx, bid); err != nil {
		t.Fatalf("the administrator: %v", err)
	}
	// Even with its secret, a session cannot be resumed with another
	// tenant's token.
	b1.Close()
	back, err := dial(t, ts, wire.Hello{Token: aliceToken, Flags: wire.HelloResume, SessionID: bid, Secret: b1.Welcome.Secret})
	if err == nil || back == nil || back.Welcome.Status != wire.StatusUnknownSession {
		t.Fatalf("resume of bob's session with alice's token: %v %+v", err, back)
	}

	// Device memory: alice's two sessions share 1 MiB; bob's is not
	// limited, and is not affected.
	c1, _ := a1.PrimaryCtxRetain(0)
	c2, _ := a2.PrimaryCtxRetain(0)
	p1, err := a1.MemAlloc(c1, 768<<10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a2.MemAlloc(c2, 512<<10); err != cu.ErrorOutOfMemory {
		t.Fatalf("alice's second session past the limit: %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if _, err := a2.MemAlloc(c2, 256<<10); err != nil {
		t.Fatalf("what is left of alice's limit: %v", err)
	}
	bb, err := dial(t, ts, wire.Hello{Token: bobToken})
	if err != nil {
		t.Fatal(err)
	}
	cb, _ := bb.PrimaryCtxRetain(0)
	if _, err := bb.MemAlloc(cb, 64<<20); err != nil {
		t.Fatalf("bob's allocation while alice is at her limit: %v", err)
	}
	usage := map[string]session.Usage{}
	for _, u := range ts.m.Usage() {
		usage[u.Tenant] = u
	}
	if u := usage["alice"]; u.Sessions != 2 || u.MemBytes != 1<<20 {
		t.Errorf("alice's usage %+v, want 2 sessions holding 1 MiB", u)
	}
	// Memory freed in one session is there for the other at once.
	if r := memFree(a1, c1, p1); r != cu.Success {
		t.Fatalf("free: %v", r)
	}
	if _, err := a2.MemAlloc(c2, 512<<10); err != nil {
		t.Fatalf("alice's allocation after a free in her other session: %v", err)
	}
	if _, err := a1.MemAlloc(c1, 512<<10); err != cu.ErrorOutOfMemory {
		t.Fatalf("past the limit again: %v", err)
	}

	// The control API lists alice's sessions to alice only, and answers
	// her about bob's as about none.
	mux := http.NewServeMux()
	ts.m.Register(mux)
	srv := httptest.NewServer(control.Authenticate(set, nil, mux))
	defer srv.Close()
	get := func(token, path string) (int, string) {
		req, _ := http.NewRequest("GET", srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if _, body := get(aliceToken, "/v1/sessions"); strings.Contains(body, bid) || strings.Contains(body, admin.Welcome.SessionID) ||
		!strings.Contains(body, a1.Welcome.SessionID) || !strings.Contains(body, `"tenant":"alice"`) {
		t.Errorf("alice's listing: %s", body)
	}
	if _, body := get(testToken, "/v1/sessions"); !strings.Contains(body, bid) || !strings.Contains(body, a2.Welcome.SessionID) {
		t.Errorf("the administrator's listing: %s", body)
	}
	st1, other1 := get(aliceToken, "/v1/sessions/"+bid)
	st2, missing1 := get(aliceToken, "/v1/sessions/s-000000000000")
	if st1 != http.StatusNotFound || st1 != st2 || strings.ReplaceAll(other1, bid, "s-000000000000") != missing1 {
		t.Errorf("bob's session to alice: %d %s; a missing one: %d %s", st1, other1, st2, missing1)
	}
}

// A restored session must belong to a tenant the host knows and fit that
// tenant's limits here; otherwise Adopt refuses it and registers nothing.
func TestAdoptChecksTheTenant(t *testing.T) {
	ts, _ := startTenantServer(t)
	ctx := context.Background()
	a1, err := dial(t, ts, wire.Hello{Token: aliceToken})
	if err != nil {
		t.Fatal(err)
	}
	a2, err := dial(t, ts, wire.Hello{Token: aliceToken})
	if err != nil {
		t.Fatal(err)
	}
	id := a1.Welcome.SessionID
	c1, _ := a1.PrimaryCtxRetain(0)
	if _, err := a1.MemAlloc(c1, 768<<10); err != nil {
		t.Fatal(err)
	}
	// Checkpointed and released, as a checkpoint without
	// --leave-running does: the worker waits, detached, to be restored.
	w, err := ts.m.Begin(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Detach(ctx, "adopt1"); err != nil {
		t.Fatal(err)
	}
	pid := w.PID()
	defer func() {
		if t.Failed() {
			_ = syscallKill(pid)
		}
	}()
	for _, step := range []func(string) error{ts.m.Dumped, ts.m.Released} {
		if err := step(id); err != nil {
			t.Fatal(err)
		}
	}
	// Meanwhile alice's other session takes half of her limit.
	c2, _ := a2.PrimaryCtxRetain(0)
	p2, err := a2.MemAlloc(c2, 512<<10)
	if err != nil {
		t.Fatal(err)
	}
	rw, err := ts.m.Reattach(ctx, pid, "adopt1")
	if err != nil {
		t.Fatal(err)
	}
	err = ts.m.Adopt(ctx, id, rw, "img-1", "carol")
	if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), `tenant "carol" is not known on this host`) {
		t.Fatalf("adopt for an unknown tenant: %v", err)
	}
	err = ts.m.Adopt(ctx, id, rw, "img-1", "alice")
	if !errs.Is(err, errs.ResourceExhausted) || !strings.Contains(err.Error(), `it holds 786432 bytes of device memory and tenant "alice" has 524288 of its max_mem_bytes (1048576) left here`) {
		t.Fatalf("adopt past alice's memory limit: %v", err)
	}
	if i, _ := ts.m.Get(id); i.State != session.Stopped {
		t.Fatalf("a refused adoption changed the session: %+v", i)
	}
	if r := memFree(a2, c2, p2); r != cu.Success {
		t.Fatal(r)
	}
	if err := ts.m.Adopt(ctx, id, rw, "img-1", "alice"); err != nil {
		t.Fatalf("adopt within alice's limits: %v", err)
	}
	if i, _ := ts.m.Get(id); i.Tenant != "alice" || i.State != session.Running {
		t.Fatalf("adopted session %+v, want alice's, running on the socket gpud kept", i)
	}
	// The restored session is metered again: 768 KiB held, 256 KiB left.
	if _, err := a1.MemAlloc(c1, 512<<10); err != cu.ErrorOutOfMemory {
		t.Fatalf("restored session past the limit: %v", err)
	}
	if _, err := a1.MemAlloc(c1, 256<<10); err != nil {
		t.Fatalf("restored session within the limit: %v", err)
	}
}

func syscallKill(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }
