package interposer_test

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/control/tlstest"
	"github.com/gpuctl/gpuctl/remoting/interposer/testserver"
)

// tlsServer is a test server on TLS with a certificate from ca for hosts.
func tlsServer(t *testing.T, ca *tlstest.CA, hosts ...string) *testserver.Server {
	t.Helper()
	cert := ca.Issue(t, "gpud", hosts...)
	cfg, err := control.ServerTLS(cert.CertFile, cert.KeyFile, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv, err := testserver.StartWith("127.0.0.1:0", "secret-token", nil, testserver.Options{TLS: cfg})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

// gpuctlLines are the library's own lines in a client's output.
func gpuctlLines(out string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "gpuctl: ") {
			ls = append(ls, l)
		}
	}
	return ls
}

// TestClientTLS runs the client over TLS against the test server, which
// uses gpud's record layer: calls work, the name can be overridden, and
// every way it can go wrong ends cuInit with one line that says what to
// change.
func TestClientTLS(t *testing.T) {
	if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libssl.so.3"); err != nil {
		if _, err := exec.LookPath("openssl"); err != nil {
			t.Skip("no OpenSSL on this machine")
		}
	}
	ca := tlstest.NewCA(t, "interposer")
	caFile, namedCA := ca.CertFile, ca.CertFile
	srv := tlsServer(t, ca, "127.0.0.1")
	named := tlsServer(t, ca, "gpud.test")
	plain := startServer(t)
	other := tlstest.NewCA(t, "other")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name, addr, mode string
		env              []string
		want             string // in stdout on success; in the one gpuctl line otherwise
	}{
		{"calls over TLS", srv.Addr(), "basic", []string{"GPUCTL_TLS_CA=" + caFile}, "PASS basic"},
		{"server name override", named.Addr(), "basic", []string{"GPUCTL_TLS_CA=" + namedCA, "GPUCTL_TLS_SERVER_NAME=gpud.test"}, "PASS basic"},
		{"CA of another authority", srv.Addr(), "nodevice", []string{"GPUCTL_TLS_CA=" + other.CertFile}, "certificate verify failed"},
		{"name not in the certificate", named.Addr(), "nodevice", []string{"GPUCTL_TLS_CA=" + namedCA}, "certificate is not valid for 127.0.0.1"},
		{"plaintext client, TLS server", srv.Addr(), "nodevice", nil, "serves --listen over TLS: set GPUCTL_TLS_CA"},
		{"TLS client, plaintext server", plain.Addr(), "nodevice", []string{"GPUCTL_TLS_CA=" + caFile}, "serves --listen without TLS"},
		{"CA file missing", srv.Addr(), "nodevice", []string{"GPUCTL_TLS_CA=/nonexistent/ca.pem"}, "no CA certificate could be loaded"},
		{"CA file not PEM", srv.Addr(), "nodevice", []string{"GPUCTL_TLS_CA=" + notPEM}, "no CA certificate could be loaded"},
		// Bulk copies: records sealed and opened by the library's threads
		// (as many as it picks, and three), and by the calling thread.
		{"bulk copies", srv.Addr(), "bulk", []string{"GPUCTL_TLS_CA=" + caFile}, "PASS bulk"},
		{"bulk copies on three threads", srv.Addr(), "bulk", []string{"GPUCTL_TLS_CA=" + caFile, "GPUCTL_TLS_THREADS=3"}, "PASS bulk"},
		{"bulk copies without threads", srv.Addr(), "bulk", []string{"GPUCTL_TLS_CA=" + caFile, "GPUCTL_TLS_THREADS=0"}, "PASS bulk"},
		{"bad thread count", srv.Addr(), "nodevice", []string{"GPUCTL_TLS_CA=" + caFile, "GPUCTL_TLS_THREADS=many"}, "GPUCTL_TLS_THREADS=many: want a number from 0 to 8"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := clientCmd(ctx, t, tc.addr, "secret-token", tc.mode)
			cmd.Env = append(cmd.Env, "GPUCTL_DEBUG=1")
			cmd.Env = append(cmd.Env, tc.env...)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			if err != nil || !strings.Contains(stdout.String(), "PASS "+tc.mode) {
				t.Fatalf("ctest %s: %v\n%s%s", tc.mode, err, stdout.String(), stderr.String())
			}
			lines := gpuctlLines(stderr.String())
			if tc.mode != "nodevice" {
				if !strings.Contains(stderr.String(), "TLS TLS_AES_") {
					t.Errorf("the client did not report TLS:\n%s", stderr.String())
				}
				// A record out of order or sealed wrong would fail
				// authentication and the client would reconnect and replay.
				if strings.Contains(stderr.String(), "reconnect") {
					t.Errorf("the client reconnected:\n%s", stderr.String())
				}
				env := strings.Join(tc.env, " ")
				started := strings.Contains(stderr.String(), "3 of 3 threads started")
				if strings.Contains(env, "THREADS=3") != started || strings.Contains(env, "THREADS=0") && strings.Contains(stderr.String(), "threads started") {
					t.Errorf("with %s the library's record threads started: %v\n%s", env, started, stderr.String())
				}
				return
			}
			if len(lines) != 1 || !strings.Contains(lines[0], tc.want) || !strings.Contains(lines[0], "TLS") {
				t.Fatalf("want one line containing %q and TLS, got:\n%s", tc.want, stderr.String())
			}
			t.Log(lines[0])
		})
	}
}

// TestClientTLSReplayAndMoves: over TLS, the client's reconnect and
// replay survive connections cut every 15 ms, concurrent threads and a
// launch flood with cut connections, and it follows a session moved
// between two TLS servers, with a new handshake each time.
func TestClientTLSReplayAndMoves(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		every time.Duration
		move  bool
	}{
		{[]string{"replay", "5000"}, 15 * time.Millisecond, false},
		{[]string{"threads", "8", "150"}, 25 * time.Millisecond, false},
		{[]string{"flood", "100000"}, 25 * time.Millisecond, false},
		{[]string{"bulk", "3", "6"}, 40 * time.Millisecond, false},
		{[]string{"replay", "20000"}, 20 * time.Millisecond, true},
	} {
		t.Run(fmt.Sprintf("%s/move=%v", tc.args[0], tc.move), func(t *testing.T) {
			ca := tlstest.NewCA(t, "interposer")
			caFile := ca.CertFile
			a, b := tlsServer(t, ca, "127.0.0.1"), (*testserver.Server)(nil)
			if tc.move {
				b = tlsServer(t, ca, "127.0.0.1") // a certificate of its own
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := clientCmd(ctx, t, a.Addr(), "secret-token", tc.args...)
			cmd.Env = append(cmd.Env, "GPUCTL_TLS_CA="+caFile)
			out, done := startCombined(t, cmd)
			events := 0
			var err error
			for from, to := a, b; ; {
				select {
				case err = <-done:
				case <-time.After(tc.every):
					if tc.move {
						if from.Sessions() == 1 {
							from.MoveTo(to)
							from, to = to, from
							events++
						}
					} else {
						events += a.DropAfterProgress()
					}
					continue
				}
				break
			}
			if err != nil || !strings.Contains(out.String(), "PASS "+tc.args[0]) {
				t.Fatalf("ctest %v: %v\n%s", tc.args, err, out.String())
			}
			if events == 0 {
				t.Fatalf("no connection was cut or moved; the test proved nothing\n%s", out.String())
			}
			n, bye := a.UsedSessions(), a.Goodbyes()
			if b != nil {
				n, bye = n+b.UsedSessions(), bye+b.Goodbyes()
			}
			// Ended by the program's goodbye, or left to the grace
			// period when a cut or move raced the exit: one session.
			if n+int(bye) != 1 {
				t.Fatalf("%d sessions left, %d ended by a goodbye: the client should have kept its one session", n, bye)
			}
			t.Logf("%d cuts or moves", events)
		})
	}
}

// TestNoTLSLibraryLinked: the library does not depend on OpenSSL, and a
// client without GPUCTL_TLS_CA never loads it.
func TestNoTLSLibraryLinked(t *testing.T) {
	f, err := elf.Open(filepath.Join(build(t), "libcuda.so.1"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	libs, err := f.ImportedLibraries()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range libs {
		if strings.Contains(l, "ssl") || strings.Contains(l, "crypto") {
			t.Fatalf("libcuda.so.1 links %s; it must load it only when asked (imports: %v)", l, libs)
		}
	}
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := clientCmd(ctx, t, srv.Addr(), "secret-token", "basic")
	cmd.Env = append(cmd.Env, "LD_DEBUG=files")
	out, err := cmd.CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("PASS basic")) {
		t.Fatalf("ctest basic: %v\n%s", err, out)
	}
	if bytes.Contains(out, []byte("libssl")) {
		t.Fatal("a plaintext client loaded libssl")
	}
}
