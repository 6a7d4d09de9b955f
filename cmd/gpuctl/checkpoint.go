package main

import "github.com/urfave/cli/v2"

func checkpointCommand(e *env) *cli.Command {
	return &cli.Command{Name: "checkpoint", Action: notYet("checkpoint")}
}
