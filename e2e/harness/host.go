package harness

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Ports gpud uses inside each host namespace.
const (
	ListenPort = "7070"
	APIPort    = "7071"
)

// HostOptions adjust a gpud.
type HostOptions struct {
	// TokenFile is shared by hosts that migrate to each other; empty gives
	// the host a token file of its own.
	TokenFile string
	// Args are extra gpud flags (e.g. "--grace", "2s").
	Args []string
	// GpuctlEnv is added to the environment of every gpuctl the harness
	// runs against this host (e.g. "GPUCTL_TLS_CA=" for a plaintext host
	// in a test whose environment names a CA).
	GpuctlEnv []string
	// StateDir is gpud's --state-dir; empty: a fresh one (see Restart).
	StateDir string
	// Env is added to gpud's environment (e.g. GPUD_FAILPOINTS=FILE).
	Env []string
}

// Host is a namespace running gpud.
type Host struct {
	*Node
	StateDir  string
	TokenFile string
	token     string
	args      []string
	cmd       *exec.Cmd
	out       *lineWriter
	exited    chan struct{}
	exitErr   error
	killed    bool
	// The ports gpud listens on in the namespace.
	listenPort, apiPort string
	gpuctlEnv           []string
	opts                HostOptions
}

// Restart stops h's gpud with SIGTERM (it must exit 0) and starts a new
// one in its place: the same namespace, ports, flags and state dir.
func (c *Cluster) Restart(h *Host) *Host {
	c.t.Helper()
	if err := h.Stop(20 * time.Second); err != nil {
		c.t.Fatalf("gpud on %s did not shut down cleanly before its restart: %v", h.Name, err)
	}
	opts := h.opts
	opts.StateDir = h.StateDir
	return c.startHost(h.Node, h.Name, h.listenPort, h.apiPort, opts)
}

// Listen is the address clients connect to (gpud --listen).
func (h *Host) Listen() string { return net.JoinHostPort(h.IP, h.listenPort) }

// API is the control API address (gpud --api).
func (h *Host) API() string { return net.JoinHostPort(h.IP, h.apiPort) }

// Token is the host's token.
func (h *Host) Token() string { return h.token }

// Log is everything gpud wrote to stderr so far.
func (h *Host) Log() string { return h.out.String() }

// NewHost creates a node named name and starts gpud in it, waiting until
// its API answers. Cleanup stops gpud with SIGTERM and requires exit 0
// (unless the test killed it).
func (c *Cluster) NewHost(name string, opts HostOptions) *Host {
	c.t.Helper()
	return c.startHost(c.NewNode(name), name, ListenPort, APIPort, opts)
}

// Ports of a second gpud in a host's namespace (NewHostBeside).
const (
	BesideListenPort = "7080"
	BesideAPIPort    = "7081"
)

// NewHostBeside starts a second gpud, named name, in h's namespace on
// the Beside ports: two gpuds on one machine, which share abstract unix
// socket names, so that a migration between them takes the handover path.
func (c *Cluster) NewHostBeside(h *Host, name string, opts HostOptions) *Host {
	c.t.Helper()
	n := *h.Node // the same namespace, under its own name
	n.Name = name
	return c.startHost(&n, name, BesideListenPort, BesideAPIPort, opts)
}

func (c *Cluster) startHost(n *Node, name, listenPort, apiPort string, opts HostOptions) *Host {
	c.t.Helper()
	c.mu.Lock()
	c.gpuds[n.NS]++
	c.mu.Unlock()
	h := &Host{Node: n, StateDir: filepath.Join(c.t.TempDir(), name), TokenFile: opts.TokenFile,
		listenPort: listenPort, apiPort: apiPort, gpuctlEnv: opts.GpuctlEnv, opts: opts}
	if opts.StateDir != "" {
		h.StateDir = opts.StateDir
	}
	h.args = []string{"--listen", h.Listen(), "--api", h.API(), "--state-dir", h.StateDir, "--name", name, "--backend", "emulated"}
	if opts.TokenFile != "" {
		h.args = append(h.args, "--token-file", opts.TokenFile)
	}
	h.args = append(h.args, opts.Args...)
	h.out = &lineWriter{t: c.t, prefix: "gpud[" + name + "] "}
	h.start()
	c.t.Cleanup(func() { h.shutdown() })
	if h.TokenFile == "" {
		h.TokenFile = filepath.Join(h.StateDir, "token")
	}
	if err := h.waitReady(15 * time.Second); err != nil {
		c.t.Fatalf("gpud on %s did not come up: %v\n%s", name, err, h.Log())
	}
	return h
}

func (h *Host) start() {
	h.exited = make(chan struct{})
	h.exitErr = nil
	h.cmd = h.Command(context.Background(), h.c.Build.Gpud, h.args...)
	if len(h.opts.Env) > 0 {
		h.cmd.Env = append(h.cmd.Environ(), h.opts.Env...)
	}
	h.cmd.Stdout, h.cmd.Stderr = h.out, h.out
	if err := h.cmd.Start(); err != nil {
		h.c.t.Fatalf("start gpud on %s: %v", h.Name, err)
	}
	cmd, exited := h.cmd, h.exited
	go func() {
		err := cmd.Wait()
		h.exitErr = err
		close(exited)
	}()
}

// Restart starts gpud again, with the same flags and state dir, after it
// was killed or stopped, and waits until it answers; cleanup then again
// requires a clean exit.
func (h *Host) Restart() error {
	select {
	case <-h.exited:
	default:
		return fmt.Errorf("gpud on %s is still running", h.Name)
	}
	h.killed = false
	h.start()
	if err := h.waitReady(15 * time.Second); err != nil {
		return fmt.Errorf("gpud on %s did not come back: %w", h.Name, err)
	}
	return nil
}

// Running reports whether gpud's process is alive.
func (h *Host) Running() bool {
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

// waitReady polls GET /v1/host from inside the namespace until it
// answers with the token.
func (h *Host) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case <-h.exited:
			return fmt.Errorf("gpud exited: %v", h.exitErr)
		default:
		}
		if b, err := os.ReadFile(h.TokenFile); err == nil && len(strings.TrimSpace(string(b))) > 0 {
			h.token = strings.TrimSpace(string(b))
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			out, err := h.Gpuctl(ctx, "host", "--json")
			cancel()
			if err == nil && strings.Contains(out, `"backend"`) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Gpuctl runs a gpuctl control command against this host from inside its
// namespace and returns stdout; a failure's error includes stderr.
func (h *Host) Gpuctl(ctx context.Context, args ...string) (string, error) {
	full := append([]string{"--host", h.API(), "--token-file", h.TokenFile}, args...)
	cmd := h.Command(ctx, h.c.Build.Gpuctl, full...)
	cmd.Env = append(cmd.Environ(), h.gpuctlEnv...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("gpuctl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// Kill ends gpud with SIGKILL, as a crash would; cleanup then does not
// require a clean exit.
func (h *Host) Kill() {
	h.killed = true
	_ = h.cmd.Process.Signal(syscall.SIGKILL)
	<-h.exited
}

// Stop shuts gpud down with SIGTERM and returns its exit error (nil for
// status 0).
func (h *Host) Stop(timeout time.Duration) error {
	select {
	case <-h.exited:
		return h.exitErr
	default:
	}
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-h.exited:
		return h.exitErr
	case <-time.After(timeout):
		_ = h.cmd.Process.Signal(syscall.SIGKILL)
		<-h.exited
		return fmt.Errorf("gpud did not exit within %v of SIGTERM", timeout)
	}
}

func (h *Host) shutdown() {
	t := h.c.t
	err := h.Stop(20 * time.Second)
	h.c.mu.Lock()
	h.c.gpuds[h.NS]--
	others := h.c.gpuds[h.NS]
	h.c.mu.Unlock()
	if h.killed {
		return
	}
	if err != nil {
		t.Errorf("gpud on %s did not shut down cleanly: %v", h.Name, err)
	}
	// No worker may outlive gpud; with another gpud in the namespace, the
	// last one to stop checks.
	if others > 0 {
		return
	}
	if out, _ := exec.Command("ip", "netns", "pids", h.NS).Output(); strings.TrimSpace(string(out)) != "" {
		t.Errorf("processes left in %s after gpud stopped: %s", h.NS, strings.Fields(string(out)))
		for _, p := range strings.Fields(string(out)) {
			var pid int
			if _, err := fmt.Sscan(p, &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
}
