package main

import "github.com/urfave/cli/v2"

func runCommand(e *env) *cli.Command {
	return &cli.Command{Name: "run", Action: notYet("run")}
}
