package api

import (
	"os/exec"
	"strings"
	"testing"
)

// The API package stays data and names: callers link it to decode replies,
// and a device backend describes its GPUs in its terms, so it must not pull
// in anything with it, not even an HTTP stack.
func TestImportsOnlyStdlibAndErrs(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"github.com/gpuctl/gpuctl/api": true, "github.com/gpuctl/gpuctl/errs": true}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		p, std, _ := strings.Cut(line, " ")
		switch {
		case std == "true" && (p == "net/http" || strings.HasPrefix(p, "net/http/")):
			t.Errorf("package api depends on %s; keep HTTP in package control", p)
		case std != "true" && !allowed[p]:
			t.Errorf("package api depends on %s; it may import only the standard library and errs", p)
		}
	}
}
