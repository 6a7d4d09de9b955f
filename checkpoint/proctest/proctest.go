// Package proctest is for tests only. It starts real processes shaped like session workers for
// the checkpoint, restore and migration tests: PID 1 of a fresh PID
// namespace, their own session, stdio on /dev/null, no changing files.
//
// The child is the test binary itself: a test's TestMain calls
// MaybeChild first. A child counts in memory and reports "HOSTPID COUNT"
// every 10 ms on an unbound datagram socket to the harness's abstract
// address, so a test can see that a restored copy lives, names itself and
// kept its memory.
package proctest

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/criu"
	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
	"github.com/gpuctl/gpuctl/remoting/worker"
)

const (
	childEnv = "GPUCTL_PROCTEST_CHILD"
	sizeEnv  = "GPUCTL_PROCTEST_MIB" // memory the child fills, in MiB
)

// MaybeChild turns the process into a child when the harness started it,
// and never returns then.
func MaybeChild() {
	spec := os.Getenv(childEnv)
	if spec == "" {
		return
	}
	// Shaped like a worker, but keeping the host's /proc: /proc/self then
	// names the host PID, which the harness tells copies apart by.
	if err := worker.InitNamespace(false); err != nil {
		os.Exit(5)
	}
	addr, tcp := strings.CutPrefix(spec, "tcp:")
	if tcp {
		// Hold an established TCP connection, which CRIU refuses to dump
		// without --tcp-established: a real dump failure.
		i := strings.LastIndexByte(addr, ',')
		if _, err := net.Dial("tcp", addr[i+1:]); err != nil {
			os.Exit(4)
		}
		addr = addr[:i]
	}
	// Memory to carry through dumps: pseudo-random, so that compression
	// does not flatter the numbers.
	var ballast []byte
	if mib, _ := strconv.Atoi(os.Getenv(sizeEnv)); mib > 0 {
		ballast = make([]byte, mib<<20)
		x := uint64(88172645463325252)
		for i := 0; i+8 <= len(ballast); i += 8 {
			x ^= x << 13
			x ^= x >> 7
			x ^= x << 17
			binary.LittleEndian.PutUint64(ballast[i:], x)
		}
	}
	fd, err := syscall.Socket(syscall.AF_UNIX, syscall.SOCK_DGRAM, 0)
	if err != nil {
		os.Exit(3)
	}
	to := &syscall.SockaddrUnix{Name: "\x00" + strings.TrimPrefix(addr, "@")}
	for n := uint64(1); ; n++ {
		// /proc/self resolves in the host's /proc mount: the host PID.
		self, _ := os.Readlink("/proc/self")
		_ = syscall.Sendto(fd, []byte(self+" "+strconv.FormatUint(n, 10)), 0, to)
		time.Sleep(10 * time.Millisecond)
		runtime.KeepAlive(ballast)
	}
}

// Main is a TestMain for packages whose tests start children: it runs
// the child when the harness started this process as one, else the tests.
func Main(m *testing.M) {
	MaybeChild()
	os.Exit(m.Run())
}

// NeedCRIU skips the test unless it runs as root with a CRIU >= 4.1, and
// returns the binary.
func NeedCRIU(t testing.TB) string {
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
	if v, err := criu.GetVersion(ctx, bin); err != nil || !v.AtLeast(criubin.MinVersion) {
		t.Skipf("criu at %s is not usable (%v, %v); run make deps", bin, v, err)
	}
	return bin
}

// Harness receives the children's reports.
type Harness struct {
	t    testing.TB
	conn *net.UnixConn
	addr string
	tcp  string
}

// New makes a harness; it skips the test when CRIU is unusable.
func New(t testing.TB) *Harness {
	t.Helper()
	NeedCRIU(t)
	addr := fmt.Sprintf("@gpuctl-proctest-%d-%d", os.Getpid(), time.Now().UnixNano())
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	t.Cleanup(func() { c.Close(); ln.Close() })
	return &Harness{t: t, conn: c, addr: addr, tcp: ln.Addr().String()}
}

// Start starts a child and waits for its first report. With tcp it holds
// a TCP connection, which makes CRIU's dump fail.
func (h *Harness) Start(tcp bool) *exec.Cmd {
	h.t.Helper()
	return h.start(tcp, 0)
}

// StartSized starts a child that first fills mib MiB of memory.
func (h *Harness) StartSized(mib int) *exec.Cmd {
	h.t.Helper()
	return h.start(false, mib)
}

func (h *Harness) start(tcp bool, mib int) *exec.Cmd {
	h.t.Helper()
	spec := h.addr
	if tcp {
		spec = "tcp:" + h.addr + "," + h.tcp
	}
	cmd := worker.Command(os.Args[0], []string{childEnv + "=" + spec, fmt.Sprintf("%s=%d", sizeEnv, mib)})
	if err := cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	h.Next(cmd.Process.Pid)
	return cmd
}

// Next returns the next count pid reports, failing the test after 10 s.
func (h *Harness) Next(pid int) uint64 {
	h.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	buf := make([]byte, 128)
	for {
		_ = h.conn.SetReadDeadline(deadline)
		n, err := h.conn.Read(buf)
		if err != nil {
			h.t.Fatalf("no report from pid %d: %v", pid, err)
		}
		f := strings.Fields(string(buf[:n]))
		if len(f) == 2 && f[0] == strconv.Itoa(pid) {
			c, _ := strconv.ParseUint(f[1], 10, 64)
			return c
		}
	}
}

// Counting asserts that pid is alive and its count advances, and returns
// the last count seen.
func (h *Harness) Counting(pid int) uint64 {
	h.t.Helper()
	a := h.Next(pid)
	b := h.Next(pid)
	for b <= a+2 {
		b = h.Next(pid)
	}
	return b
}
