package main

import "github.com/urfave/cli/v2"

func imagesCommand(e *env) *cli.Command {
	return &cli.Command{Name: "images", Action: notYet("images")}
}
