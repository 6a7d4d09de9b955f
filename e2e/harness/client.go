package harness

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Result is how a client program ended.
type Result struct {
	Stdout, Stderr string
	Code           int // exit status; 128+N for signal N; -1 if it timed out
	Duration       time.Duration
}

// RunClient runs a program in node's namespace through
// `gpuctl run --server host --token-file ...`, with a timeout so a hang
// fails the test instead of stalling it. env entries are added to the
// program's environment.
func (n *Node) RunClient(host *Host, timeout time.Duration, env []string, prog string, args ...string) Result {
	n.c.t.Helper()
	return n.RunClientTo(host.Listen(), host.TokenFile, timeout, env, prog, args...)
}

// RunClientTo is RunClient with an explicit server address and token
// file (e.g. a wrong token).
func (n *Node) RunClientTo(server, tokenFile string, timeout time.Duration, env []string, prog string, args ...string) Result {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	full := append([]string{"run", "--server", server, "--token-file", tokenFile, "--", prog}, args...)
	cmd := n.Command(ctx, n.c.Build.Gpuctl, full...)
	cmd.Env = append(cmd.Environ(), env...)
	cmd.WaitDelay = 2 * time.Second
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := Result{Stdout: stdout.String(), Stderr: stderr.String(), Duration: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Code = -1
	case errors.As(err, &ee):
		r.Code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			r.Code = 128 + int(ws.Signal())
		}
	case err != nil:
		n.c.t.Fatalf("run %s: %v", prog, err)
	}
	return r
}

// CompileC builds a C client program against build/include/cuda.h and
// build/lib/libcuda.so (gcc -lcuda), into the test's temp dir, and returns
// the binary's path.
func (c *Cluster) CompileC(src string, extra ...string) string {
	c.t.Helper()
	out := filepath.Join(c.t.TempDir(), strings.TrimSuffix(filepath.Base(src), ".c"))
	args := append([]string{"-O2", "-Wall", "-std=gnu11", "-I", c.Build.Include, "-o", out, src}, extra...)
	args = append(args, "-L", c.Build.LibDir, "-lcuda", "-lm", "-lpthread")
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		c.t.Fatalf("gcc %s: %v\n%s", src, err, b)
	}
	return out
}
