package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
)

func sessionsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "sessions",
		Usage: "list the sessions on a host",
		Description: "Lists the host's sessions: id, state (running, detached, quiescing, checkpointing,\n" +
			"migrating, stopped), client address, age, device memory in use and device, and the\n" +
			"tenant that owns each on a host with tenants, priority and labels. With a tenant's\n" +
			"token, only that tenant's sessions are listed. --selector lists those whose labels match.",
		Flags: []cli.Flag{jsonFlag, selectorFlag},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError("gpuctl sessions takes no arguments")
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			var sel api.Selector
			if c.String("selector") != "" {
				if sel, err = api.ParseSelector(c.String("selector")); err != nil {
					return err
				}
			}
			return runSessions(c.Context, e, cl, c.Bool("json"), sel)
		},
	}
}

func runSessions(ctx context.Context, e *env, cl *control.Client, asJSON bool, sel api.Selector) error {
	list, err := cl.Sessions(ctx) // never nil: an empty list prints as []
	if err != nil {
		return err
	}
	if sel != nil {
		list = selectSessions(list, sel)
	}
	if asJSON {
		return e.printJSON(list)
	}
	if len(list) == 0 {
		e.printf("no sessions on %s\n", cl.Addr())
		return nil
	}
	// The tenant column only where some session has a tenant.
	tenants := false
	for _, s := range list {
		tenants = tenants || s.Tenant != ""
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	header := "ID\tSTATE\tCLIENT\tAGE\tMEMORY\tDEVICE\tPRIORITY\tLABELS"
	if tenants {
		header += "\tTENANT"
	}
	fmt.Fprintln(tw, header)
	now := e.now()
	for _, s := range list {
		client := s.Client
		if client == "" {
			client = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s %s\t%d\t%s", s.ID, s.State, client, age(now.Sub(s.Created)),
			humanBytes(s.MemBytes), s.Backend, s.Device, s.Priority, api.FormatLabels(s.Labels))
		if tenants {
			fmt.Fprintf(tw, "\t%s", orDash(s.Tenant))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// age prints a duration the way listings do: 42s, 5m, 3h, 2d.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
