package emulated

import (
	"testing"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/backendtest"
)

// TestConformance runs the backend conformance suite, the same tests the
// cuda backend runs on a GPU.
func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) backend.Device {
		return New(Config{MemBytes: 4 << 30, Cores: 2, Seed: "conformance"})
	})
}
