// Package childproc signals gpud's own child processes (workers it
// started or CRIU restored under it) without ever reaching a process that
// merely inherited a recycled PID.
//
// gpud reaps its children on its own goroutine, so by the time a pipeline
// step decides to end a worker, the worker may have exited and been reaped
// and its PID handed to any other process on the host. gpud runs as root:
// a plain kill(2) then ends a stranger. Kill opens a pidfd first, checks
// that the process it names is a child of this gpud, and signals through
// the pidfd, which keeps naming that one process even if the PID is reused
// in between.
package childproc

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNotChild says the PID names a process that is not this process's
// child (most often: the child is gone and the PID was reused).
var ErrNotChild = errors.New("not a child of this process")

// Signal sends sig to pid if pid is this process's child. A child that is
// already gone (or a zombie) is not an error; a PID that now names some
// other process is ErrNotChild and nothing is sent.
func Signal(pid int, sig unix.Signal) error {
	if pid <= 0 {
		return fmt.Errorf("signal pid %d: %w", pid, ErrNotChild)
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if errors.Is(err, unix.ENOSYS) {
		// Kernels before 5.3: fall back to the parent check alone.
		if ppid, perr := parent(pid); perr != nil || ppid != os.Getpid() {
			return notChild(pid, ppid, perr)
		}
		return ignoreGone(unix.Kill(pid, sig))
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	// The pidfd names whatever process held pid at open time; make sure
	// that process is ours before signalling it.
	ppid, err := parent(pid)
	if err != nil || ppid != os.Getpid() {
		if err == nil && ppid != os.Getpid() {
			// The process may have died between the open and the read
			// and the PID gone to a stranger: then our child is gone,
			// which is what the caller wanted.
			if unix.PidfdSendSignal(fd, 0, nil, 0) != nil {
				return nil
			}
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return notChild(pid, ppid, err)
	}
	return ignoreGone(unix.PidfdSendSignal(fd, sig, nil, 0))
}

// Kill is Signal with SIGKILL.
func Kill(pid int) error { return Signal(pid, unix.SIGKILL) }

func notChild(pid, ppid int, err error) error {
	if err != nil {
		return fmt.Errorf("signal pid %d: %w (%v)", pid, ErrNotChild, err)
	}
	return fmt.Errorf("signal pid %d: its parent is %d, not gpud %d: %w", pid, ppid, os.Getpid(), ErrNotChild)
}

func ignoreGone(err error) error {
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

// parent reads the parent PID from /proc/PID/stat.
func parent(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	return strconv.Atoi(f[1])
}
