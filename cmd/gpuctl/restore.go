package main

import "github.com/urfave/cli/v2"

func restoreCommand(e *env) *cli.Command {
	return &cli.Command{Name: "restore", Action: notYet("restore")}
}
