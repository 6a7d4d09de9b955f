package main

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

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
)

func runCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "run a CUDA program against a remote GPU",
		ArgsUsage: "-- CMD [ARGS...]",
		Description: "Runs CMD with gpuctl's libcuda.so.1 first on LD_LIBRARY_PATH and GPUCTL_SERVER and the\n" +
			"token in its environment, so every CUDA driver call goes to the gpud at --server.\n" +
			"With a tenant's token the session is the tenant's: it counts against the tenant's\n" +
			"max_sessions (past it, gpud refuses the session with one line) and its allocations\n" +
			"against max_mem_bytes (past it, they fail with CUDA_ERROR_OUT_OF_MEMORY).\n" +
			"With --tls-ca (or GPUCTL_TLS_CA) CMD speaks TLS to a gpud that serves --listen over TLS.\n" +
			"--priority and --label (GPUCTL_PRIORITY, GPUCTL_LABELS) give the session its priority (higher\n" +
			"wins when gpud preempts sessions for device memory) and labels (gpuctl preempt --selector).\n" +
			"gpuctl exits with CMD's status.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Usage: "gpud --listen address `HOST:PORT`", EnvVars: []string{"GPUCTL_SERVER"}},
			&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the host's token or a tenant's (or set GPUCTL_TOKEN)"},
			&cli.StringFlag{Name: "tls-ca", Usage: "speak TLS to --server, verifying gpud's certificate against the CA bundle in `FILE` (PEM)"},
			&cli.StringFlag{Name: "tls-server-name", Usage: "with --tls-ca, the `NAME` gpud's certificate must hold instead of the host part of --server"},
			&cli.StringFlag{Name: "priority", Usage: "the session's priority, an integer `N` (default 0; higher wins)", EnvVars: []string{"GPUCTL_PRIORITY"}},
			&cli.StringSliceFlag{Name: "label", Usage: "a `KEY=VALUE` label of the session (repeatable; added to GPUCTL_LABELS)"},
		},
		Action: func(c *cli.Context) error {
			return runProgram(c.Context, e, runArgs{server: c.String("server"), tokenFile: inherited(c, "token-file"),
				tlsCA: inherited(c, "tls-ca"), tlsServerName: inherited(c, "tls-server-name"), argv: c.Args().Slice(),
				priority: c.String("priority"), labels: c.StringSlice("label")})
		},
	}
}

// runArgs is `gpuctl run`'s command line.
type runArgs struct {
	server    string
	tokenFile string
	// tlsCA and tlsServerName become the program's GPUCTL_TLS_CA and
	// GPUCTL_TLS_SERVER_NAME.
	tlsCA, tlsServerName string
	argv                 []string
	// priority and labels become GPUCTL_PRIORITY and GPUCTL_LABELS; the
	// labels join those already in GPUCTL_LABELS.
	priority string
	labels   []string
}

// runProgram starts the program with the interposer and waits for it. Its
// exit status becomes gpuctl's.
func runProgram(ctx context.Context, e *env, a runArgs) error {
	if len(a.argv) > 0 && a.argv[0] == "--" {
		a.argv = a.argv[1:]
	}
	if len(a.argv) == 0 {
		return usageError("no program given: gpuctl run --server HOST:PORT -- CMD [ARGS...]")
	}
	if a.server == "" {
		return usageError("no server: pass --server HOST:PORT (gpud's --listen address) or set GPUCTL_SERVER")
	}
	if _, _, err := net.SplitHostPort(a.server); err != nil {
		return usageError("--server %q is not HOST:PORT", a.server)
	}
	lib, err := e.libDir()
	if err != nil {
		return err
	}
	env, err := runEnv(e.environ(), lib, a)
	if err != nil {
		return err
	}
	path, err := exec.LookPath(a.argv[0])
	if err != nil {
		return errs.Wrap(err, errs.InvalidArgument, "", "cannot run %s", a.argv[0])
	}
	cmd := exec.Command(path, a.argv[1:]...)
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.stdin, e.stdout, e.stderr
	if err := cmd.Start(); err != nil {
		return errs.Wrap(err, errs.InvalidArgument, "", "start %s", a.argv[0])
	}
	// gpuctl stands in for the program: a SIGTERM or Ctrl-C that reaches
	// gpuctl is passed on, and gpuctl waits for the program to end.
	stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	defer stop()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		return cli.Exit("", code)
	}
	return err
}

// runEnv is the program's environment: ours, with the interposer's
// directory first on LD_LIBRARY_PATH and the server, token and TLS
// settings set. The token travels as a file name when there is one, so it
// never shows in the process table.
func runEnv(base []string, lib string, a runArgs) ([]string, error) {
	drop := map[string]bool{"LD_LIBRARY_PATH": true, "GPUCTL_SERVER": true, "GPUCTL_TLS_CA": true, "GPUCTL_TLS_SERVER_NAME": true,
		"GPUCTL_PRIORITY": true, "GPUCTL_LABELS": true}
	attrs, err := sessionAttrs(base, a)
	if err != nil {
		return nil, err
	}
	var ldPath string
	var env []string
	for _, kv := range base {
		k, v, _ := strings.Cut(kv, "=")
		if k == "LD_LIBRARY_PATH" {
			ldPath = v
		}
		if a.tokenFile != "" && (k == "GPUCTL_TOKEN" || k == "GPUCTL_TOKEN_FILE") {
			continue
		}
		if !drop[k] {
			env = append(env, kv)
		}
	}
	if ldPath != "" {
		lib += ":" + ldPath
	}
	env = append(env, "LD_LIBRARY_PATH="+lib, "GPUCTL_SERVER="+a.server)
	env = append(env, attrs...)
	if a.tokenFile != "" {
		abs, err := filepath.Abs(a.tokenFile)
		if err != nil {
			return nil, err
		}
		if _, err := readToken(abs); err != nil {
			return nil, err
		}
		env = append(env, "GPUCTL_TOKEN_FILE="+abs)
	} else if !hasAny(base, "GPUCTL_TOKEN", "GPUCTL_TOKEN_FILE") {
		return nil, usageError("no token: pass --token-file FILE (gpud writes one to STATE_DIR/token) or set GPUCTL_TOKEN")
	}
	switch {
	case a.tlsCA != "":
		abs, err := filepath.Abs(a.tlsCA)
		if err != nil {
			return nil, err
		}
		// The same check the control API's callers make, so that a bad
		// file is one line here rather than a failed cuInit later.
		if _, err := control.ClientTLS(abs, a.tlsServerName); err != nil {
			return nil, err
		}
		env = append(env, "GPUCTL_TLS_CA="+abs)
		if a.tlsServerName != "" {
			env = append(env, "GPUCTL_TLS_SERVER_NAME="+a.tlsServerName)
		}
	case a.tlsServerName != "":
		return nil, usageError("--tls-server-name needs --tls-ca (or GPUCTL_TLS_CA): the CA that signed gpud's certificate")
	}
	return env, nil
}

// sessionAttrs checks the session's priority and labels and returns them
// as the program's GPUCTL_PRIORITY and GPUCTL_LABELS, so that a bad one
// is one line here rather than a refused session later.
func sessionAttrs(base []string, a runArgs) ([]string, error) {
	var out []string
	if a.priority != "" {
		p, err := api.ParsePriority(a.priority)
		if err != nil {
			return nil, errs.Wrap(err, errs.InvalidArgument, "", "--priority")
		}
		out = append(out, fmt.Sprintf("GPUCTL_PRIORITY=%d", p))
	}
	var text []string
	for _, kv := range base {
		if v, ok := strings.CutPrefix(kv, "GPUCTL_LABELS="); ok && strings.TrimSpace(v) != "" {
			text = append(text, v)
		}
	}
	text = append(text, a.labels...)
	l, err := api.ParseLabels(strings.Join(text, ","))
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "--label")
	}
	if len(l) > 0 {
		out = append(out, "GPUCTL_LABELS="+l.String())
	}
	return out, nil
}

func hasAny(env []string, keys ...string) bool {
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		for _, want := range keys {
			if k == want && v != "" {
				return true
			}
		}
	}
	return false
}

// libDir finds the directory holding gpuctl's libcuda.so.1: ../lib from
// the gpuctl binary (build/bin/gpuctl -> build/lib), or GPUCTL_LIB_DIR.
func (e *env) libDir() (string, error) {
	if d := e.getenv("GPUCTL_LIB_DIR"); d != "" {
		return checkLib(d)
	}
	exe, err := e.executable()
	if err != nil {
		return "", errs.Wrap(err, errs.Internal, "", "locate the gpuctl binary")
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	return checkLib(filepath.Join(filepath.Dir(filepath.Dir(exe)), "lib"))
}

func checkLib(dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, "libcuda.so.1")); err != nil {
		return "", errs.New(errs.FailedPrecondition, "", "libcuda.so.1 not found in %s: build it with `make build`, or set GPUCTL_LIB_DIR", dir)
	}
	return filepath.Abs(dir)
}

// usageError is an InvalidArgument error (exit status 2).
func usageError(format string, args ...any) error {
	return errs.New(errs.InvalidArgument, "", format, args...)
}

// inherited is flag name of the command itself, else of the commands it
// is under: run's and job's own flags, else the global ones (which also
// read GPUCTL_TOKEN_FILE, GPUCTL_TLS_CA and GPUCTL_TLS_SERVER_NAME).
func inherited(c *cli.Context, name string) string {
	for _, l := range c.Lineage() {
		if v := l.String(name); v != "" {
			return v
		}
	}
	return ""
}
