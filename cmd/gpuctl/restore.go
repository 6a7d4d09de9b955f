package main

import (
	"context"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
)

func restoreCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "restore an image from the host's store as a live session",
		ArgsUsage: "IMAGE",
		Description: "The session keeps its id and waits for its client, which reconnects to this\n" +
			"host by itself (point it here with GPUCTL_SERVER if it was told of no move).\n" +
			"With --registry the host is found: one that holds the image (a replica, when its\n" +
			"own host died), or else holds the most of its chunks and is sent the rest by a\n" +
			"holder first; the session is taken over there if its owner released it;\n" +
			"a client whose host is gone finds the new one through any gpud it knows.",
		Flags: []cli.Flag{jsonFlag,
			&cli.StringFlag{Name: "on", Usage: "where to restore: a gpud's --api `HOST:PORT`; with --registry also a host's name, or auto " +
				"(the default with --registry and no --host): an up, compatible host that holds the image, the choice printed with its reasons"},
		},
		Action: func(c *cli.Context) error {
			img, err := oneArg(c, "IMAGE", "gpuctl restore IMAGE_ID (see `gpuctl images ls`)")
			if err != nil {
				return err
			}
			cl, t, err := restoreTarget(c, e, img)
			if err != nil {
				return err
			}
			return runRestore(c.Context, e, cl, img, t, c.Bool("json"))
		},
	}
}

// restoreResult is a restore's reply as gpuctl prints it: with what the
// host was topped up with first, when it lacked the image (--registry).
type restoreResult struct {
	*api.RestoreReply
	TopUp *topUp `json:"topped_up,omitempty"`
}

func runRestore(ctx context.Context, e *env, cl *control.Client, img string, t *topUp, asJSON bool) error {
	stop := e.spinner(asJSON, "restoring "+img)
	res, err := cl.Restore(ctx, img)
	stop()
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(restoreResult{res, t})
	}
	e.printf("restored session %s from image %s in %d ms; it waits for its client at %s\n", res.Session, res.Image, res.DurationMS, orDash(res.Listen))
	return nil
}
