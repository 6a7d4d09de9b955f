package childproc

import (
	"errors"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestSignal(t *testing.T) {
	child := exec.Command("sleep", "60")
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	if err := Kill(pid); err != nil {
		t.Fatalf("kill own child: %v", err)
	}
	err := child.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child ended with %v, want SIGKILL", err)
	}
	// Reaped: the PID is free now (or someone else's); nothing is sent
	// and it is no error.
	if err := Kill(pid); err != nil && !errors.Is(err, ErrNotChild) {
		t.Errorf("kill reaped child: %v", err)
	}
}

func TestNotChild(t *testing.T) {
	// A grandchild: sh's child, not ours. It must survive.
	sh := exec.Command("sh", "-c", "sleep 60 & echo $!; wait")
	out, err := sh.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sh.Process.Kill(); _ = sh.Wait() })
	var gpid int
	buf := make([]byte, 32)
	n, _ := out.Read(buf)
	for _, c := range buf[:n] {
		if c >= '0' && c <= '9' {
			gpid = gpid*10 + int(c-'0')
		}
	}
	t.Cleanup(func() { _ = syscall.Kill(gpid, syscall.SIGKILL) })
	if err := Kill(gpid); !errors.Is(err, ErrNotChild) {
		t.Fatalf("kill of a grandchild: %v, want ErrNotChild", err)
	}
	time.Sleep(50 * time.Millisecond)
	if err := syscall.Kill(gpid, 0); err != nil {
		t.Fatalf("the grandchild was signalled: %v", err)
	}
	if err := Kill(0); !errors.Is(err, ErrNotChild) {
		t.Errorf("pid 0: %v", err)
	}
}
