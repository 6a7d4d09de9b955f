package e2e

import (
	"os/exec"
	"strings"
)

// harnessIP runs the ip command and returns its output.
func harnessIP(args ...string) (string, error) {
	out, err := exec.Command("ip", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}
