// Command gpud is the GPU host daemon.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "gpud: not built yet")
	os.Exit(1)
}
