package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
)

func migrateCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "migrate",
		Usage:     "move a live session to another host; its client keeps running",
		ArgsUsage: "SESSION --to HOST:PORT",
		Description: "Checkpoints the session on --host, sends the target only the chunks it lacks,\n" +
			"restores it there and redirects the client. If anything fails the session keeps\n" +
			"running where it was. Both hosts must share a token file.",
		Flags: []cli.Flag{
			jsonFlag,
			&cli.StringFlag{Name: "to", Usage: "the target gpud's --api address `HOST:PORT`; with --registry also a host's name, or auto: a compatible host with room, the choice printed with its reasons"},
		},
		Action: func(c *cli.Context) error {
			id, err := oneArg(c, "SESSION", "gpuctl migrate s-0123456789ab --to hostB:7071")
			if err != nil {
				return err
			}
			to := c.String("to")
			if to == "" {
				return errs.New(errs.InvalidArgument, "", "missing --to HOST:PORT, the target gpud's --api address")
			}
			cl, err := sessionClient(c, id)
			if err != nil {
				return err
			}
			if to, err = target(c, e, id, to, cl); err != nil {
				return err
			}
			return runMigrate(c.Context, e, cl, id, to, c.Bool("json"))
		},
	}
}

func runMigrate(ctx context.Context, e *env, cl *control.Client, id, to string, asJSON bool) error {
	stop := e.spinner(asJSON, "migrating "+id+" to "+to)
	res, err := cl.Migrate(ctx, id, api.MigrateRequest{To: to})
	stop()
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(res)
	}
	e.printf("migrated %s to %s in %d ms: client stalled %d ms; sent %s of a %s image; client sent to %s\n",
		res.Session, res.To, res.DurationMS, res.DowntimeMS, humanBytes(uint64(res.SentBytes)), humanBytes(uint64(res.Bytes)), orDash(res.Listen))
	for i, r := range res.Rounds {
		e.printf("  pre-copy round %d: %d blocks, %s changed, %s sent, %d ms (client paused %d ms)\n",
			i+1, r.Blocks, humanBytes(uint64(r.Bytes)), humanBytes(uint64(r.SentBytes)), r.DurationMS, r.PauseMS)
	}
	switch {
	case res.Ahead != "":
		e.printf("  the target restored the session from image %s's dump before the freeze, which reused it\n", res.Ahead)
	case res.AheadError != "":
		e.printf("  the target did not restore the session ahead of the freeze: %s\n", res.AheadError)
	}
	printSteps(e, res.Steps)
	return nil
}
