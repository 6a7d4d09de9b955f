package main

import "github.com/urfave/cli/v2"

func migrateCommand(e *env) *cli.Command {
	return &cli.Command{Name: "migrate", Action: notYet("migrate")}
}
