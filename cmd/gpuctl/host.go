package main

import "github.com/urfave/cli/v2"

func hostCommand(e *env) *cli.Command {
	return &cli.Command{Name: "host", Action: notYet("host")}
}
