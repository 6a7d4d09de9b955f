// Command gpuctl is the command-line client of gpud's control API, and the
// launcher (`gpuctl run`) that points a program at a remote GPU.
//
// Each subcommand lives in its own file and is a function returning a
// *cli.Command; output goes through the env's Stdout and Stderr so tests can
// capture it.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args, osEnv())
	stop()
	os.Exit(code)
}

// run executes gpuctl with args and returns the exit status.
func run(ctx context.Context, args []string, e *env) int {
	app := newApp(e)
	if err := app.RunContext(ctx, reorderArgs(app, args)); err != nil {
		var ec cli.ExitCoder
		if asExit(err, &ec) {
			if msg := ec.Error(); msg != "" {
				fmt.Fprintln(e.stderr, "gpuctl:", msg)
			}
			return ec.ExitCode()
		}
		fmt.Fprintln(e.stderr, "gpuctl:", oneLine(err.Error()))
		return exitCode(err)
	}
	return 0
}

func newApp(e *env) *cli.App {
	return &cli.App{
		Name:            "gpuctl",
		Usage:           "use, checkpoint and migrate remote GPU sessions",
		Writer:          e.stdout,
		ErrWriter:       e.stderr,
		HideHelpCommand: true,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "host", Usage: "gpud control API address `HOST:PORT`", EnvVars: []string{"GPUCTL_HOST"}, Value: "127.0.0.1:7071"},
			&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the host's token (the administrator's, who sees everything) or a tenant's " +
				"(who sees and acts on only that tenant's sessions and images)", EnvVars: []string{"GPUCTL_TOKEN_FILE"}},
		}, tlsFlags()...),
		Commands: []*cli.Command{
			sessionsCommand(e),
			runCommand(e),
			checkpointCommand(e),
			restoreCommand(e),
			migrateCommand(e),
			preemptCommand(e),
			resumeCommand(e),
			imagesCommand(e),
			hostCommand(e),
			doctorCommand(e),
		},
		ExitErrHandler: func(*cli.Context, error) {}, // run() reports errors itself
	}
}

// env carries the process's outside world so tests can replace it.
type env struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	environ        func() []string
	getenv         func(string) string
	executable     func() (string, error)
	now            func() time.Time
}

// osEnv is the real outside world.
func osEnv() *env {
	return &env{
		stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr,
		environ: os.Environ, getenv: os.Getenv, executable: os.Executable, now: time.Now,
	}
}

func asExit(err error, target *cli.ExitCoder) bool {
	ec, ok := err.(cli.ExitCoder)
	if ok {
		*target = ec
	}
	return ok
}

func oneLine(s string) string { return strings.ReplaceAll(strings.TrimSpace(s), "\n", "; ") }

// reorderArgs moves flags that follow positional arguments in front of
// them, so that `gpuctl migrate s-1 --to b:7071` parses as users expect
// (urfave/cli stops at the first positional argument). Everything after a
// literal "--" is left alone: it belongs to `gpuctl run`'s command.
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	out := []string{args[0]}
	rest := args[1:]
	flags, cmds := app.Flags, app.Commands
	for len(rest) > 0 {
		// Split off this level's leading flags.
		i := 0
		for i < len(rest) && strings.HasPrefix(rest[i], "-") && rest[i] != "--" {
			if takesValue(flags, rest[i]) && !strings.Contains(rest[i], "=") && i+1 < len(rest) {
				i++
			}
			i++
		}
		out = append(out, rest[:i]...)
		rest = rest[i:]
		if len(rest) == 0 || rest[0] == "--" {
			break
		}
		sub := findCommand(cmds, rest[0])
		if sub == nil {
			break
		}
		out = append(out, rest[0])
		rest = rest[1:]
		if len(sub.Subcommands) == 0 {
			var fl, pos []string
			for len(rest) > 0 {
				a := rest[0]
				if a == "--" {
					break
				}
				if strings.HasPrefix(a, "-") && a != "-" {
					fl = append(fl, a)
					rest = rest[1:]
					if takesValue(sub.Flags, a) && !strings.Contains(a, "=") && len(rest) > 0 {
						fl = append(fl, rest[0])
						rest = rest[1:]
					}
					continue
				}
				pos = append(pos, a)
				rest = rest[1:]
			}
			out = append(out, fl...)
			out = append(out, pos...)
			break
		}
		flags, cmds = sub.Flags, sub.Subcommands
	}
	return append(out, rest...)
}

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}

// takesValue reports whether arg names a flag in flags that needs a value.
func takesValue(flags []cli.Flag, arg string) bool {
	name := strings.TrimLeft(arg, "-")
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	for _, f := range flags {
		for _, n := range f.Names() {
			if n == name {
				if df, ok := f.(cli.DocGenerationFlag); ok {
					return df.TakesValue()
				}
				return true
			}
		}
	}
	return false
}
