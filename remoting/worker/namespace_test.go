package worker

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestUnescapeMount(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/run/netns/a", "/run/netns/a"},
		{`/mnt/with\040space`, "/mnt/with space"},
		{`/tab\011and\134slash`, "/tab\tand\\slash"},
		{`/short\04`, `/short\04`},
		{`/not\9990octal`, `/not\9990octal`},
	} {
		if got := unescapeMount(tc.in); got != tc.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// pidnsInode starts sleep as the init of a new PID namespace and
// returns it with its namespace's inode number.
func pidnsInode(t *testing.T) (*exec.Cmd, uint64) {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID}
	if err := cmd.Start(); err != nil {
		t.Skipf("no new PID namespace here (needs root): %v", err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/pid", cmd.Process.Pid), &st); err != nil {
		t.Fatal(err)
	}
	return cmd, st.Ino
}

func end(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// TestDeparted: the number of a namespace Departed keeps is not given to
// the next one made once its process is gone, and the bound lets the
// oldest go.
func TestDeparted(t *testing.T) {
	d := &Departed{Max: 2}
	kept := map[uint64]bool{}
	for range 3 {
		cmd, ino := pidnsInode(t)
		if kept[ino] {
			t.Errorf("a new PID namespace got inode %d, which Departed keeps", ino)
		}
		if err := d.Keep(cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
		kept[ino] = true
		end(cmd)
		// Freed after an RCU grace period: unkept, the next namespace
		// made then gets the same number (measured on this kernel).
		time.Sleep(100 * time.Millisecond)
	}
	if n := d.Len(); n != 2 {
		t.Errorf("Departed keeps %d namespaces, want its Max of 2", n)
	}
	if err := d.Keep(1 << 30); err == nil {
		t.Error("Keep of no process returned no error")
	}
}
