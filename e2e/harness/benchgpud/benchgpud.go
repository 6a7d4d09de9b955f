// Package benchgpud starts a gpud on the emulated device for the
// benchmark commands under e2e/harness, which each used to carry their own
// copy of this start-up.
package benchgpud

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Gpud is a running gpud with a state directory of its own.
type Gpud struct {
	Listen, API string
	State       string // its --state-dir; Token is the token gpud wrote there
	cmd         *exec.Cmd
}

// Token is the path of the token gpud created in its state directory.
func (g *Gpud) Token() string { return filepath.Join(g.State, "token") }

// Start runs build/bin/gpud on two free loopback ports with a fresh state
// directory named after prefix, plus extra flags, and waits until it
// listens for clients.
func Start(build, prefix string, extra ...string) (*Gpud, error) {
	state, err := os.MkdirTemp("", prefix+"-")
	if err != nil {
		return nil, err
	}
	g := &Gpud{Listen: FreeAddr(), API: FreeAddr(), State: state}
	args := append([]string{"--listen", g.Listen, "--api", g.API, "--state-dir", state,
		"--backend", "emulated", "--log-level", "warn"}, extra...)
	g.cmd = exec.Command(filepath.Join(build, "bin/gpud"), args...)
	g.cmd.Stderr = os.Stderr
	if err := g.cmd.Start(); err != nil {
		os.RemoveAll(state)
		return nil, fmt.Errorf("start gpud: %w", err)
	}
	if err := WaitListening(g.Listen, 10*time.Second); err != nil {
		g.Stop()
		return nil, fmt.Errorf("gpud did not start: %w", err)
	}
	return g, nil
}

// Stop kills gpud and removes its state directory.
func (g *Gpud) Stop() {
	_ = g.cmd.Process.Kill()
	_ = g.cmd.Wait()
	os.RemoveAll(g.State)
}

// FreeAddr is a loopback address with a port nothing listens on now.
func FreeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// WaitListening waits up to d for addr to accept a connection.
func WaitListening(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}
