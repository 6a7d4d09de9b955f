package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
)

func checkpointCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "checkpoint",
		Usage:     "checkpoint a session into the host's store",
		ArgsUsage: "SESSION",
		Description: "Quiesces the session, suspends its device state, dumps its worker with CRIU and\n" +
			"stores the image. Without --leave-running the session then lives only in its image\n" +
			"(restore it with `gpuctl restore IMAGE`); its client waits for it.",
		Flags: []cli.Flag{
			jsonFlag,
			&cli.BoolFlag{Name: "leave-running", Usage: "keep the session running here after the checkpoint"},
		},
		Action: func(c *cli.Context) error {
			id, err := oneArg(c, "SESSION", "gpuctl checkpoint s-0123456789ab")
			if err != nil {
				return err
			}
			cl, err := sessionClient(c, id)
			if err != nil {
				return err
			}
			return runCheckpoint(c.Context, e, cl, id, c.Bool("leave-running"), c.Bool("json"))
		},
	}
}

func runCheckpoint(ctx context.Context, e *env, cl *control.Client, id string, leaveRunning, asJSON bool) error {
	stop := e.spinner(asJSON, "checkpointing "+id)
	res, err := cl.Checkpoint(ctx, id, api.CheckpointRequest{LeaveRunning: leaveRunning})
	stop()
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(res)
	}
	after := "released; restore it with `gpuctl restore " + res.Image + "`"
	if leaveRunning {
		after = "still running"
	}
	e.printf("checkpointed %s into image %s in %d ms: %s, %s new in the store; session %s\n",
		res.Session, res.Image, res.DurationMS, humanBytes(uint64(res.Bytes)), humanBytes(uint64(res.StoredBytes)), after)
	if res.StallMS > 0 {
		e.printf("client stalled %d ms", res.StallMS)
		if res.MemBytes > 0 {
			e.printf("; device memory %s, %s of it changed since the last image", humanBytes(uint64(res.MemBytes)), humanBytes(uint64(res.MemSentBytes)))
		}
		e.printf("\n")
	}
	if res.ProcessOf != "" {
		e.printf("the worker changed nothing but its device memory since its dump in %s: the image shares that dump\n", res.ProcessOf)
	}
	printSteps(e, res.Steps)
	return nil
}

func printSteps(e *env, steps []api.StepTiming) {
	if len(steps) == 0 {
		return
	}
	e.printf("  steps:")
	for _, s := range steps {
		e.printf(" %s %.0f ms", s.Step, float64(s.Duration.Microseconds())/1000)
	}
	e.printf("\n")
}

// oneArg returns the single positional argument a command takes.
func oneArg(c *cli.Context, name, example string) (string, error) {
	switch c.NArg() {
	case 1:
		return c.Args().First(), nil
	case 0:
		return "", errs.New(errs.InvalidArgument, "", "missing %s; for example: %s", name, example)
	default:
		return "", errs.New(errs.InvalidArgument, "", "expected one %s, got %d arguments; for example: %s", name, c.NArg(), example)
	}
}
