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
		if !strings.Contains(h.Log(), "api_tls=true peer_tls=true") {
			t.Errorf("gpud on %s does not report TLS on its API and to its peers:\n%s", h.Name, h.Log())
		}
		if !strings.Contains(h.Log(), "msg=criu path=") || !strings.Contains(h.Log(), " source=") {
			t.Errorf("gpud on %s does not say which criu it uses and where it found it:\n%s", h.Name, h.Log())
		}
	}
	w.client = c.NewNode("client")
	w.stateful = c.CompileC(filepath.Join(c.Build.Root, "e2e/cprogs/stateful.c"))
	w.env = []string{"GPUCTL_PTX_DIR=" + filepath.Join(c.Build.Root, "e2e/kernels/ptx")}
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
	if got := w.result(<-run); got != want {
		t.Errorf("run migrated over TLS: %q, unmigrated: %q", got, want)
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
// enters the namespace, makes the connection and is then thrown away
// (a goroutine that exits locked to its thread ends the thread).
func dialInNS(ns string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		type result struct {
			c   net.Conn
			err error
		}
		ch := make(chan result, 1)
		go func() {
			runtime.LockOSThread()
			f, err := os.Open(filepath.Join("/run/netns", ns))
			if err != nil {
				ch <- result{err: err}
				return
			}
			defer f.Close()
			if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
				ch <- result{err: fmt.Errorf("enter %s: %w", ns, err)}
				return
			}
			c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
			ch <- result{c, err}
		}()
		r := <-ch
		return r.c, r.err
	}
}
