package criubin

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// CRIU stops a task at the end of its parasite (on dump) and of its
// restorer (on restore) with a hardware breakpoint: it sets the task's
// first debug register to the sigreturn's address and waits for the
// trap. Some virtual machines accept the debug registers through ptrace
// but never raise the trap; CRIU then waits for it forever, holding the
// task stopped (seen on a PVM guest: every `criu dump`, of `sleep` too,
// hung after "Daemon ... exited trapping"). CRIU has a slower path that
// needs no breakpoint, stepping the task syscall by syscall to the
// sigreturn, which its fault-injection switch FI_NO_BREAKPOINTS
// (CRIU_FAULT=130) selects; it is what CRIU itself uses on Xen guests.

// noBreakpointsFault is CRIU's FI_NO_BREAKPOINTS.
const noBreakpointsFault = "130"

// BreakpointProbe is what Breakpoints found on this host.
type BreakpointProbe struct {
	// Work: a hardware breakpoint set through ptrace traps.
	Work bool
	// Why says how the probe ended when they do not.
	Why string
}

// Breakpoints reports whether hardware breakpoints work for ptrace on
// this host. It probes once per process: the answer is the machine's.
var Breakpoints = sync.OnceValue(probeBreakpoints)

// debugRegOffset is offsetof(struct user, u_debugreg) on x86-64.
const debugRegOffset = 848

// probeBreakpoints starts /bin/true traced, stops it at its exec, sets an
// execute breakpoint on the instruction it is about to run and lets it
// go: a working breakpoint traps at once, a broken one lets the program
// run to its exit.
func probeBreakpoints() BreakpointProbe {
	if runtime.GOARCH != "amd64" {
		// CRIU sets breakpoints on x86 only (and arm64, not probed
		// here): elsewhere it already steps to the sigreturn.
		return BreakpointProbe{Work: true}
	}
	bin := "/bin/true"
	if _, err := os.Stat(bin); err != nil {
		return BreakpointProbe{Why: fmt.Sprintf("no %s to probe with", bin)}
	}
	// ptrace requests must come from the thread that started the tracee.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		return BreakpointProbe{Why: fmt.Sprintf("start %s traced: %v", bin, err)}
	}
	pid := cmd.Process.Pid
	reap := func() {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		var ws syscall.WaitStatus
		for {
			if _, err := syscall.Wait4(pid, &ws, 0, nil); err != syscall.EINTR {
				break
			}
		}
		_ = cmd.Process.Release()
	}
	defer reap()
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		return BreakpointProbe{Why: fmt.Sprintf("the traced %s did not stop at its exec (%v, status %#x)", bin, err, uint32(ws))}
	}
	var regs syscall.PtraceRegs
	if err := syscall.PtraceGetRegs(pid, &regs); err != nil {
		return BreakpointProbe{Why: fmt.Sprintf("read its registers: %v", err)}
	}
	poke := func(reg int, v uint64) error {
		_, _, e := syscall.Syscall6(syscall.SYS_PTRACE, syscall.PTRACE_POKEUSR, uintptr(pid),
			uintptr(debugRegOffset+8*reg), uintptr(v), 0, 0)
		if e != 0 {
			return e
		}
		return nil
	}
	// DR0 at the next instruction, DR7 enabling it locally as an
	// execute breakpoint of length 1 (CRIU's settings).
	if err := poke(0, regs.Rip); err != nil {
		return BreakpointProbe{Why: fmt.Sprintf("set a debug register: %v", err)}
	}
	if err := poke(7, 1); err != nil {
		return BreakpointProbe{Why: fmt.Sprintf("enable the breakpoint: %v", err)}
	}
	if err := syscall.PtraceCont(pid, 0); err != nil {
		return BreakpointProbe{Why: fmt.Sprintf("continue the tracee: %v", err)}
	}
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return BreakpointProbe{Why: fmt.Sprintf("wait for the tracee: %v", err)}
		}
		break
	}
	switch {
	case ws.Stopped() && ws.StopSignal() == syscall.SIGTRAP:
		return BreakpointProbe{Work: true}
	case ws.Exited():
		return BreakpointProbe{Why: "a hardware breakpoint set through ptrace never trapped (the program ran to its exit)"}
	default:
		return BreakpointProbe{Why: fmt.Sprintf("the tracee stopped with status %#x instead of trapping", uint32(ws))}
	}
}

// Env is the environment CRIU runs in: gpud's, plus CRIU_FAULT=130
// where breakpoints do not work, unless the operator set CRIU_FAULT.
func Env() []string {
	env := os.Environ()
	if _, set := os.LookupEnv("CRIU_FAULT"); set || Breakpoints().Work {
		return env
	}
	return append(env, "CRIU_FAULT="+noBreakpointsFault)
}
