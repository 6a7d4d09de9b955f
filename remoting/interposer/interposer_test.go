package interposer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/control/tlstest"
	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/remoting/interposer/testserver"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// The library and the test program are built once per test binary with
// the same sources and flags as mk/interposer.mk.
var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

func dir() string {
	_, f, _, _ := runtime.Caller(0)
	return filepath.Dir(f)
}

func gcc(args ...string) error {
	out, err := exec.Command("gcc", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return nil
}

func build(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc not installed (make deps installs it)")
	}
	buildOnce.Do(func() {
		buildDir, buildErr = os.MkdirTemp("", "gpuctl-interposer-test-")
		if buildErr != nil {
			return
		}
		d := dir()
		srcs, _ := filepath.Glob(filepath.Join(d, "src", "*.c"))
		gen, _ := filepath.Glob(filepath.Join(d, "gen", "*.c"))
		args := []string{"-O2", "-g", "-fPIC", "-std=gnu11", "-pthread", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
			"-I" + filepath.Join(d, "include"), "-I" + filepath.Join(d, "src"), "-I" + filepath.Join(d, "gen"),
			"-shared", "-Wl,-soname,libcuda.so.1", "-Wl,--version-script=" + filepath.Join(d, "gen", "libcuda.map"), "-Wl,-z,defs",
			"-o", filepath.Join(buildDir, "libcuda.so.1")}
		if buildErr = gcc(append(args, append(srcs, gen...)...)...); buildErr != nil {
			return
		}
		for _, prog := range []string{"ctest", "layout", "rtest", "cachetest", "asynctest"} {
			buildErr = gcc("-O1", "-g", "-Wall", "-Werror", "-pthread", "-I"+filepath.Join(d, "include"), "-I"+filepath.Join(d, "src"),
				"-I"+filepath.Join(d, "gen"), "-o", filepath.Join(buildDir, prog), filepath.Join(d, "testdata", prog+".c"),
				"-L"+buildDir, "-l:libcuda.so.1", "-Wl,-rpath,"+buildDir, "-ldl")
			if buildErr != nil {
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

// buildFailpoints builds the library with -DGC_FAILPOINTS (test-only
// points, armed with GPUCTL_FAILPOINT) into a directory of its own; ctest
// loads it instead of the plain build when that directory is on
// LD_LIBRARY_PATH.
func buildFailpoints(t *testing.T) string {
	t.Helper()
	build(t)
	fpOnce.Do(func() {
		fpDir, fpErr = os.MkdirTemp("", "gpuctl-interposer-fp-")
		if fpErr != nil {
			return
		}
		d := dir()
		srcs, _ := filepath.Glob(filepath.Join(d, "src", "*.c"))
		gen, _ := filepath.Glob(filepath.Join(d, "gen", "*.c"))
		args := []string{"-O2", "-g", "-DGC_FAILPOINTS", "-fPIC", "-std=gnu11", "-pthread", "-Wall", "-Wextra", "-Werror", "-Wno-unused-parameter",
			"-I" + filepath.Join(d, "include"), "-I" + filepath.Join(d, "src"), "-I" + filepath.Join(d, "gen"),
			"-shared", "-Wl,-soname,libcuda.so.1", "-Wl,--version-script=" + filepath.Join(d, "gen", "libcuda.map"), "-Wl,-z,defs",
			"-o", filepath.Join(fpDir, "libcuda.so.1")}
		fpErr = gcc(append(args, append(srcs, gen...)...)...)
	})
	if fpErr != nil {
		t.Fatal(fpErr)
	}
	return fpDir
}

var (
	fpOnce sync.Once
	fpDir  string
	fpErr  error
)

// TestClientReplyOvertakesResend forces the race behind a stall seen after
// migrations: the connection ends while the client waits for a reply, the
// client reconnects, its sender thread writes the request again, and the
// server's reply is read by the waiting thread before the sender has
// returned from writing. The reply must reach its caller. The server cuts
// the connection at its twelfth synchronous request (failpoint
// "dispatch/sync"), and the library's failpoint "after-resend" holds the
// sender right after the resend until the reply has been handled. The
// client's silence bound is off, so nothing but a delivered reply lets
// the program finish.
func TestClientReplyOvertakesResend(t *testing.T) {
	lib := buildFailpoints(t)
	var fp failpoint.Set
	var syncs atomic.Int32
	fp.On("dispatch/sync", func(context.Context) error {
		if syncs.Add(1) == 12 {
			return errors.New("connection cut by the test")
		}
		return nil
	})
	srv, err := testserver.StartWith("127.0.0.1:0", "secret-token", nil, testserver.Options{Failpoints: &fp})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := clientCmd(ctx, t, srv.Addr(), "secret-token", "replay", "300")
	cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+lib, "GPUCTL_FAILPOINT=after-resend", "GPUCTL_REPLY_TIMEOUT=0")
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the client hung: the reply to its resent request was dropped\n%s", out)
	}
	if err != nil || !bytes.Contains(out, []byte("PASS replay")) {
		t.Fatalf("ctest replay: %v\n%s", err, out)
	}
	if fp.Hits("dispatch/sync") < 12 || !bytes.Contains(out, []byte("reconnected to")) {
		t.Fatalf("the connection was not cut at a synchronous request (%d reached):\n%s", fp.Hits("dispatch/sync"), out)
	}
	if !bytes.Contains(out, []byte("failpoint after-resend")) {
		t.Fatalf("the library with failpoints was not loaded, or its point was never reached:\n%s", out)
	}
}

// TestClientLiveness: a synchronous call that gets no reply while the
// server stays silent past GPUCTL_REPLY_TIMEOUT reconnects and replays,
// so a request the server swallowed is answered after all; a call the
// server is busy with for longer than that bound does not, because the
// server sends keepalives meanwhile. Both over plaintext and over TLS,
// where the keepalives are records of the connection's record layer.
func TestClientLiveness(t *testing.T) {
	for _, overTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plaintext", true: "tls"}[overTLS], func(t *testing.T) { testClientLiveness(t, overTLS) })
	}
}

func testClientLiveness(t *testing.T, overTLS bool) {
	opts := testserver.Options{Keepalive: 200 * time.Millisecond}
	var env []string
	if overTLS {
		if _, err := os.Stat("/usr/lib/x86_64-linux-gnu/libssl.so.3"); err != nil {
			if _, err := exec.LookPath("openssl"); err != nil {
				t.Skip("no OpenSSL on this machine")
			}
		}
		ca := tlstest.NewCA(t, "liveness")
		cert := ca.Issue(t, "gpud", "127.0.0.1")
		cfg, err := control.ServerTLS(cert.CertFile, cert.KeyFile, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		opts.TLS = cfg
		env = append(env, "GPUCTL_TLS_CA="+ca.CertFile)
	}
	cases := []struct {
		name          string
		point         string // where the server holds the nth synchronous request
		nth           int32
		hold          func(srv *testserver.Server) error
		wantReconnect bool
	}{
		{
			// The request vanishes: the server neither answers nor
			// sends anything until the client comes back on a new
			// connection, when the old one is dropped.
			name: "swallowed request", point: "dispatch/sync", nth: 12, wantReconnect: true,
			hold: func(srv *testserver.Server) error {
				n := srv.Accepted()
				for deadline := time.Now().Add(20 * time.Second); srv.Accepted() == n; time.Sleep(5 * time.Millisecond) {
					if time.Now().After(deadline) {
						return nil // never came back: let the test fail on its own
					}
				}
				return errors.New("request swallowed")
			},
		},
		{
			// A call that takes three times the bound, with keepalives.
			// (A device-to-host copy streams its reply and never reaches
			// dispatch/exec: the sixth is the final context synchronise.)
			name: "long call", point: "dispatch/exec", nth: 6, wantReconnect: false,
			hold: func(*testserver.Server) error { time.Sleep(3 * time.Second); return nil },
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fp failpoint.Set
			var srv *testserver.Server
			var syncs atomic.Int32
			fp.On(tc.point, func(context.Context) error {
				if syncs.Add(1) == tc.nth {
					return tc.hold(srv)
				}
				return nil
			})
			o := opts
			o.Failpoints = &fp
			var err error
			srv, err = testserver.StartWith("127.0.0.1:0", "secret-token", nil, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := clientCmd(ctx, t, srv.Addr(), "secret-token", "replay", "300")
			cmd.Env = append(append(cmd.Env, "GPUCTL_REPLY_TIMEOUT=1"), env...)
			t0 := time.Now()
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the client hung:\n%s", out)
			}
			if err != nil || !bytes.Contains(out, []byte("PASS replay")) {
				t.Fatalf("ctest replay: %v\n%s", err, out)
			}
			if fp.Hits(tc.point) < int(tc.nth) {
				t.Fatalf("%s reached %d times, never the request to hold (%d)", tc.point, fp.Hits(tc.point), tc.nth)
			}
			silent := bytes.Contains(out, []byte("no reply and no keepalive for"))
			if silent != tc.wantReconnect || bytes.Contains(out, []byte("reconnected to")) != tc.wantReconnect {
				t.Fatalf("reconnected after silence: %v, want %v\n%s", silent, tc.wantReconnect, out)
			}
			t.Logf("%s: %v", tc.name, time.Since(t0).Round(time.Millisecond))
		})
	}
}

// buildTSan builds the library and the test program with
// ThreadSanitizer, or skips when the toolchain lacks it.
func buildTSan(t *testing.T) string {
	t.Helper()
	build(t)
	tsanOnce.Do(func() {
		tsanDir, tsanErr = os.MkdirTemp("", "gpuctl-interposer-tsan-")
		if tsanErr != nil {
			return
		}
		d := dir()
		srcs, _ := filepath.Glob(filepath.Join(d, "src", "*.c"))
		gen, _ := filepath.Glob(filepath.Join(d, "gen", "*.c"))
		args := []string{"-O1", "-g", "-fsanitize=thread", "-Wno-tsan", "-fPIC", "-std=gnu11", "-pthread",
			"-I" + filepath.Join(d, "include"), "-I" + filepath.Join(d, "src"), "-I" + filepath.Join(d, "gen"),
			"-shared", "-Wl,-soname,libcuda.so.1", "-Wl,--version-script=" + filepath.Join(d, "gen", "libcuda.map"),
			"-o", filepath.Join(tsanDir, "libcuda.so.1")}
		if tsanErr = gcc(append(args, append(srcs, gen...)...)...); tsanErr != nil {
			return
		}
		for _, prog := range []string{"ctest", "asynctest"} {
			tsanErr = gcc("-O1", "-g", "-fsanitize=thread", "-pthread", "-I"+filepath.Join(d, "include"), "-o",
				filepath.Join(tsanDir, prog), filepath.Join(d, "testdata", prog+".c"),
				"-L"+tsanDir, "-l:libcuda.so.1", "-Wl,-rpath,"+tsanDir)
			if tsanErr != nil {
				return
			}
		}
	})
	if tsanErr != nil {
		t.Skipf("no ThreadSanitizer toolchain: %v", tsanErr)
	}
	return tsanDir
}

var (
	tsanOnce sync.Once
	tsanDir  string
	tsanErr  error
)

// TestClientThreadSanitizer runs the concurrent workloads under
// ThreadSanitizer while connections are cut, in plaintext and over TLS:
// any data race in the client's ring, sender, reply reader or TLS record
// layer fails the test.
func TestClientThreadSanitizer(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	exe := filepath.Join(buildTSan(t), "ctest")
	for _, overTLS := range []bool{false, true} {
		for _, args := range [][]string{{"threads", "6", "40"}, {"flood", "30000"}, {"replay", "1000"}, {"bulk", "2", "2"}} {
			t.Run(fmt.Sprintf("%s/tls=%v", args[0], overTLS), func(t *testing.T) {
				srv := startServer(t)
				var env []string
				if overTLS {
					ca := tlstest.NewCA(t, "tsan")
					srv = tlsServer(t, ca, "127.0.0.1")
					// Bulk copies seal and open on two library threads.
					env = append(env, "GPUCTL_TLS_CA="+ca.CertFile, "GPUCTL_TLS_THREADS=2")
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, exe, args...)
				cmd.Env = append(os.Environ(), "GPUCTL_SERVER="+srv.Addr(), "GPUCTL_TOKEN=secret-token", "GPUCTL_RECONNECT_TIMEOUT=5")
				cmd.Env = append(cmd.Env, env...)
				out, done := startCombined(t, cmd)
				// Cuts come every 30 ms, each after the client got
				// requests executed since the last (DropAfterProgress).
				var err error
				for waiting := true; waiting; {
					select {
					case err = <-done:
						waiting = false
					case <-time.After(30 * time.Millisecond):
						srv.DropAfterProgress()
					}
				}
				if err != nil || strings.Contains(out.String(), "ThreadSanitizer") || !strings.Contains(out.String(), "PASS "+args[0]) {
					t.Fatalf("ctest %s under ThreadSanitizer: %v\n%s", args[0], err, out.String())
				}
			})
		}
	}
}

func startServer(t *testing.T) *testserver.Server {
	t.Helper()
	srv, err := testserver.Start("127.0.0.1:0", "secret-token", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	return srv
}

func clientCmd(ctx context.Context, t *testing.T, addr, token string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(build(t), "ctest"), args...)
	cmd.Env = append(os.Environ(), "GPUCTL_SERVER="+addr, "GPUCTL_TOKEN="+token, "GPUCTL_RECONNECT_TIMEOUT=3")
	return cmd
}

func TestClientCalls(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("secret-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, token, mode, want string
		fromFile                bool
	}{
		{"basic", "secret-token", "basic", "PASS basic", false},
		{"token from a file", "", "basic", "PASS basic", true},
		{"wrong token", "not-the-token", "badtoken", "refused the token", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := clientCmd(ctx, t, srv.Addr(), tc.token, tc.mode)
			if tc.fromFile {
				cmd.Env = append(cmd.Env, "GPUCTL_TOKEN_FILE="+tokenFile)
			}
			out, err := cmd.CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte(tc.want)) {
				t.Fatalf("ctest %s: %v\n%s", tc.mode, err, out)
			}
		})
	}
}

// TestClientReplayAcrossDrops cuts the connection again and again while
// the client launches kernels and copies; the program checks that every
// request ran exactly once.
func TestClientReplayAcrossDrops(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clientCmd(ctx, t, srv.Addr(), "secret-token", "replay", "3000")
	out, done := startCombined(t, cmd)
	drops := 0
	tick := time.NewTicker(15 * time.Millisecond)
	defer tick.Stop()
	var err error
loop:
	for {
		select {
		case err = <-done:
			break loop
		case <-tick.C:
			drops += srv.DropAfterProgress()
		}
	}
	if err != nil || !strings.Contains(out.String(), "PASS replay") {
		t.Fatalf("ctest replay: %v\n%s", err, out.String())
	}
	if drops == 0 {
		t.Fatalf("no connection was dropped; the test proved nothing\n%s", out.String())
	}
	// The program's goodbye ends its session, unless a drop raced the
	// exit and took the goodbye with it (the session is then left to
	// the server's grace period): either way one session, not more.
	if n, bye := srv.UsedSessions(), srv.Goodbyes(); n+int(bye) != 1 {
		t.Fatalf("%d sessions left, %d ended by a goodbye: the client should have resumed its one session", n, bye)
	}
	if !strings.Contains(out.String(), "reconnected to") {
		t.Fatalf("the client did not log a reconnect\n%s", out.String())
	}
	t.Logf("%d connections dropped", drops)
}

// TestClientStress runs workloads that stress the client's concurrency
// and flow control, with and without cut connections: threads that share
// a context and interleave synchronous and asynchronous calls, and a
// flood of launches several times the request ring's capacity.
func TestClientStress(t *testing.T) {
	for _, tc := range []struct {
		args []string
		drop bool
	}{
		{[]string{"threads", "8", "150"}, false},
		{[]string{"threads", "8", "150"}, true},
		{[]string{"flood", "100000"}, false},
		{[]string{"flood", "100000"}, true},
	} {
		t.Run(fmt.Sprintf("%s/drops=%v", tc.args[0], tc.drop), func(t *testing.T) {
			drop := tc.drop
			srv := startServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := clientCmd(ctx, t, srv.Addr(), "secret-token", tc.args...)
			out, done := startCombined(t, cmd)
			var err error
			for waiting := true; waiting; {
				select {
				case err = <-done:
					waiting = false
				case <-time.After(25 * time.Millisecond):
					if drop {
						srv.DropAfterProgress()
					}
				}
			}
			if err != nil || !strings.Contains(out.String(), "PASS "+tc.args[0]) {
				t.Fatalf("ctest %s: %v\n%s", tc.args[0], err, out.String())
			}
		})
	}
}

// TestClientFollowsMoves moves the session between two servers while the
// client works; the client follows each "moved to" notice and replays.
func TestClientFollowsMoves(t *testing.T) {
	a, b := startServer(t), startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clientCmd(ctx, t, a.Addr(), "secret-token", "replay", "20000")
	out, done := startCombined(t, cmd)
	moves := 0
	var err error
	for from, to := a, b; ; from, to = to, from {
		select {
		case err = <-done:
		case <-time.After(20 * time.Millisecond):
			if from.Sessions() == 1 {
				from.MoveTo(to)
				moves++
			}
			continue
		}
		break
	}
	if err != nil || !strings.Contains(out.String(), "PASS replay") {
		t.Fatalf("ctest replay: %v\n%s", err, out.String())
	}
	if moves == 0 || !strings.Contains(out.String(), "session moved to") {
		t.Fatalf("%d moves; client output:\n%s", moves, out.String())
	}
	// One session, ended by the program's goodbye or, when a move raced
	// the exit, left to the server's grace period.
	if n, bye := a.UsedSessions()+b.UsedSessions(), a.Goodbyes()+b.Goodbyes(); n+int(bye) != 1 {
		t.Fatalf("%d sessions left, %d ended by a goodbye; want the one session", n, bye)
	}
	t.Logf("%d moves", moves)
}

// TestClientFindsItsSession: a client whose server is gone, and whose
// session another server took over without telling it, asks the other
// servers it was given (GPUCTL_SERVERS), one of which does not know the
// session, and goes on where the session is now.
func TestClientFindsItsSession(t *testing.T) {
	a, b, c := startServer(t), startServer(t), startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := clientCmd(ctx, t, a.Addr(), "secret-token", "replay", "20000")
	cmd.Env = append(cmd.Env, "GPUCTL_SERVERS="+c.Addr()+", "+b.Addr())
	out, done := startCombined(t, cmd)
	for a.Sessions() == 0 {
		select {
		case err := <-done:
			t.Fatalf("client ended before its session began: %v\n%s", err, out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	time.Sleep(50 * time.Millisecond)
	b.Adopt(a)
	a.Close()
	if err := <-done; err != nil || !strings.Contains(out.String(), "PASS replay") {
		t.Fatalf("ctest replay: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "asking the other 2 gpuds") || b.Goodbyes() != 1 || b.Sessions() != 0 || c.Sessions() != 0 {
		t.Fatalf("sessions a %d b %d (%d ended by a goodbye) c %d; client output:\n%s", a.Sessions(), b.Sessions(), b.Goodbyes(), c.Sessions(), out.String())
	}
}

// TestClientGoodbye: a program that exits normally ends its session at
// once (the server hears its goodbye, after the asynchronous work it
// queued); one that leaves with _exit, or whose goodbye is turned off,
// leaves its session to the server's grace period; a forked child's exit
// says nothing for its parent, whose session goes on serving it.
func TestClientGoodbye(t *testing.T) {
	for _, tc := range []struct {
		name, how string
		env       []string
		goodbye   bool
	}{
		{"exit", "exit", nil, true},
		{"_exit", "_exit", nil, false},
		{"turned off", "exit", []string{"GPUCTL_GOODBYE=0"}, false},
		{"forked child", "fork", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := clientCmd(ctx, t, srv.Addr(), "secret-token", "end", tc.how)
			cmd.Env = append(cmd.Env, tc.env...)
			out, err := cmd.CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("PASS end")) {
				t.Fatalf("ctest end %s: %v\n%s", tc.how, err, out)
			}
			if bytes.Contains(out, []byte("after the program's exit")) {
				t.Errorf("a call came after the goodbye:\n%s", out)
			}
			want, wantLeft := int64(0), 1
			if tc.goodbye {
				want, wantLeft = 1, 0
			}
			// The library waited for the server to close the connection,
			// so the server has ended the session by the time it exited.
			if bye, left := srv.Goodbyes(), srv.Sessions(); bye != want || left != wantLeft {
				t.Fatalf("%d sessions ended by a goodbye and %d left, want %d and %d\n%s", bye, left, want, wantLeft, out)
			}
		})
	}
}

// TestClientServerGone: once the server is gone for longer than
// GPUCTL_RECONNECT_TIMEOUT, calls fail with CUDA_ERROR_DEVICE_UNAVAILABLE
// instead of hanging.
func TestClientServerGone(t *testing.T) {
	srv := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := clientCmd(ctx, t, srv.Addr(), "secret-token", "dead")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	if !sc.Scan() || sc.Text() != "READY" {
		t.Fatalf("client did not get ready: %q\n%s", sc.Text(), stderr.String())
	}
	srv.Close()
	start := time.Now()
	fmt.Fprintln(stdin)
	var rest strings.Builder
	for sc.Scan() {
		rest.WriteString(sc.Text() + "\n")
	}
	err := cmd.Wait()
	if err != nil || !strings.Contains(rest.String(), "PASS dead") {
		t.Fatalf("ctest dead: %v\n%s%s", err, rest.String(), stderr.String())
	}
	if !strings.Contains(stderr.String(), "session is lost") {
		t.Errorf("the client did not say why calls fail:\n%s", stderr.String())
	}
	if el := time.Since(start); el > 20*time.Second {
		t.Errorf("calls took %v to fail", el)
	}
}

// TestHeaderLayouts checks that the C structs the library decodes frames
// with agree with package wire, field by field: Go encodes headers with
// distinct values and a C program prints what it decodes.
func TestHeaderLayouts(t *testing.T) {
	exe := filepath.Join(build(t), "layout")
	var req [wire.RequestHeaderSize]byte
	(&wire.RequestHeader{Len: 0x11223344, Op: 0x5566, Flags: 0x7788, Seq: 0x0102030405060708, Bulk: 0x1112131415161718}).Put(req[:])
	var rep [wire.ReplyHeaderSize]byte
	(&wire.ReplyHeader{Len: 0x21222324, Kind: 0x2526, Flags: 0x2728, Result: 0x292a2b2c, Seq: 0x3132333435363738,
		Executed: 0x4142434445464748, Bulk: 0x5152535455565758}).Put(rep[:])
	var hello bytes.Buffer
	wire.WriteHello(&hello, &wire.Hello{Flags: 3, Token: "tok", SessionID: "s-1", Secret: "se", LastSeq: 0x6162636465666768})
	var welcome bytes.Buffer
	wire.WriteWelcome(&welcome, &wire.Welcome{Status: wire.StatusMoved, SessionID: "s-12", Secret: "abc", Message: "h:1",
		MaxFrame: 0x71727374, KeepaliveMS: 0x75767778, LastExecuted: 0x8182838485868788, Features: 0x6566})
	tests := []struct {
		kind string
		b    []byte
		want string
	}{
		{"req", req[:], "len=11223344 op=5566 flags=7788 seq=102030405060708 bulk=1112131415161718"},
		{"rep", rep[:], "len=21222324 kind=2526 flags=2728 result=292a2b2c seq=3132333435363738 executed=4142434445464748 bulk=5152535455565758"},
		{"hello", hello.Bytes()[:wire.HelloSize], "magic=GPUH version=1 flags=3 token=3 sid=3 secret=2 last=6162636465666768"},
		{"welcome", welcome.Bytes()[:wire.WelcomeSize], "magic=GPUW version=1 status=5 sid=4 secret=3 msg=3 features=6566 maxframe=71727374 keepalive=75767778 last=8182838485868788"},
	}
	for _, tc := range tests {
		out, err := exec.Command(exe, tc.kind, hex.EncodeToString(tc.b)).CombinedOutput()
		if err != nil {
			t.Fatalf("layout %s: %v\n%s", tc.kind, err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("%s header decoded by C:\n got %s\nwant %s", tc.kind, got, tc.want)
		}
	}
}

// startCombined starts cmd with its stdout and stderr in one buffer and
// returns the buffer and a channel that gets cmd's exit: the tests that
// cut connections or move the session while a client runs all start it so.
func startCombined(t *testing.T, cmd *exec.Cmd) (*bytes.Buffer, <-chan error) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	return &out, done
}
