package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/jobckpt"
)

// defaultJobRoot holds a directory per job when GPUCTL_JOB_DIR is unset;
// it must be shared by every node that may run a requeued job.
const defaultJobRoot = "/var/spool/gpuctl/jobs"

// jobLabel is the label gpuctl job gives its program's sessions.
const jobLabel = "slurm_job"

func jobCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "job",
		Usage:     "run a batch job's CUDA program so that a preempted, requeued job continues where it stopped",
		ArgsUsage: "-- CMD [ARGS...]",
		Description: "Runs CMD as gpuctl run does, its sessions labelled slurm_job=JOB. On SIGTERM (Slurm's\n" +
			"preemption and requeue) or SIGUSR1 (sbatch --signal=B:USR1@SECONDS) it preempts those sessions\n" +
			"into their images on --host, dumps CMD's process tree with CRIU into DIR/JOB and exits; after\n" +
			"SIGUSR1 it also requeues the job (scontrol requeue). When the job runs again\n" +
			"(SLURM_RESTART_COUNT > 0) with a checkpoint in DIR/JOB, it restores CMD, resumes its sessions\n" +
			"(here, or on --resume-on), and exits with CMD's status. DIR must be the same shared directory\n" +
			"on every node, which also needs the same kernel, libraries and CMD at the same path.\n" +
			"CMD's stdout and stderr go to DIR/JOB and are copied to gpuctl's as they grow; submit with\n" +
			"--open-mode=append so that a requeued job's output continues its first run's.",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Usage: "gpud --listen address `HOST:PORT`", EnvVars: []string{"GPUCTL_SERVER"}},
			&cli.StringFlag{Name: "dir", Usage: "shared `DIR` holding a directory per job", EnvVars: []string{"GPUCTL_JOB_DIR"}, Value: defaultJobRoot},
			&cli.StringFlag{Name: "job-id", Usage: "the job's `ID`", EnvVars: []string{"SLURM_JOB_ID"}},
			&cli.StringFlag{Name: "restart-count", Usage: "how many times the job was requeued (`N`)", EnvVars: []string{"SLURM_RESTART_COUNT"}},
			&cli.DurationFlag{Name: "deadline", Usage: "finish each session's preemption, and the dump of CMD, within `DURATION`", Value: 20 * time.Second},
			&cli.StringFlag{Name: "resume-on", Usage: "resume the sessions on the gpud whose --api is `HOST:PORT` instead of --host", EnvVars: []string{"GPUCTL_RESUME_ON"}},
			&cli.StringFlag{Name: "criu", Usage: "the criu `BINARY` (default: GPUCTL_CRIU, the bundle, PATH)"},
			&cli.StringFlag{Name: "priority", Usage: "the sessions' priority, an integer `N`", EnvVars: []string{"GPUCTL_PRIORITY"}},
			&cli.StringSliceFlag{Name: "label", Usage: "a `KEY=VALUE` label of the sessions besides slurm_job (repeatable)"},
		},
		Action: func(c *cli.Context) error {
			a := jobArgs{
				run: runArgs{server: c.String("server"), tokenFile: inherited(c, "token-file"), tlsCA: inherited(c, "tls-ca"),
					tlsServerName: inherited(c, "tls-server-name"), argv: c.Args().Slice(), priority: c.String("priority"), labels: c.StringSlice("label")},
				root: c.String("dir"), id: c.String("job-id"), restarts: c.String("restart-count"),
				deadline: c.Duration("deadline"), resumeOn: c.String("resume-on"), criu: c.String("criu"),
			}
			return runJob(c, e, a)
		},
	}
}

type jobArgs struct {
	run            runArgs
	root, id       string
	restarts       string
	deadline       time.Duration
	resumeOn, criu string
}

func runJob(c *cli.Context, e *env, a jobArgs) error {
	if len(a.run.argv) > 0 && a.run.argv[0] == "--" {
		a.run.argv = a.run.argv[1:]
	}
	if len(a.run.argv) == 0 {
		return usageError("no program given: gpuctl job -- CMD [ARGS...]")
	}
	if a.id == "" {
		return usageError("no job id: run gpuctl job inside a Slurm job (SLURM_JOB_ID) or pass --job-id")
	}
	if strings.ContainsAny(a.id, "/\x00") || a.id == "." || a.id == ".." {
		return usageError("job id %q cannot name a directory", a.id)
	}
	restarts := 0
	if a.restarts != "" {
		n, err := strconv.Atoi(a.restarts)
		if err != nil || n < 0 {
			return usageError("restart count %q: want a number >= 0", a.restarts)
		}
		restarts = n
	}
	if a.deadline <= 0 {
		return usageError("--deadline %v: want a positive duration", a.deadline)
	}
	if a.run.server == "" {
		return usageError("no server: pass --server HOST:PORT (gpud's --listen address) or set GPUCTL_SERVER")
	}
	if _, _, err := net.SplitHostPort(a.run.server); err != nil {
		return usageError("--server %q is not HOST:PORT", a.run.server)
	}
	if !filepath.IsAbs(a.root) {
		return usageError("--dir %q: want an absolute path (the same on every node)", a.root)
	}
	cl, err := apiClient(c)
	if err != nil {
		return err
	}
	lib, err := e.libDir()
	if err != nil {
		return err
	}
	a.run.labels = append(a.run.labels, jobLabel+"="+a.id)
	env, err := runEnv(e.environ(), lib, a.run)
	if err != nil {
		return err
	}
	sel, err := api.ParseSelector(jobLabel + "=" + a.id)
	if err != nil {
		return err
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(e.stderr, "gpuctl job %s: %s\n", a.id, fmt.Sprintf(format, args...))
	}
	cfg := jobckpt.Config{
		Dir: filepath.Join(a.root, a.id), Argv: a.run.argv, Env: env, Control: cl, Selector: sel,
		Deadline: a.deadline, ResumeOn: a.resumeOn, CRIU: a.criu, Stdout: e.stdout, Stderr: e.stderr, Logf: logf,
	}

	// Our own signals: the app's context ends on SIGTERM too, but the
	// work below must outlive it.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGUSR1, syscall.SIGINT)
	defer signal.Stop(sigs)
	ctx := context.WithoutCancel(c.Context)

	var job *jobckpt.Job
	if restarts > 0 {
		job, err = jobckpt.Restore(ctx, cfg)
		if errors.Is(err, jobckpt.ErrNoCheckpoint) {
			logf("requeued (restart %d) without a checkpoint in %s; starting %s from the beginning", restarts, cfg.Dir, a.run.argv[0])
			job, err = nil, nil
		} else if err != nil {
			return err
		}
	}
	if job == nil {
		if job, err = jobckpt.Start(ctx, cfg); err != nil {
			return err
		}
	}

	select {
	case <-job.Done():
	case sig := <-sigs:
		if sig == syscall.SIGINT {
			job.Kill()
			break
		}
		logf("%v: checkpointing", sig)
		if _, err := job.Checkpoint(ctx); err != nil {
			job.Kill()
			_, _ = job.Finish()
			return errs.Wrap(err, errs.KindOf(err), "", "checkpoint job %s (it will start over if requeued)", a.id)
		}
		if sig == syscall.SIGUSR1 {
			// Slurm's --signal warns of the time limit; the job goes
			// back to the queue rather than end.
			out, err := exec.Command("scontrol", "requeue", a.id).CombinedOutput()
			var ee *exec.ExitError
			if errors.As(err, &ee) && ee.ProcessState.Sys().(syscall.WaitStatus).Signal() == syscall.SIGTERM {
				// Slurm ended the job, scontrol with it: the requeue
				// was taken.
				err = nil
			}
			if err != nil {
				return errs.New(errs.Unavailable, "", "job %s is checkpointed in %s but scontrol requeue failed: %v: %s", a.id, cfg.Dir, err, strings.TrimSpace(string(out)))
			}
			logf("requeued")
		}
		return nil
	}
	code, err := job.Finish()
	if err != nil {
		return err
	}
	if code != 0 {
		return cli.Exit("", code)
	}
	return nil
}
