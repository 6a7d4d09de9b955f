package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/control"
)

// hostReply is the part of GET /v1/host the text view shows.
type hostReply struct {
	Name          string `json:"name"`
	Backend       string `json:"backend"`
	DriverVersion string `json:"driver_version"`
	Listen        string `json:"listen"`
	Version       string `json:"version"`
	Sessions      int    `json:"sessions"`
	GPUs          []struct {
		Index       int    `json:"index"`
		Name        string `json:"name"`
		UUID        string `json:"uuid"`
		MemoryBytes uint64 `json:"memory_bytes"`
	} `json:"gpus"`
}

func hostCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "host",
		Usage: "show a host's backend and GPUs",
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
	var raw json.RawMessage
	if err := cl.Do(ctx, http.MethodGet, "/v1/host", nil, &raw); err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(raw)
	}
	var h hostReply
	if err := json.Unmarshal(raw, &h); err != nil {
		return fmt.Errorf("decode host reply from %s: %w", cl.Addr(), err)
	}
	e.printf("host %s (gpud %s): backend %s, driver %s, clients connect to %s, %d session(s)\n",
		h.Name, h.Version, h.Backend, h.DriverVersion, h.Listen, h.Sessions)
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GPU\tNAME\tMEMORY\tUUID")
	for _, g := range h.GPUs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", g.Index, g.Name, humanBytes(g.MemoryBytes), g.UUID)
	}
	return tw.Flush()
}
