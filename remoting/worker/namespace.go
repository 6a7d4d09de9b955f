package worker

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// SysProcAttr is how a worker, or any process shaped like one, is cloned:
// the init of new PID and mount namespaces, in its own session (CRIU
// refuses a pid-namespace init whose session leader is outside), killed
// with its parent so that a worker never outlives gpud.
//
// The mount namespace exists for one reason: the NVIDIA driver fails
// cuInit with CUDA_ERROR_OPERATING_SYSTEM in a PID namespace whose /proc
// is the host's (measured on an H200 with driver 580), so the worker
// mounts a /proc of its own; see InitNamespace.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS,
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
	}
}

// InitNamespace finishes in the child what SysProcAttr started. It makes
// every mount private, so nothing leaks back to the host, mounts a /proc
// for the new PID namespace when mountProc is set, drops the copies of
// namespace handles (nsfs mounts such as /run/netns/*, which CRIU cannot
// recreate and the worker never uses), and reopens stdin,
// stdout and stderr on this namespace's /dev/null: descriptors opened by
// the parent point into the parent's mount namespace, which CRIU cannot
// name when it dumps this one.
func InitNamespace(mountProc bool) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	if mountProc {
		if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return fmt.Errorf("mount /proc for the worker's PID namespace: %w", err)
		}
	}
	if err := dropNamespaceMounts(); err != nil {
		return err
	}
	null, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open /dev/null: %w", err)
	}
	defer unix.Close(null)
	for fd := 0; fd <= 2; fd++ {
		if err := unix.Dup3(null, fd, 0); err != nil {
			return fmt.Errorf("point fd %d at /dev/null: %w", fd, err)
		}
	}
	return nil
}

// Command prepares exe to start as a worker-shaped process: cloned with
// SysProcAttr, with an environment of only what a worker needs plus env,
// and inheriting no descriptor but ExtraFiles and stdio. Descriptors the
// caller inherited without close-on-exec (from whatever started it) would
// otherwise leak into the child and, pointing into another mount
// namespace, make it impossible to dump.
func Command(exe string, env []string, args ...string) *exec.Cmd {
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	cmd := exec.Command(exe, args...)
	cmd.Env = append(workerEnv(), env...)
	cmd.SysProcAttr = SysProcAttr()
	return cmd
}

func workerEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "GOTRACEBACK"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	// Without containermaxprocs=0 the Go runtime keeps the cgroup's CPU
	// quota files open for the life of the process, to track limit
	// changes; a worker must hold no files that CRIU would have to
	// reopen on another host.
	return append(env, "GODEBUG=containermaxprocs=0,updatemaxprocs=0")
}

// dropNamespaceMounts detaches every nsfs mount of this mount namespace.
func dropNamespaceMounts() error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return fmt.Errorf("read mountinfo: %w", err)
	}
	var targets []string
	for _, line := range strings.Split(string(b), "\n") {
		// id parent major:minor root target options [optional...] - fstype source super
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if !ok || len(f) < 5 || !strings.HasPrefix(post, "nsfs ") {
			continue
		}
		targets = append(targets, unescapeMount(f[4]))
	}
	// Innermost first, so a later target is never hidden under an earlier.
	for i := len(targets) - 1; i >= 0; i-- {
		if err := unix.Unmount(targets[i], unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("unmount %s: %w", targets[i], err)
		}
	}
	return nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Departed keeps the PID namespaces of workers whose sessions left this
// host, so that the kernel does not give their namespaces' inode numbers
// to new workers here. The NVIDIA driver names an abstract unix socket
// after its process's PID namespace and PID in it (@cuda-uvmfd-<pidns
// inode>-<pid>; a worker is PID 1 of its own namespace), CRIU restores
// the socket under that name, and the kernel hands a freed namespace's
// inode number to the next namespace made: the next session started here
// got the name of the one that had just migrated away, and its own
// migration to the same target failed in CRIU ("unix: Can't bind ...
// Address already in use"), measured on the H200 with driver 580. An
// open descriptor keeps a namespace (a few hundred bytes) and its number.
// The zero value keeps up to 4096, the oldest let go first.
type Departed struct {
	// Max bounds the namespaces kept; zero means 4096.
	Max int

	mu sync.Mutex
	fs []*os.File
}

// Keep holds the PID namespace of process pid, which must still run.
func (d *Departed) Keep(pid int) error {
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", pid))
	if err != nil {
		return fmt.Errorf("keep the PID namespace of worker %d: %w", pid, err)
	}
	max := d.Max
	if max <= 0 {
		max = 4096
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.fs = append(d.fs, f)
	for len(d.fs) > max {
		d.fs[0].Close()
		d.fs = d.fs[1:]
	}
	return nil
}

// Len is how many namespaces are kept.
func (d *Departed) Len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.fs)
}
