package criu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
	"github.com/gpuctl/gpuctl/errs"
)

// childEnv makes the test binary run as a dumpable child (see runChild).
const childEnv = "GPUCTL_CRIU_TEST_CHILD"

func TestMain(m *testing.M) {
	if addr := os.Getenv(childEnv); addr != "" {
		runChild(addr)
		return
	}
	os.Exit(m.Run())
}

// runChild is a process shaped like a worker: the init of its own PID
// namespace, stdio on /dev/null, no files open that change. It counts in
// memory and reports "HOSTPID COUNT" every 10 ms on an unbound datagram
// socket, which CRIU dumps and restores as it is. The host PID is read
// through /proc/self, which resolves in the host's /proc mount, so each
// restored copy names itself.
func runChild(addr string) {
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err != nil {
		os.Exit(3)
	}
	// Abstract names travel as "@name"; the kernel wants a leading NUL.
	to := &syscall.SockaddrUnix{Name: "\x00" + strings.TrimPrefix(addr, "@")}
	for n := uint64(1); ; n++ {
		self, _ := os.Readlink("/proc/self")
		_ = syscall.Sendto(fd, []byte(self+" "+strconv.FormatUint(n, 10)), 0, to)
		time.Sleep(10 * time.Millisecond)
	}
}

func needCRIU(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("CRIU needs root")
	}
	bin, err := criubin.Find("")
	if err != nil {
		t.Skipf("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := GetVersion(ctx, bin)
	if err != nil {
		t.Fatalf("criu at %s does not answer: %v", bin, err)
	}
	if !v.AtLeast(criubin.MinVersion) {
		t.Skipf("criu %s at %s is older than %s; run make deps", v, bin, criubin.MinVersion)
	}
	return bin
}

// reports collects the children's "PID COUNT" datagrams.
type reports struct {
	conn *net.UnixConn
}

func listenReports(t *testing.T) (*reports, string) {
	t.Helper()
	addr := fmt.Sprintf("@gpuctl-criu-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &reports{conn: c}, addr
}

// next returns the next count reported by pid, waiting up to d.
func (r *reports) next(t *testing.T, pid int, d time.Duration) uint64 {
	t.Helper()
	deadline := time.Now().Add(d)
	buf := make([]byte, 128)
	for time.Now().Before(deadline) {
		_ = r.conn.SetReadDeadline(deadline)
		n, err := r.conn.Read(buf)
		if err != nil {
			break
		}
		f := strings.Fields(string(buf[:n]))
		if len(f) != 2 || f[0] != strconv.Itoa(pid) {
			continue
		}
		c, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			t.Fatalf("bad report %q", buf[:n])
		}
		return c
	}
	t.Fatalf("no report from pid %d within %v", pid, d)
	return 0
}

func startChild(t *testing.T, addr string) *exec.Cmd {
	t.Helper()
	return startChildFrom(t, os.Args[0], addr)
}

func startChildFrom(t *testing.T, exe, addr string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), childEnv+"="+addr)
	// Like a worker: PID 1 of a fresh PID namespace, its own session.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// reap kills a restored task and waits for it, proving it is our child.
func reap(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Errorf("kill restored pid %d: %v", pid, err)
	}
	var ws syscall.WaitStatus
	got, err := syscall.Wait4(pid, &ws, 0, nil)
	if err != nil || got != pid {
		t.Fatalf("wait4(%d) = %d, %v: the restored task is not our child", pid, got, err)
	}
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Errorf("restored pid %d ended with %v, want SIGKILL", pid, ws)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid %d still in /proc after reaping", pid)
	}
}

func TestDumpRestoreTwice(t *testing.T) {
	bin := needCRIU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, addr := listenReports(t)
	child := startChild(t, addr)
	pid := child.Process.Pid

	// Let it count a while, then dump; CRIU kills it afterwards.
	var before uint64
	for before < 20 {
		before = rep.next(t, pid, 10*time.Second)
	}
	img, logs := t.TempDir(), t.TempDir()
	if err := Dump(ctx, pid, img, Options{Binary: bin, LogDir: logs}); err != nil {
		t.Fatalf("dump: %v", err)
	}
	if err := child.Wait(); err == nil {
		t.Fatal("the dumped child exited cleanly; CRIU should have killed it")
	}
	if _, err := os.Stat(filepath.Join(logs, DumpLog)); err != nil {
		t.Errorf("no dump log in LogDir: %v", err)
	}

	// Two live copies of one image at once: each is the init of its own
	// new PID namespace, so their PIDs inside cannot collide.
	var pids []int
	for i := 0; i < 2; i++ {
		p, err := Restore(ctx, img, Options{Binary: bin, LogDir: t.TempDir()})
		if err != nil {
			t.Fatalf("restore %d: %v", i+1, err)
		}
		pids = append(pids, p)
	}
	if pids[0] == pids[1] || pids[0] == pid {
		t.Fatalf("restored pids %v (original %d) are not distinct", pids, pid)
	}
	for _, p := range pids {
		first := rep.next(t, p, 10*time.Second)
		if first < before {
			t.Errorf("restored pid %d counts from %d, below the %d reached before the dump: memory was lost", p, first, before)
		}
		later := rep.next(t, p, 10*time.Second)
		for later <= first+3 {
			later = rep.next(t, p, 10*time.Second)
		}
		if ns := nsInode(t, p, "pid"); ns == nsInode(t, os.Getpid(), "pid") {
			t.Errorf("restored pid %d shares our PID namespace", p)
		}
	}
	if nsInode(t, pids[0], "pid") == nsInode(t, pids[1], "pid") {
		t.Error("the two restored copies share one PID namespace")
	}
	for _, p := range pids {
		reap(t, p)
	}
}

func nsInode(t *testing.T, pid int, ns string) string {
	t.Helper()
	s, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// countingChild starts a worker-shaped child and waits for its first
// report; the context ends with the test, a minute at most.
func countingChild(t *testing.T) (bin string, ctx context.Context, rep *reports, pid int) {
	t.Helper()
	bin = needCRIU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	rep, addr := listenReports(t)
	pid = startChild(t, addr).Process.Pid
	rep.next(t, pid, 10*time.Second)
	return bin, ctx, rep, pid
}

// counting fails the test unless pid's count still goes up.
func (r *reports) counting(t *testing.T, pid int, after string) {
	t.Helper()
	a := r.next(t, pid, 10*time.Second)
	if b := r.next(t, pid, 10*time.Second); b <= a {
		t.Fatalf("pid %d stopped counting after %s: %d then %d", pid, after, a, b)
	}
}

func TestLeaveRunningThenRestore(t *testing.T) {
	bin, ctx, rep, pid := countingChild(t)
	img := t.TempDir()
	if err := Dump(ctx, pid, img, Options{Binary: bin, LeaveRunning: true}); err != nil {
		t.Fatalf("dump: %v", err)
	}
	// The original goes on counting...
	rep.counting(t, pid, "a leave-running dump")
	// ...and a copy runs beside it.
	p, err := Restore(ctx, img, Options{Binary: bin})
	if err != nil {
		t.Fatalf("restore beside the original: %v", err)
	}
	rep.next(t, p, 10*time.Second)
	reap(t, p)
}

// TestReplacedExecutable dumps a process whose executable was deleted
// after it started, as a gpud upgrade does to running workers: CRIU carries
// the file in the image as a ghost, and the restore runs.
func TestReplacedExecutable(t *testing.T) {
	bin := needCRIU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	exe := filepath.Join(t.TempDir(), "worker")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	rep, addr := listenReports(t)
	child := startChildFrom(t, exe, addr)
	rep.next(t, child.Process.Pid, 10*time.Second)
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	img := t.TempDir()
	if err := Dump(ctx, child.Process.Pid, img, Options{Binary: bin}); err != nil {
		t.Fatalf("dump with a deleted executable: %v", err)
	}
	pid, err := Restore(ctx, img, Options{Binary: bin})
	if err != nil {
		t.Fatalf("restore: %v", err)
	}
	rep.next(t, pid, 10*time.Second)
	reap(t, pid)
}

func TestFailuresAreClear(t *testing.T) {
	bin := needCRIU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		run     func() error
		kind    errs.Kind
		excerpt bool // the error quotes CRIU's log
	}{
		{"dump of a missing pid", func() error { return Dump(ctx, 1<<22-1, t.TempDir(), Options{Binary: bin}) }, errs.NotFound, false},
		{"dump of pid 0", func() error { return Dump(ctx, 0, t.TempDir(), Options{Binary: bin}) }, errs.InvalidArgument, false},
		{"dump into a missing dir", func() error { return Dump(ctx, os.Getpid(), "/nonexistent/img", Options{Binary: bin}) }, errs.InvalidArgument, false},
		{"dump into a file", func() error { return Dump(ctx, os.Getpid(), notDir, Options{Binary: bin}) }, errs.InvalidArgument, false},
		{"restore of an empty dir", func() error { _, err := Restore(ctx, t.TempDir(), Options{Binary: bin}); return err }, errs.Internal, true},
		{"missing binary", func() error { _, err := Restore(ctx, t.TempDir(), Options{Binary: "/nonexistent/criu"}); return err }, errs.FailedPrecondition, false},
		{"not executable", func() error { _, err := Restore(ctx, t.TempDir(), Options{Binary: notDir}); return err }, errs.FailedPrecondition, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.run()
			if err == nil {
				t.Fatal("succeeded")
			}
			if k := errs.KindOf(err); k != c.kind {
				t.Errorf("kind %q, want %q (%v)", k, c.kind, err)
			}
			var ce *Error
			if got := errors.As(err, &ce) && len(ce.Excerpt) > 0; got != c.excerpt {
				t.Errorf("quotes the log = %v, want %v: %v", got, c.excerpt, err)
			}
			if c.excerpt && !strings.Contains(err.Error(), "Error") {
				t.Errorf("the quoted log has no Error line: %v", err)
			}
		})
	}
}

func TestCancelledContextDoesNotHang(t *testing.T) {
	bin := needCRIU(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if _, err := GetVersion(ctx, bin); !errors.Is(err, context.Canceled) {
		t.Errorf("GetVersion with a cancelled context: %v", err)
	}
	// A CRIU that is killed mid-call must not leave us blocked reading.
	ctx, cancel = context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _ = Restore(ctx, t.TempDir(), Options{Binary: bin, Timeout: time.Second})
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("cancelled calls took %v", d)
	}
}

// GetVersion (over RPC) and criubin.VersionOf (the command line) agree.
func TestVersionOverRPCAndCommandLineAgree(t *testing.T) {
	bin := needCRIU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rpc, err := GetVersion(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := criubin.VersionOf(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	if rpc != cmd {
		t.Fatalf("criu's RPC says %s, its --version says %s", rpc, cmd)
	}
}

func TestLogExcerpt(t *testing.T) {
	cases := []struct {
		name, log string
		want      []string
	}{
		{"around the error", "a\nb\nc\nd\n(00.1) Error (criu/x.c:1): boom\ne\nf\ng\n", []string{"c", "d", "(00.1) Error (criu/x.c:1): boom", "e"}},
		{"two errors close together merge", "a\nError 1\nb\nError 2\nc\nd\n", []string{"a", "Error 1", "b", "Error 2", "c"}},
		{"no error: the tail", "1\n2\n3\n4\n5\n", []string{"3", "4", "5"}},
		{"empty", "", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "x.log")
			if err := os.WriteFile(p, []byte(c.log), 0o600); err != nil {
				t.Fatal(err)
			}
			got := LogExcerpt(p)
			if strings.Join(got, "\n") != strings.Join(c.want, "\n") {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
	if LogExcerpt("/nonexistent/log") != nil {
		t.Error("a missing log gave an excerpt")
	}
}
