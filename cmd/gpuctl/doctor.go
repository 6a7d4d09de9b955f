package main

import "github.com/urfave/cli/v2"

func doctorCommand(e *env) *cli.Command {
	return &cli.Command{Name: "doctor", Action: notYet("doctor")}
}
