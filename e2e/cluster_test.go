package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cluster is a client host and GPU hosts A and B, each in its own network
// namespace, joined by a bridge in a fourth; every host runs a real gpud
// from build/bin. Cleanup stops the gpuds (a clean SIGTERM exit is
// required) and deletes the namespaces.
type cluster struct {
	t      *testing.T
	root   string // repository root
	work   string
	prefix string // namespace and interface name prefix
	net    string // "10.78.N"
	token  string
	hosts  map[string]*host
}

type host struct {
	name   string // "a", "b"
	ns     string
	ifname string
	ip     string
	listen string // --listen
	api    string // --api
	dir    string // --state-dir
	cmd    *exec.Cmd
	done   chan error
}

// port is the same on every host: a host that takes over another's
// address is then reachable where the client looks.
const (
	listenPort = 7070
	apiPort    = 7071
)

func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd) // this package is e2e/
}

// newCluster skips unless the test can run for real: root, ip, gcc, a
// CRIU >= 4.1 (make deps) and the binaries (make build).
func newCluster(t *testing.T) *cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the end-to-end tests need root (network namespaces, CRIU)")
	}
	root := repoRoot(t)
	for _, p := range []string{"build/bin/gpud", "build/bin/gpuctl", "build/lib/libcuda.so.1", "build/include/cuda.h"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Skipf("%s missing: run make build (make test does)", p)
		}
	}
	for _, tool := range []string{"ip", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s missing: run make deps", tool)
		}
	}
	c := &cluster{
		t: t, root: root, work: t.TempDir(), hosts: map[string]*host{},
		prefix: fmt.Sprintf("gcr%04x", rand.IntN(1<<16)),
		net:    fmt.Sprintf("10.78.%d", rand.IntN(250)+1),
	}
	c.token = fmt.Sprintf("%016x%016x", rand.Uint64(), rand.Uint64())
	if err := os.WriteFile(filepath.Join(c.work, "token"), []byte(c.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	c.ip("netns", "add", c.prefix+"sw")
	c.in(c.prefix+"sw", "ip", "link", "set", "lo", "up")
	c.in(c.prefix+"sw", "ip", "link", "add", "br0", "type", "bridge")
	c.in(c.prefix+"sw", "ip", "link", "set", "br0", "up")
	for i, name := range []string{"c", "a", "b"} {
		h := &host{name: name, ns: c.prefix + name, ifname: c.prefix + name, ip: fmt.Sprintf("%s.%d", c.net, i+2)}
		c.ip("netns", "add", h.ns)
		c.ip("link", "add", h.ifname, "type", "veth", "peer", "name", c.prefix+"p"+name)
		c.ip("link", "set", h.ifname, "netns", h.ns)
		c.ip("link", "set", c.prefix+"p"+name, "netns", c.prefix+"sw")
		c.in(c.prefix+"sw", "ip", "link", "set", c.prefix+"p"+name, "master", "br0", "up")
		c.in(h.ns, "ip", "link", "set", "lo", "up")
		c.in(h.ns, "ip", "addr", "add", h.ip+"/24", "dev", h.ifname)
		c.in(h.ns, "ip", "link", "set", h.ifname, "up")
		c.hosts[name] = h
	}
	return c
}

func (c *cluster) ip(args ...string) {
	c.t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		c.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (c *cluster) in(ns string, args ...string) {
	c.t.Helper()
	c.ip(append([]string{"netns", "exec", ns}, args...)...)
}

func (c *cluster) close() {
	for _, h := range c.hosts {
		if h.cmd != nil {
			c.stop(h, true)
		}
	}
	for _, n := range []string{"c", "a", "b", "sw"} {
		_ = exec.Command("ip", "netns", "del", c.prefix+n).Run()
	}
}

// start runs gpud on host name. It listens on all addresses, so that an
// address taken over from another host reaches it too.
func (c *cluster) start(name string) *host {
	c.t.Helper()
	h := c.hosts[name]
	h.listen = fmt.Sprintf("%s:%d", h.ip, listenPort)
	h.api = fmt.Sprintf("%s:%d", h.ip, apiPort)
	if h.dir == "" {
		h.dir = filepath.Join(c.work, "host-"+name)
	}
	log, err := os.Create(filepath.Join(c.work, "gpud-"+name+".log"))
	if err != nil {
		c.t.Fatal(err)
	}
	h.cmd = exec.Command("ip", "netns", "exec", h.ns, filepath.Join(c.root, "build/bin/gpud"),
		"--listen", fmt.Sprintf("0.0.0.0:%d", listenPort), "--api", h.api, "--state-dir", h.dir,
		"--token-file", filepath.Join(c.work, "token"), "--name", "host-"+name, "--backend", "emulated",
		"--emulated-mem", fmt.Sprint(int64(4)<<30))
	h.cmd.Stdout, h.cmd.Stderr = log, log
	if err := h.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	h.done = make(chan error, 1)
	go func() { h.done <- h.cmd.Wait(); log.Close() }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := c.ctl(h, "sessions"); err == nil {
			c.requireRoutes(h)
			return h
		}
		select {
		case err := <-h.done:
			c.t.Fatalf("gpud on host %s exited: %v\n%s", name, err, c.tail("gpud-"+name+".log"))
		default:
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("gpud on host %s did not come up\n%s", name, c.tail("gpud-"+name+".log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// requireRoutes skips the test when this gpud build does not serve the
// checkpoint routes at all (a plain 404 from the mux, not a session
// that is not found): the parts are built separately and wired last.
func (c *cluster) requireRoutes(h *host) {
	c.t.Helper()
	_, err := c.ctl(h, "checkpoint", "s-000000000000")
	if err != nil && strings.Contains(err.Error(), "HTTP 404") {
		c.t.Skipf("gpud does not serve POST /v1/sessions/{id}/checkpoint in this build: %v", err)
	}
}

// stop ends host h's gpud: SIGTERM and a clean exit, or SIGKILL.
func (c *cluster) stop(h *host, clean bool) {
	if !clean {
		_ = h.cmd.Process.Kill()
		<-h.done
		h.cmd = nil
		return
	}
	// ip netns exec passes signals on by exec-ing gpud in its place.
	_ = h.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-h.done:
		if err != nil {
			c.t.Errorf("gpud on host %s did not exit cleanly: %v\n%s", h.name, err, c.tail("gpud-"+h.name+".log"))
		}
	case <-time.After(20 * time.Second):
		_ = h.cmd.Process.Kill()
		<-h.done
		c.t.Errorf("gpud on host %s did not stop within 20 s of SIGTERM", h.name)
	}
	h.cmd = nil
}

func (c *cluster) tail(file string) string {
	b, _ := os.ReadFile(filepath.Join(c.work, file))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// ctl runs gpuctl against host h's API from the client host.
func (c *cluster) ctl(h *host, args ...string) (string, error) {
	full := append([]string{"netns", "exec", c.hosts["c"].ns, filepath.Join(c.root, "build/bin/gpuctl"),
		"--host", h.api, "--token-file", filepath.Join(c.work, "token")}, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, "ip", full...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("gpuctl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// ctlJSON runs gpuctl ... --json and decodes its output.
func (c *cluster) ctlJSON(h *host, v any, args ...string) error {
	out, err := c.ctl(h, append(args, "--json")...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		return fmt.Errorf("gpuctl %s --json: %v: %q", strings.Join(args, " "), err, out)
	}
	return nil
}

// program is the client workload: e2e/demo/workload.c, compiled once per
// cluster against our cuda.h and libcuda.
func (c *cluster) program() string {
	c.t.Helper()
	exe := filepath.Join(c.work, "workload")
	if _, err := os.Stat(exe); err == nil {
		return exe
	}
	lib := filepath.Join(c.root, "build/lib")
	out, err := exec.Command("gcc", "-O2", "-o", exe, filepath.Join(c.root, "e2e/demo/workload.c"),
		"-I"+filepath.Join(c.root, "build/include"), "-L"+lib, "-lcuda", "-Wl,-rpath,"+lib).CombinedOutput()
	if err != nil {
		c.t.Fatalf("compile the workload: %v\n%s", err, out)
	}
	return exe
}

// run is one workload run through gpuctl run on the client host.
type run struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan error
}

func (r *run) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.Write(p)
}

func (r *run) output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// runWorkload starts the workload against h's --listen address.
func (c *cluster) runWorkload(h *host, mib, steps, sleepMS int) *run {
	c.t.Helper()
	exe := c.program()
	r := &run{done: make(chan error, 1)}
	r.cmd = exec.Command("ip", "netns", "exec", c.hosts["c"].ns, filepath.Join(c.root, "build/bin/gpuctl"),
		"run", "--server", fmt.Sprintf("%s:%d", h.ip, listenPort), "--token-file", filepath.Join(c.work, "token"),
		"--", exe, fmt.Sprint(mib), fmt.Sprint(steps), fmt.Sprint(sleepMS))
	r.cmd.Stdout, r.cmd.Stderr = r, r
	if err := r.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	c.t.Cleanup(func() {
		_ = r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// result waits for the run and returns its RESULT line.
func (r *run) result(t *testing.T, d time.Duration) string {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for the cleanup
		out := r.output()
		if err != nil {
			t.Fatalf("workload failed: %v\n%s", err, out)
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "RESULT ") {
				return l
			}
		}
		t.Fatalf("workload printed no RESULT line:\n%s", out)
	case <-time.After(d):
		t.Fatalf("workload did not finish within %v:\n%s", d, r.output())
	}
	return ""
}

// waitStep waits until the run has printed step n.
func (r *run) waitStep(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	want := fmt.Sprintf("step %3d/", n)
	for !strings.Contains(r.output(), want) {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("workload ended before step %d: %v\n%s", n, err, r.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("workload did not reach step %d:\n%s", n, r.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionInfo is one entry of gpuctl sessions --json.
type sessionInfo struct {
	ID    string `json:"id"`
	State string `json:"state"`
	Host  string `json:"host"`
}

// session waits for exactly one session on h and returns it.
func (c *cluster) session(h *host) sessionInfo {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ss []sessionInfo
		err := c.ctlJSON(h, &ss, "sessions")
		if err == nil && len(ss) == 1 {
			return ss[0]
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("want one session on host %s: %v %v", h.name, ss, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
