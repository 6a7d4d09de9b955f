package main

import (
	"context"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
)

// selectorFlag picks sessions by their labels.
var selectorFlag = &cli.StringFlag{Name: "selector", Aliases: []string{"l"}, Usage: "sessions whose labels match every `KEY=VALUE[,KEY=VALUE...]`"}

// selectSessions keeps the sessions whose labels match sel.
func selectSessions(list []api.Session, sel api.Selector) []api.Session {
	out := []api.Session{}
	for _, s := range list {
		if sel.Matches(s.Labels) {
			out = append(out, s)
		}
	}
	return out
}

// targets resolves SESSION or --selector to session ids: with a selector,
// those that match and are in one of the states want (the others are
// already where the command would put them). A selector that matches no
// session at all is an error; one whose sessions are all done is not.
func targets(c *cli.Context, cl *control.Client, example string, want ...string) ([]string, error) {
	selText := c.String("selector")
	if selText == "" {
		id, err := oneArg(c, "SESSION (or --selector KEY=VALUE)", example)
		if err != nil {
			return nil, err
		}
		return []string{id}, nil
	}
	if c.NArg() > 0 {
		return nil, errs.New(errs.InvalidArgument, "", "give SESSION or --selector, not both; for example: %s", example)
	}
	sel, err := api.ParseSelector(selText)
	if err != nil {
		return nil, err
	}
	list, err := cl.Sessions(c.Context)
	if err != nil {
		return nil, err
	}
	matched := selectSessions(list, sel)
	if len(matched) == 0 {
		return nil, errs.New(errs.NotFound, "", "no session on %s has labels %s; list them with gpuctl sessions", cl.Addr(), sel)
	}
	var ids []string
	for _, s := range matched {
		for _, st := range want {
			if s.State == st {
				ids = append(ids, s.ID)
			}
		}
	}
	return ids, nil
}

func preemptCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "preempt",
		Usage:     "take a session's GPU away: checkpoint it and release its device memory",
		ArgsUsage: "SESSION | --selector KEY=VALUE",
		Description: "Checkpoints each session and releases its worker and device memory; the session waits\n" +
			"in its image (state preempted) and its client stalls until gpuctl resume. With --deadline\n" +
			"a checkpoint that cannot finish in time is rolled back, the session keeps running, and\n" +
			"gpuctl fails. With --selector, sessions already preempted are left alone.",
		Flags: []cli.Flag{
			jsonFlag, selectorFlag,
			&cli.DurationFlag{Name: "deadline", Usage: "finish each checkpoint within `DURATION` (e.g. 20s) or roll it back"},
		},
		Action: func(c *cli.Context) error {
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			ids, err := targets(c, cl, "gpuctl preempt --selector job=42 --deadline 20s", "running", "detached")
			if err != nil {
				return err
			}
			return runPreempt(c.Context, e, cl, ids, c.Duration("deadline"), c.Bool("json"))
		},
	}
}

func runPreempt(ctx context.Context, e *env, cl *control.Client, ids []string, deadline time.Duration, asJSON bool) error {
	if deadline < 0 {
		return usageError("--deadline %v: want a positive duration", deadline)
	}
	out := []api.PreemptReply{}
	var first error
	for _, id := range ids {
		stop := e.spinner(asJSON, "preempting "+id)
		res, err := cl.Preempt(ctx, id, api.PreemptRequest{DeadlineMS: deadline.Milliseconds()})
		stop()
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		out = append(out, *res)
		if !asJSON {
			e.printf("preempted %s into %s: stalled %d ms; %s of device memory given back\n", res.Session, res.Image, res.StallMS, humanBytes(res.MemBytes))
		}
	}
	if asJSON {
		if err := e.printJSON(out); err != nil {
			return err
		}
	}
	return first
}

func resumeCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:      "resume",
		Usage:     "run a preempted session again, here or on another host",
		ArgsUsage: "SESSION | --selector KEY=VALUE",
		Description: "Restores each preempted session from its image on --host, or with --on on another gpud\n" +
			"(which is sent the chunks it lacks); the client reconnects by itself, following a\n" +
			"\"moved to\" notice to the other host. A host without room or with an incompatible GPU\n" +
			"is refused with one line and the session stays preempted.",
		Flags: []cli.Flag{
			jsonFlag, selectorFlag,
			&cli.StringFlag{Name: "on", Usage: "resume on the gpud whose --api is `HOST:PORT` (both hosts share a token file)"},
		},
		Action: func(c *cli.Context) error {
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			ids, err := targets(c, cl, "gpuctl resume --selector job=42", "preempted")
			if err != nil {
				return err
			}
			return runResume(c.Context, e, cl, ids, c.String("on"), c.Bool("json"))
		},
	}
}

func runResume(ctx context.Context, e *env, cl *control.Client, ids []string, on string, asJSON bool) error {
	out := []api.ResumeReply{}
	var first error
	for _, id := range ids {
		stop := e.spinner(asJSON, "resuming "+id)
		res, err := cl.Resume(ctx, id, api.ResumeRequest{On: on})
		stop()
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		out = append(out, *res)
		if !asJSON {
			e.printf("resumed %s on %s in %d ms from %s; its client reconnects to %s\n", res.Session, res.Host, res.DurationMS, res.Image, orDash(res.Listen))
		}
	}
	if asJSON {
		if err := e.printJSON(out); err != nil {
			return err
		}
	}
	return first
}
