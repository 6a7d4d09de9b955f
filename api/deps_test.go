package api

import (
	"os/exec"
	"strings"
	"testing"
)

// The API package stays data and names: callers link it to decode replies
// and must not pull in anything with it.
func TestImportsOnlyStdlibAndErrs(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	out, err := exec.Command(gobin, "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{"github.com/gpuctl/gpuctl/api": true, "github.com/gpuctl/gpuctl/errs": true}
	for _, p := range strings.Fields(string(out)) {
		if !allowed[p] {
			t.Errorf("package api depends on %s; it may import only the standard library and errs", p)
		}
	}
}
