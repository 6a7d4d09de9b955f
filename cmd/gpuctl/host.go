package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/control"
)

func hostCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "host",
		Usage: "show a host's backend, GPUs and tenants",
		Description: "With the host token: every tenant, its limits and what it holds here.\n" +
			"With a tenant's token: that tenant alone, and its own session count.",
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError("gpuctl host takes no arguments")
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			return runHost(c.Context, e, cl, c.Bool("json"))
		},
	}
}

func runHost(ctx context.Context, e *env, cl *control.Client, asJSON bool) error {
	h, err := cl.Host(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(h)
	}
	e.printf("host %s (gpud %s): backend %s, driver %s, clients connect to %s, %d session(s)\n",
		h.Name, h.Version, h.Backend, h.DriverVersion, h.Listen, h.Sessions)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tMEMORY\tUUID")
	for _, g := range h.GPUs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", g.Index, g.Name, humanBytes(g.MemoryBytes), g.UUID)
	}
	if err := tw.Flush(); err != nil || len(h.Tenants) == 0 {
		return err
	}
	e.printf("\n")
	tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tSESSIONS\tMEMORY")
	for _, t := range h.Tenants {
		sessions, mem := fmt.Sprint(t.Sessions), humanBytes(t.MemBytes)
		if t.MaxSessions > 0 {
			sessions += fmt.Sprintf(" of %d", t.MaxSessions)
		}
		if t.MaxMemBytes > 0 {
			mem += " of " + humanBytes(t.MaxMemBytes)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, sessions, mem)
	}
	return tw.Flush()
}
