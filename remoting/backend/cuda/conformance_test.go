package cuda

import (
	"testing"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/backendtest"
)

// TestConformance runs the backend conformance suite, the same tests the
// emulated backend runs in every `go test`, on the host's GPU. It skips
// where no NVIDIA driver and GPU are usable; the GPU suite
// (e2e/gpu/run.sh) runs it as a test binary built elsewhere.
func TestConformance(t *testing.T) {
	if !Available() {
		t.Skip("no usable NVIDIA GPU and driver here")
	}
	backendtest.Run(t, func(t *testing.T) backend.Device {
		d, err := New(Options{})
		if err != nil {
			t.Fatal(err)
		}
		return d
	})
}
