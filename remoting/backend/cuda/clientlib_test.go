package cuda

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

// gpud must never take gpuctl's own client library for the driver, which
// a stray LD_LIBRARY_PATH would make it load. This uses the library `make
// build` produces.
func TestRefusesClientLibrary(t *testing.T) {
	lib, err := filepath.Abs("../../../build/lib/libcuda.so.1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(lib); err != nil {
		t.Skipf("%s is not built (make build)", lib)
	}
	_, err = New(Options{Library: lib})
	if err == nil {
		t.Fatal("the client library was accepted as the driver")
	}
	if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "LD_LIBRARY_PATH") {
		t.Fatalf("err = %v, want failed_precondition naming LD_LIBRARY_PATH", err)
	}
}
