// Package harness runs end-to-end tests across network namespaces: each
// GPU host is a namespace running a real gpud (build/bin/gpud), clients run
// in namespaces of their own through `gpuctl run`, and all of them hang off
// a bridge that lives in one more namespace, so a test touches nothing of
// the machine's own network.
//
// It builds nothing: `make build` first. Every namespace, link and
// process is removed in t.Cleanup, and a gpud must shut down cleanly
// (SIGTERM, exit 0) unless the test killed it on purpose.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// Build locates the outputs of `make build`.
type Build struct {
	Root    string // the repository
	Gpud    string // build/bin/gpud
	Gpuctl  string // build/bin/gpuctl
	LibDir  string // build/lib, holding libcuda.so.1
	Include string // build/include, holding cuda.h
}

// FindBuild finds the repository above the working directory and checks
// that `make build` has run.
func FindBuild(t testing.TB) *Build {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/gpuctl/gpuctl\n")) {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("cannot find the gpuctl repository above the working directory")
		}
		dir = parent
	}
	b := &Build{
		Root:    dir,
		Gpud:    filepath.Join(dir, "build/bin/gpud"),
		Gpuctl:  filepath.Join(dir, "build/bin/gpuctl"),
		LibDir:  filepath.Join(dir, "build/lib"),
		Include: filepath.Join(dir, "build/include"),
	}
	for _, p := range []string{b.Gpud, b.Gpuctl, filepath.Join(b.LibDir, "libcuda.so.1"), filepath.Join(b.Include, "cuda.h")} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is missing: run `make build` before the end-to-end tests", p)
		}
	}
	return b
}

// requirements skips the test where namespaces cannot be made.
func requirements(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("end-to-end tests create network namespaces, which needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("end-to-end tests need the ip command (iproute2)")
	}
}

// Cluster is one test's network: a bridge and the nodes on it.
type Cluster struct {
	t      testing.TB
	Build  *Build
	prefix string // unique per cluster; starts every namespace name
	bridge string // the namespace holding the bridge
	subnet string // "10.77.0."

	mu    sync.Mutex
	nodes int
	gpuds map[string]int // gpuds running in each namespace
}

// New creates a cluster for t. Namespace names are "gx" + 6 random hex
// digits + a suffix, so parallel tests and leftovers never collide.
func New(t testing.TB) *Cluster {
	t.Helper()
	requirements(t)
	return newCluster(t, FindBuild(t))
}

// newCluster makes the network only; the harness's own tests use it
// without a build.
func newCluster(t testing.TB, b *Build) *Cluster {
	t.Helper()
	var r [3]byte
	_, _ = rand.Read(r[:])
	c := &Cluster{t: t, Build: b, prefix: "gx" + hex.EncodeToString(r[:]), subnet: "10.77.0.", gpuds: map[string]int{}}
	c.bridge = c.prefix + "-br"
	c.mustIP("netns", "add", c.bridge)
	t.Cleanup(func() { c.ip("netns", "del", c.bridge) })
	c.mustIPNS(c.bridge, "link", "add", "br0", "type", "bridge")
	c.mustIPNS(c.bridge, "link", "set", "br0", "up")
	c.mustIPNS(c.bridge, "link", "set", "lo", "up")
	return c
}

func (c *Cluster) ip(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func (c *Cluster) mustIP(args ...string) {
	c.t.Helper()
	if out, err := c.ip(args...); err != nil {
		c.t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
}

func (c *Cluster) mustIPNS(ns string, args ...string) {
	c.t.Helper()
	c.mustIP(append([]string{"-n", ns}, args...)...)
}

// Node is a network namespace on the cluster's bridge.
type Node struct {
	c    *Cluster
	Name string
	NS   string // namespace name
	IP   string
	port string // its link's end on the bridge
}

// NewNode creates a namespace with one link to the bridge and an address
// on the cluster's subnet.
func (c *Cluster) NewNode(name string) *Node {
	c.t.Helper()
	c.mu.Lock()
	c.nodes++
	idx := c.nodes
	c.mu.Unlock()
	n := &Node{c: c, Name: name, NS: fmt.Sprintf("%s-%d", c.prefix, idx), IP: fmt.Sprintf("%s%d", c.subnet, idx+1), port: fmt.Sprintf("p%d", idx)}
	c.mustIP("netns", "add", n.NS)
	c.t.Cleanup(func() { c.ip("netns", "del", n.NS) })
	tmp := fmt.Sprintf("%s-v%d", c.prefix, idx) // in the root namespace only for a moment
	c.mustIP("link", "add", tmp, "type", "veth", "peer", "name", n.port, "netns", c.bridge)
	c.mustIP("link", "set", tmp, "netns", n.NS)
	c.mustIPNS(n.NS, "link", "set", tmp, "name", "eth0")
	c.mustIPNS(n.NS, "addr", "add", n.IP+"/24", "dev", "eth0")
	c.mustIPNS(n.NS, "link", "set", "eth0", "up")
	c.mustIPNS(n.NS, "link", "set", "lo", "up")
	c.mustIPNS(c.bridge, "link", "set", n.port, "master", "br0")
	c.mustIPNS(c.bridge, "link", "set", n.port, "up")
	return n
}

// LinkDown cuts the node off the network (its bridge port goes down);
// connections stall, as on a cut cable. LinkUp restores it.
func (n *Node) LinkDown() { n.c.mustIPNS(n.c.bridge, "link", "set", n.port, "down") }

// LinkUp restores the node's link.
func (n *Node) LinkUp() { n.c.mustIPNS(n.c.bridge, "link", "set", n.port, "up") }

// CutLink takes the node's link down for d, then up again, in the
// background; the returned channel closes when the link is back.
func (n *Node) CutLink(d time.Duration) <-chan struct{} {
	n.LinkDown()
	done := make(chan struct{})
	go func() {
		time.Sleep(d)
		_, _ = n.c.ip("-n", n.c.bridge, "link", "set", n.port, "up")
		close(done)
	}()
	return done
}

// ResetConnections aborts the node's TCP connections to addr (HOST:PORT)
// with the kernel's socket destroy (ss -K), as a link down for longer than
// TCP waits would end them: the node's side sees its connection fail.
func (n *Node) ResetConnections(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	out, err := exec.Command("ip", "netns", "exec", n.NS, "ss", "-K", "dst", host, "dport", "=", port).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ss -K: %v: %s", err, out)
	}
	return nil
}

// Command returns a command that runs inside the node's namespace.
func (n *Node) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.NS, name}, args...)...)
}

// lineWriter forwards a process's output to the test log, line by line.
type lineWriter struct {
	t      testing.TB
	prefix string
	mu     sync.Mutex
	buf    []byte
	all    bytes.Buffer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.t.Logf("%s%s", w.prefix, w.buf[:i])
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}
