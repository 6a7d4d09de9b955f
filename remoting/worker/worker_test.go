package worker

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/control/tlstest"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/dispatch"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
	"github.com/gpuctl/gpuctl/remoting/worker/testclient"
)

// The test binary doubles as the worker: Start re-executes it with
// "worker" as its first argument.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// spawner outlives every test's workers.
var spawner = NewSpawner()

func testOptions(t *testing.T) Options {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return Options{Backend: BackendEmulated, Device: "0", SessionID: "s-0123456789ab", EmulatedMemBytes: 1 << 30, Seed: "t", Exe: exe,
		Spawner: spawner}
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting a worker in a new PID namespace needs root")
	}
}

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (server *net.TCPConn, client net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return s.(*net.TCPConn), client
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// serverTLS is a certificate for 127.0.0.1 and a client configuration
// that trusts it.
func serverTLS(t *testing.T) (srv, cli *tls.Config) {
	ca := tlstest.NewCA(t, "worker")
	cert := ca.Issue(t, "gpud", "127.0.0.1")
	srv, err := control.ServerTLS(cert.CertFile, cert.KeyFile, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	cli, err = control.ClientTLS(ca.CertFile, "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	return srv, cli
}

// TestWorkerLifecycle drives a worker as gpud does, with a plaintext
// client and with a TLS client whose handshake "gpud" (the test) runs: the
// worker carries on the record layer it is handed, hands it back at each
// quiesce, and a worker resumed on the kept socket carries on from there.
func TestWorkerLifecycle(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls"}[overTLS], func(t *testing.T) { testWorkerLifecycle(t, overTLS) })
	}
}

func testWorkerLifecycle(t *testing.T, overTLS bool) {
	requireRoot(t)
	fdsBefore := openFDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	h, err := Start(ctx, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	pid := h.PID()
	orig := h // the handle that reaps the child
	defer h.Kill()
	checkIsolation(t, pid)

	srv, cconn := tcpPair(t)
	defer cconn.Close()
	var rec *tlsrec.State
	if overTLS {
		scfg, ccfg := serverTLS(t)
		tc := tls.Client(cconn, ccfg)
		go tc.Handshake()
		gpud, err := tlsrec.Server(srv, scfg)
		if err != nil {
			t.Fatal(err)
		}
		st := gpud.State()
		gpud.Forget()
		rec, cconn = &st, tc
	}
	if err := h.Attach(ctx, srv, rec, dispatch.WelcomeInfo{SessionID: "s-0123456789ab", Secret: "sekrit"}, false, 1); err != nil {
		t.Fatal(err)
	}
	cl, err := testclient.Greeted(cconn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if cl.Welcome.SessionID != "s-0123456789ab" || cl.Welcome.Secret != "sekrit" {
		t.Fatalf("welcome %+v", cl.Welcome)
	}
	n, err := cl.DeviceCount()
	if err != nil || n != 1 {
		t.Fatalf("device count %d, %v", n, err)
	}
	c, err := cl.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.MemAlloc(c, 4096)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("gpuctl!!"), 512)
	if err := cl.MemcpyHtoD(c, p, data); err != nil {
		t.Fatal(err)
	}
	if st, err := h.Stats(ctx); err != nil || st.MemInUse != 4096 || !st.Serving || st.BytesIn == 0 {
		t.Fatalf("stats %+v, %v", st, err)
	}

	// Twice through quiesce, detach, reattach, resume, on the socket gpud
	// kept: the client only stalls.
	var lastIn uint64
	for round := 0; round < 2; round++ {
		back, err := h.Quiesce(ctx)
		if err != nil {
			t.Fatalf("round %d: quiesce: %v", round, err)
		}
		if overTLS != (back != nil) {
			t.Fatalf("round %d: quiesce handed back TLS state %v on a TLS=%v connection", round, back != nil, overTLS)
		}
		if back != nil {
			if back.In.Seq <= lastIn || back.Out.Seq == 0 || len(back.In.Secret) == 0 || back.Err != "" {
				t.Fatalf("round %d: handed back in seq %d (before: %d), out seq %d, err %q", round, back.In.Seq, lastIn, back.Out.Seq, back.Err)
			}
			lastIn = back.In.Seq
		}
		// A call sent while quiesced waits; it is answered after resume.
		if _, err := cl.Send(0xffff, nil, nil, true); err != nil { // async unknown op: no reply
			t.Fatal(err)
		}
		nonce := "t" + strings.Repeat("0", round+1)
		if err := h.Detach(ctx, nonce); err != nil {
			t.Fatalf("round %d: detach: %v", round, err)
		}
		if _, err := h.Stats(ctx); err == nil {
			t.Fatal("stats answered after detach")
		}
		checkNoSockets(t, pid)
		h2, err := Reattach(ctx, pid, nonce, nil, testOptions(t))
		if err != nil {
			t.Fatalf("round %d: reattach: %v", round, err)
		}
		h = h2
		if err := h.Resume(ctx, srv, back, 1); err != nil {
			t.Fatalf("round %d: resume: %v", round, err)
		}
		got, err := cl.MemcpyDtoH(c, p, uint64(len(data)))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("round %d: data after resume: %v", round, err)
		}
	}

	// The client hangs up: the worker reports it.
	cconn.Close()
	select {
	case ev := <-h.Events():
		if !ev.Ended {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event for a client that went away")
	}
	srv.Close()
	if err := h.Exit(ctx); err != nil {
		t.Fatalf("exit: %v", err)
	}
	if err := orig.Wait(); err != nil {
		t.Fatalf("worker exit status: %v", err)
	}
	if err := unix.Kill(pid, 0); err == nil {
		t.Fatalf("worker %d still exists after Exit", pid)
	}
	if after := openFDs(t); after > fdsBefore {
		t.Fatalf("descriptors leaked: %d before, %d after", fdsBefore, after)
	}
}

// A worker serves only under the epoch gpud hands it: a new worker takes
// the first one, a claim moves it on, and an attach or resume with any
// other epoch (a stale copy being handed a client) is refused with an
// error that says so; so is a claim from an epoch the worker is not at.
func TestWorkerFence(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := Start(ctx, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
	attach := func(epoch uint64) error {
		srv, cconn := tcpPair(t)
		defer cconn.Close()
		defer srv.Close()
		return h.Attach(ctx, srv, nil, dispatch.WelcomeInfo{SessionID: "s-0123456789ab", Secret: "sekrit"}, false, epoch)
	}
	epoch := func() uint64 {
		st, err := h.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Epoch
	}
	if err := attach(5); err != nil || epoch() != 5 {
		t.Fatalf("first attach at epoch 5: %v, worker at %d", err, epoch())
	}
	steps := []struct {
		name    string
		do      func() error
		refused bool
		after   uint64
	}{
		{"quiesce", func() error { _, err := h.Quiesce(ctx); return err }, false, 5},
		{"resume with an older epoch", func() error { return h.Resume(ctx, nil, nil, 4) }, true, 5},
		{"resume with its epoch", func() error { return h.Resume(ctx, nil, nil, 5) }, false, 5},
		{"claim from another epoch", func() error { return h.Claim(ctx, 4, 6) }, true, 5},
		{"claim that does not grow", func() error { return h.Claim(ctx, 5, 5) }, true, 5},
		{"claim the next epoch", func() error { return h.Claim(ctx, 5, 6) }, false, 6},
		{"attach with the old epoch", func() error { return attach(5) }, true, 6},
		{"attach with the new epoch", func() error { return attach(6) }, false, 6},
	}
	for _, st := range steps {
		err := st.do()
		if st.refused != (err != nil) {
			t.Fatalf("%s: %v, want refused=%v", st.name, err, st.refused)
		}
		if err != nil && !strings.Contains(err.Error(), "epoch") {
			t.Errorf("%s: the refusal does not say why: %v", st.name, err)
		}
		if got := epoch(); got != st.after {
			t.Fatalf("%s: worker at epoch %d, want %d", st.name, got, st.after)
		}
	}
}

// checkIsolation asserts the worker is PID 1 of its own PID namespace and
// holds no descriptors but /dev/null and the control socket.
func checkIsolation(t *testing.T, pid int) {
	t.Helper()
	status, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "status"))
	if err != nil {
		t.Fatal(err)
	}
	var nspid string
	for _, line := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(line, "NSpid:") {
			nspid = strings.Join(strings.Fields(line)[1:], " ")
		}
	}
	if f := strings.Fields(nspid); len(f) != 2 || f[1] != "1" {
		t.Fatalf("NSpid %q: worker is not PID 1 of a new namespace", nspid)
	}
	for _, fd := range fdTargets(t, pid) {
		if strings.HasPrefix(fd, "/") && fd != "/dev/null" || strings.HasPrefix(fd, "pipe:") {
			t.Fatalf("worker inherited %s (all: %v)", fd, fdTargets(t, pid))
		}
	}
}

func checkNoSockets(t *testing.T, pid int) {
	t.Helper()
	for _, fd := range fdTargets(t, pid) {
		if strings.HasPrefix(fd, "socket:") {
			t.Fatalf("detached worker still holds %s (all: %v)", fd, fdTargets(t, pid))
		}
	}
}

func fdTargets(t *testing.T, pid int) []string {
	dir := filepath.Join("/proc", itoa(pid), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out = append(out, l)
		}
	}
	return out
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestStartFailsCleanly(t *testing.T) {
	requireRoot(t)
	opts := testOptions(t)
	opts.Device = "not-a-number"
	fds := openFDs(t)
	_, err := Start(context.Background(), opts)
	if err == nil {
		t.Fatal("worker started with a bad device")
	}
	if !strings.Contains(err.Error(), "want an ordinal") {
		t.Fatalf("error does not say why: %v", err)
	}
	if after := openFDs(t); after > fds {
		t.Fatalf("descriptors leaked: %d before, %d after", fds, after)
	}
}

func TestNonce(t *testing.T) {
	for _, tc := range []struct {
		nonce string
		ok    bool
	}{
		{"abc-DEF_123", true},
		{"", false},
		{strings.Repeat("a", 65), false},
		{"a/b", false},
		{"a b", false},
	} {
		if err := checkNonce(tc.nonce); (err == nil) != tc.ok {
			t.Errorf("checkNonce(%q) = %v", tc.nonce, err)
		}
	}
}

// A metered worker asks gpud's quota service, identified by its PID,
// before it holds more; it hangs up when quiesced, so that it can be
// dumped, and dials again once resumed.
func TestWorkerQuota(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := &tenantLedger{limit: 1 << 20}
	q := serveQuota(t, l)

	h, err := Start(ctx, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
	pid := h.PID()
	h.SetQuota(q.Name())
	srv, cconn := tcpPair(t)
	defer cconn.Close()
	defer srv.Close()
	if err := h.Attach(ctx, srv, nil, dispatch.WelcomeInfo{SessionID: "s-0123456789ab", Secret: "s"}, false, 1); err != nil {
		t.Fatal(err)
	}
	cl, err := testclient.Greeted(cconn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cl.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MemAlloc(c, 768<<10); err != nil {
		t.Fatal(err)
	}
	if got := l.holding(pid); got != 768<<10 {
		t.Fatalf("the ledger holds %d for worker %d, want 768 KiB", got, pid)
	}
	if _, err := cl.MemAlloc(c, 512<<10); err != cu.ErrorOutOfMemory {
		t.Fatalf("allocation past the limit: %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if free, total, err := cl.MemGetInfo(c); err != nil || free != 256<<10 || total != 1<<20 {
		t.Fatalf("MemGetInfo: %d free of %d, %v; want 256 KiB of 1 MiB", free, total, err)
	}
	if st, err := h.Stats(ctx); err != nil || st.AllocBytes != 768<<10 {
		t.Fatalf("stats %+v, %v", st, err)
	}

	if _, err := h.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.Detach(ctx, "tq"); err != nil {
		t.Fatal(err)
	}
	checkNoSockets(t, pid)
	h2, err := Reattach(ctx, pid, "tq", nil, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	h2.SetQuota(q.Name())
	if err := h2.Resume(ctx, srv, nil, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.MemAlloc(c, 256<<10); err != nil {
		t.Fatalf("allocation of what is left after a resume: %v", err)
	}
	if got := l.holding(pid); got != 1<<20 {
		t.Fatalf("the ledger holds %d, want 1 MiB", got)
	}
	cconn.Close()
	if err := h2.Exit(ctx); err != nil {
		t.Fatal(err)
	}
}

// A quiesced worker says its last dump still describes it while its
// client only copied and queried since, and hands its protocol state
// over; after a call that changes it (an allocation), or for another
// dump's nonce, it says why not. The state goes into a worker (the one
// restored from the dump) only at its epoch or a later one.
func TestReuseDump(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := Start(ctx, testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Kill()
	srv, cconn := tcpPair(t)
	defer cconn.Close()
	if err := h.Attach(ctx, srv, nil, dispatch.WelcomeInfo{SessionID: "s-0123456789ab", Secret: "sekrit"}, false, 1); err != nil {
		t.Fatal(err)
	}
	cl, err := testclient.Greeted(cconn, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c, err := cl.PrimaryCtxRetain(0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := cl.MemAlloc(c, 4096)
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("reuse!!!"), 512)
	if err := cl.MemcpyHtoD(c, p, data); err != nil {
		t.Fatal(err)
	}
	// A checkpoint's dump: quiesce, detach for nonce r1, back.
	back, err := h.Quiesce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f, reason, err := h.ReuseDump(ctx, "r1"); err != nil || f != nil || reason == "" {
		t.Fatalf("reuse before any dump: %v, %q, %v; want a reason", f, reason, err)
	}
	if err := h.Detach(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if h, err = Reattach(ctx, h.PID(), "r1", nil, testOptions(t)); err != nil {
		t.Fatal(err)
	}
	if err := h.Resume(ctx, srv, back, 1); err != nil {
		t.Fatal(err)
	}
	quiesced := func(call func() error) (*os.File, string) {
		t.Helper()
		if err := call(); err != nil {
			t.Fatal(err)
		}
		back, err := h.Quiesce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		f, reason, err := h.ReuseDump(ctx, "r1")
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Resume(ctx, srv, back, 1); err != nil {
			t.Fatal(err)
		}
		return f, reason
	}
	// Copies and queries keep the host state.
	f, reason := quiesced(func() error {
		if err := cl.MemcpyHtoD(c, p, data[:64]); err != nil {
			return err
		}
		_, err := cl.MemcpyDtoH(c, p, 64)
		return err
	})
	if f == nil {
		t.Fatalf("after copies only, the worker says its dump is stale: %s", reason)
	}
	st, err := io.ReadAll(io.NewSectionReader(f, 0, 1<<30))
	f.Close()
	if err != nil || !bytes.Contains(st, []byte(`"executed":`)) {
		t.Fatalf("protocol state %q, %v", st, err)
	}
	// An allocation changes it.
	f, reason = quiesced(func() error { _, err := cl.MemAlloc(c, 4096); return err })
	if f != nil || !strings.Contains(reason, "1 calls") {
		t.Fatalf("after an allocation: file %v, reason %q; want a reason naming 1 call", f, reason)
	}
	if _, err := h.Quiesce(ctx); err != nil {
		t.Fatal(err)
	}
	if f, reason, err := h.ReuseDump(ctx, "r2"); err != nil || f != nil || reason == "" {
		t.Fatalf("reuse of another dump: %v, %q, %v; want a reason", f, reason, err)
	}
	// Import: refused below the worker's epoch, taken at a later one.
	sf, err := devmem.MemfdWith("gpuctl-state", st)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	if err := h.Claim(ctx, 1, 3); err != nil {
		t.Fatal(err)
	}
	if err := h.ImportState(ctx, sf, 2); err == nil || !strings.Contains(err.Error(), "older") {
		t.Fatalf("import at an older epoch: %v", err)
	}
	if err := h.ImportState(ctx, sf, 4); err != nil {
		t.Fatalf("import: %v", err)
	}
	if ws, err := h.Stats(ctx); err != nil || ws.Epoch != 4 {
		t.Fatalf("after the import: stats %+v, %v; want epoch 4", ws, err)
	}
}
