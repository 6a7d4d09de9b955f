package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/control/tlstest"
	"github.com/gpuctl/gpuctl/e2e/harness"
)

// TestMigrateOverTLS runs A and B with their control APIs on HTTPS,
// certificates from one CA for each host's IP: gpuctl lists, checkpoints
// and migrates over TLS, A pushes the image to B and asks B to restore it
// over TLS, and the migrated workload's result matches an unmigrated run.
// The workload is busy throughout: it is checkpointed with
// --leave-running and then migrated while it runs.
// A gpuctl that is not given the CA gets one clear line and exit status 4.
func TestMigrateOverTLS(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("the end-to-end tests compile their client with gcc; run make deps")
	}
	c := harness.New(t)
	// NewNode numbers a cluster's nodes from 1 and gives node i the
	// address 10.77.0.(i+1); A and B are the first two, and their
	// certificates must name their IPs before gpud starts.
	ipA, ipB := "10.77.0.2", "10.77.0.3"
	ca := tlstest.NewCA(t, "e2e")
	tlsArgs := func(cert tlstest.Cert) []string {
		return []string{"--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile, "--tls-ca", ca.CertFile}
	}
	// Every gpuctl the harness runs (its readiness check included) reads
	// the CA from the environment it inherits.
	t.Setenv("GPUCTL_TLS_CA", ca.CertFile)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(fmt.Sprintf("e2e-tls-%d\n", time.Now().UnixNano())), 0o600); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, c: c}
	w.a = c.NewHost("a", harness.HostOptions{TokenFile: tok, Args: tlsArgs(ca.Issue(t, "a", ipA))})
	w.b = c.NewHost("b", harness.HostOptions{TokenFile: tok, Args: tlsArgs(ca.Issue(t, "b", ipB))})
	// C serves TLS but was not given the CA: it cannot reach B's API.
	ipC := "10.77.0.4"
	cHost := c.NewHost("c", harness.HostOptions{TokenFile: tok, Args: tlsArgs(ca.Issue(t, "c", ipC))[:4]})
	if w.a.IP != ipA || w.b.IP != ipB || cHost.IP != ipC {
		t.Fatalf("hosts got %s, %s and %s; the certificates were issued for %s, %s and %s", w.a.IP, w.b.IP, cHost.IP, ipA, ipB, ipC)
	}
	for _, h := range []*harness.Host{w.a, w.b} {
		if !strings.Contains(h.Log(), "api_tls=true peer_tls=true listen_tls=true") {
			t.Errorf("gpud on %s does not report TLS on its API, to its peers and on --listen:\n%s", h.Name, h.Log())
		}
		if !strings.Contains(h.Log(), "msg=criu path=") || !strings.Contains(h.Log(), " source=") {
			t.Errorf("gpud on %s does not say which criu it uses and where it found it:\n%s", h.Name, h.Log())
		}
	}
	w.client = c.NewNode("client")
	w.stateful = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	w.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx"), "GPUCTL_DEBUG=1"}
	w.requireRoutes(w.a)

	// Without the CA, gpuctl says what to pass, in one line.
	for _, h := range []*harness.Host{w.a, w.b} {
		code, stderr := ctlWithoutCA(t, c.Build.Gpuctl, h, "sessions")
		if code != 4 || !strings.Contains(stderr, "serves its API over TLS; pass the CA that signed its certificate with --tls-ca") ||
			!strings.Contains(stderr, h.API()) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("gpuctl without --tls-ca against %s: exit %d, stderr %q", h.Name, code, stderr)
		}
		t.Logf("gpuctl without --tls-ca against %s: exit %d: %s", h.Name, code, strings.TrimSpace(stderr))
	}

	// A gpud without --tls-ca that migrates to a TLS target fails at the
	// precheck, before any session is touched, and says what to pass.
	_, err := w.ctl(cHost, "migrate", "s-000000000000", "--to", w.b.API())
	if err == nil || !strings.Contains(err.Error(), "precheck") || !strings.Contains(err.Error(), w.b.API()) ||
		!strings.Contains(err.Error(), "serves its API over TLS; pass the CA that signed its certificate with --tls-ca") {
		t.Errorf("migration from a gpud without --tls-ca to a TLS target: %v", err)
	}
	t.Logf("migration from a gpud without --tls-ca: %v", err)

	// /metrics shares the API's listener, so it is HTTPS too.
	checkMetricsOverTLS(t, w.a, ca.CertFile)

	want := w.reference()
	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)
	var cp checkpointResult
	w.ctlJSON(w.a, &cp, "checkpoint", s.ID, "--leave-running")
	if cp.Session != s.ID || cp.Image == "" || cp.Bytes <= 0 {
		t.Errorf("checkpoint over TLS reported %+v", cp)
	}
	var m migrateResult
	w.ctlJSON(w.a, &m, "migrate", s.ID, "--to", w.b.API())
	if m.Session != s.ID || m.To != w.b.API() || m.SentBytes <= 0 {
		t.Errorf("migrate A->B over TLS reported %+v", m)
	}
	if got := w.find(w.b, s.ID); got.State == "stopped" {
		t.Errorf("session on B after the migration: %+v", got)
	}
	if slices.ContainsFunc(w.sessions(w.a), func(o sessionInfo) bool { return o.ID == s.ID && o.State == "running" }) {
		t.Errorf("A still runs %s after migrating it", s.ID)
	}
	r := <-run
	if got := w.result(r); got != want {
		t.Errorf("run migrated over TLS: %q, unmigrated: %q", got, want)
	}
	// The client ran over TLS and followed the redirect to B's --listen
	// with a new TLS handshake there.
	if !strings.Contains(r.Stderr, "session moved to "+w.b.Listen()) || !strings.Contains(r.Stderr, "reconnected to "+w.b.Listen()) {
		t.Errorf("the client did not follow the redirect to %s:\n%s", w.b.Listen(), r.Stderr)
	}
	for _, h := range []*harness.Host{w.a, w.b} {
		if !strings.Contains(h.Log(), "tls=TLS_AES_") {
			t.Errorf("gpud on %s did not serve its client over TLS:\n%s", h.Name, h.Log())
		}
	}
	t.Logf("over TLS: checkpoint %d bytes; migration sent %d of %d bytes, downtime %d ms", cp.Bytes, m.SentBytes, m.Bytes, m.DowntimeMS)
}

// ctlWithoutCA runs the gpuctl binary against h from inside its namespace with no
// CA in its environment, and returns its exit status and stderr.
func ctlWithoutCA(t *testing.T, gpuctl string, h *harness.Host, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := h.Command(ctx, gpuctl, append([]string{"--host", h.API(), "--token-file", h.TokenFile}, args...)...)
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "GPUCTL_TLS_CA=") })
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("run gpuctl: %v", err)
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// checkMetricsOverTLS scrapes h's /metrics from inside its namespace: over
// HTTPS with the CA it must answer; over plain HTTP it must not.
func checkMetricsOverTLS(t *testing.T, h *harness.Host, caFile string) {
	t.Helper()
	cfg, err := control.ClientTLS(caFile, "")
	if err != nil {
		t.Fatal(err)
	}
	get := func(url string, tlsCfg *tls.Config) (int, string, error) {
		cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dialInNS(h.NS), TLSClientConfig: tlsCfg}}
		resp, err := cl.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	code, body, err := get("https://"+h.API()+"/metrics", cfg)
	if err != nil || code != http.StatusOK || !strings.Contains(body, "go_goroutines") {
		t.Errorf("GET https://%s/metrics: %d, %v, %.200q", h.API(), code, err, body)
	}
	if code, _, err := get("http://"+h.API()+"/metrics", nil); err == nil && code == http.StatusOK {
		t.Errorf("GET http://%s/metrics answered 200 on a TLS listener", h.API())
	}
}

// dialInNS dials from inside network namespace ns: a thread of its own
// enters the namespace, makes the connection and goes back to the
// namespace it came from. (The goroutine may run on the process's main
// thread, which Go never ends; left in ns, the whole test process would
// count as a process of that namespace.) A thread that cannot go back is
// kept locked, so that it ends with its goroutine.
func dialInNS(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			home, err := os.Open("/proc/thread-self/ns/net")
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{err: err}
				return
			}
			defer home.Close()
			f, err := os.Open(filepath.Join("/run/netns", ns))
			if err != nil {
				runtime.UnlockOSThread()
				ch <- result{err: err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{err: fmt.Errorf("enter %s: %w", ns, err)}
				return
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
				runtime.UnlockOSThread()
			}
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}

// tlsWorld is a world whose hosts serve both listeners over TLS with
// certificates from one CA, which every gpuctl and client is given through
// GPUCTL_TLS_CA. b: "" for A alone, "host" for B on a node of its own,
// "beside" for B in A's namespace (the handover path). Extra gpud flags
// go to both hosts.
func tlsWorld(t *testing.T, b string, extra ...string) (*world, *tlstest.CA) {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("the end-to-end tests compile their client with gcc; run make deps")
	}
	c := harness.New(t)
	ca := tlstest.NewCA(t, "e2e")
	t.Setenv("GPUCTL_TLS_CA", ca.CertFile)
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(fmt.Sprintf("e2e-tls-%d\n", time.Now().UnixNano())), 0o600); err != nil {
		t.Fatal(err)
	}
	args := func(name, ip string) []string {
		cert := ca.Issue(t, name, ip)
		return append([]string{"--tls-cert", cert.CertFile, "--tls-key", cert.KeyFile, "--tls-ca", ca.CertFile}, extra...)
	}
	// NewNode gives node i the address 10.77.0.(i+1): A is the first.
	ipA, ipB := "10.77.0.2", "10.77.0.3"
	w := &world{t: t, c: c}
	w.a = c.NewHost("a", harness.HostOptions{TokenFile: tok, Args: args("a", ipA)})
	switch b {
	case "host":
		w.b = c.NewHost("b", harness.HostOptions{TokenFile: tok, Args: args("b", ipB)})
	case "beside":
		w.b = c.NewHostBeside(w.a, "b", harness.HostOptions{TokenFile: tok, Args: args("b", ipA)})
	}
	if w.a.IP != ipA || (b == "host" && w.b.IP != ipB) {
		t.Fatalf("hosts got %s and %v; the certificates were issued for %s and %s", w.a.IP, w.b, ipA, ipB)
	}
	w.client = c.NewNode("client")
	w.stateful = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	w.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx"), "GPUCTL_DEBUG=1"}
	return w, ca
}

// oneLine is the single gpuctl line of a client's stderr that contains
// want, or fails the test.
func oneLine(t *testing.T, r harness.Result, want string) string {
	t.Helper()
	var lines []string
	for _, l := range strings.Split(r.Stderr, "\n") {
		if strings.HasPrefix(l, "gpuctl: ") && !strings.HasPrefix(l, "gpuctl: connected to") {
			lines = append(lines, l)
		}
	}
	if r.Code == 0 || r.Code == -1 || len(lines) != 1 || !strings.Contains(lines[0], want) || !strings.Contains(lines[0], "TLS") {
		t.Fatalf("want exit != 0 and one line containing %q and TLS; exit %d after %v\nstderr:\n%s", want, r.Code, r.Duration, r.Stderr)
	}
	return lines[0]
}

// TestClientOverTLS runs the client data path over TLS: a workload whose
// result must match, bit for bit, a run whose link is cut for seconds
// mid-run (reconnect and replay over a new TLS handshake), garbage and
// half-open connections on the TLS listener that leave a running client
// undisturbed, and one clear line for each side of a TLS mismatch.
func TestClientOverTLS(t *testing.T) {
	w, ca := tlsWorld(t, "")
	plain := w.c.NewHost("plain", harness.HostOptions{GpuctlEnv: []string{"GPUCTL_TLS_CA="}})
	want := w.reference()

	// A connection that dies mid-run (the client reconnects, with a new
	// TLS handshake, and replays), then a link cut for seconds (TCP rides
	// it out).
	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	w.session(w.a, old...)
	time.Sleep(time.Second)
	if err := w.client.ResetConnections(w.a.Listen()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	<-w.client.CutLink(3 * time.Second)
	r := <-run
	if got := w.result(r); got != want {
		t.Errorf("run with a cut link over TLS: %q, uncut: %q", got, want)
	}
	if !strings.Contains(r.Stderr, "TLS TLS_AES_") || !strings.Contains(r.Stderr, "reconnected to") {
		t.Errorf("the client did not run over TLS or did not reconnect:\n%s", r.Stderr)
	}
	if !strings.Contains(w.a.Log(), "client reconnected") || !strings.Contains(w.a.Log(), "tls=TLS_AES_") {
		t.Errorf("gpud did not log a TLS session and its reconnect:\n%s", w.a.Log())
	}

	// Hostile connections on the TLS listener while a client runs.
	attacker := w.c.NewNode("attacker")
	old = w.sessions(w.a)
	run = w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	tcp := "/dev/tcp/" + w.a.IP + "/" + harness.ListenPort
	hostile := []struct{ name, script string }{
		{"garbage", `head -c 4096 /dev/urandom >` + tcp},
		{"http", `exec 3<>` + tcp + `; printf 'GET / HTTP/1.1\r\nHost: x\r\n\r\n' >&3; cat <&3 >/dev/null`},
		{"plaintext hello with an oversized token", `exec 3<>` + tcp + `; printf 'GPUH\x01\x00\x00\x00\xff\xff\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >&3; cat <&3 >/dev/null`},
		{"half open", `exec 3<>` + tcp + `; cat <&3 >/dev/null`},
		{"ClientHello cut short", `exec 3<>` + tcp + `; printf '\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03' >&3; cat <&3 >/dev/null`},
		{"oversized record", `exec 3<>` + tcp + `; printf '\x16\x03\x01\xff\xff\x01' >&3; head -c 70000 /dev/zero >&3; cat <&3 >/dev/null`},
	}
	if _, err := exec.LookPath("openssl"); err == nil {
		hostile = append(hostile,
			struct{ name, script string }{"garbage inside TLS", `head -c 2048 /dev/urandom | openssl s_client -quiet -connect ` +
				w.a.Listen() + ` -CAfile ` + ca.CertFile + ` >/dev/null 2>&1`},
			struct{ name, script string }{"silent after the TLS handshake", `sleep 5 | openssl s_client -quiet -connect ` +
				w.a.Listen() + ` -CAfile ` + ca.CertFile + ` >/dev/null 2>&1`})
	}
	for _, tc := range hostile {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		start := time.Now()
		_ = attacker.Command(ctx, "bash", "-c", tc.script).Run() // its exit status does not matter
		timedOut := ctx.Err() != nil
		cancel()
		if timedOut {
			t.Errorf("%s: gpud kept the connection open for %v", tc.name, time.Since(start))
		}
	}
	if got := w.result(<-run); got != want {
		t.Errorf("run beside hostile connections: %q, alone: %q", got, want)
	}
	// The program exited normally: its goodbye, a TLS record like any
	// request, ended its session at once (the grace period is 30 s).
	for deadline := time.Now().Add(time.Second); slices.ContainsFunc(w.sessions(w.a), func(o sessionInfo) bool { return o.ID == s.ID }); {
		if time.Now().After(deadline) {
			t.Errorf("session %s is still listed a second after its program exited over TLS: %+v", s.ID, w.sessions(w.a))
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, l := range []string{"refused connection", "TLS handshake failed"} {
		if !strings.Contains(w.a.Log(), l) {
			t.Errorf("gpud's log lacks %q", l)
		}
	}

	// A plaintext client against the TLS listener, and a TLS client
	// against a plaintext one: one line each that says TLS.
	r = w.client.RunClient(w.a, 30*time.Second, append(w.env, "GPUCTL_TLS_CA="), w.stateful, "1", "1", "0")
	t.Log(oneLine(t, r, "serves --listen over TLS: set GPUCTL_TLS_CA"))
	r = w.client.RunClient(plain, 30*time.Second, w.env, w.stateful, "1", "1", "0")
	t.Log(oneLine(t, r, "serves --listen without TLS"))
	if !strings.Contains(plain.Log(), "a TLS client on a plaintext listener") {
		t.Errorf("the plaintext gpud did not log the TLS client:\n%s", plain.Log())
	}
	// A client given another CA.
	other := tlstest.NewCA(t, "other")
	r = w.client.RunClient(w.a, 30*time.Second, append(w.env, "GPUCTL_TLS_CA="+other.CertFile), w.stateful, "1", "1", "0")
	t.Log(oneLine(t, r, "certificate verify failed"))
}

// TestHandoverOverTLS migrates a running workload between two TLS gpuds
// in one namespace (one machine): the handover path, where A releases its
// frozen worker before B restores. The client is redirected to B's
// --listen and resumes there over a new TLS handshake; its result must be
// bit-identical to a run without migration. Both ends keep their records
// in user space here (--kernel-tls=false, GPUCTL_KTLS=0), so that this
// path is covered where the kernel has TLS offload too.
func TestHandoverOverTLS(t *testing.T) {
	w, _ := tlsWorld(t, "beside", "--kernel-tls=false")
	w.env = append(w.env, "GPUCTL_KTLS=0")
	w.requireRoutes(w.a)
	var ha, hb struct {
		SocketNS string `json:"socket_ns"`
	}
	w.ctlJSON(w.a, &ha, "host")
	w.ctlJSON(w.b, &hb, "host")
	if ha.SocketNS == "" || ha.SocketNS != hb.SocketNS {
		t.Fatalf("A and B report socket namespaces %q and %q; the handover path needs them equal", ha.SocketNS, hb.SocketNS)
	}
	want := w.reference()

	old := w.sessions(w.a)
	run := w.start(w.a, w.stateful, wlMiB, wlSteps, wlSleep)
	s := w.session(w.a, old...)
	time.Sleep(time.Second)
	var m migrateResult
	w.ctlJSON(w.a, &m, "migrate", s.ID, "--to", w.b.API())
	if m.Session != s.ID || m.To != w.b.API() {
		t.Errorf("migrate A->B reported %+v", m)
	}
	r := <-run
	if got := w.result(r); got != want {
		t.Errorf("run handed over between TLS gpuds: %q, unmigrated: %q", got, want)
	}
	if !strings.Contains(r.Stderr, "session moved to "+w.b.Listen()) || !strings.Contains(r.Stderr, "user-space records") {
		t.Errorf("the client did not follow the redirect to %s over user-space TLS:\n%s", w.b.Listen(), r.Stderr)
	}
	if !strings.Contains(w.b.Log(), "client reconnected") || !strings.Contains(w.b.Log(), "tls=TLS_AES_") {
		t.Errorf("B did not take the client back over TLS:\n%s", w.b.Log())
	}
	t.Logf("handover over TLS: downtime %d ms", m.DowntimeMS)
}
