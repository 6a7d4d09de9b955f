package main

import "github.com/urfave/cli/v2"

func sessionsCommand(e *env) *cli.Command {
	return &cli.Command{Name: "sessions", Action: notYet("sessions")}
}
