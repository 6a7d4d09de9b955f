package cuda

import (
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

// These run on machines without NVIDIA's driver (CI) and on GPU hosts
// alike: they name a library that cannot exist.
func TestMissingDriver(t *testing.T) {
	const lib = "/nonexistent/libcuda.so.1"
	tests := []struct {
		name string
		run  func() error
	}{
		{"device", func() error { _, err := New(Options{Library: lib}); return err }},
		{"checkpointer", func() error { _, err := NewCheckpointer(lib, nil); return err }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if err == nil {
				t.Fatal("loading a missing driver succeeded")
			}
			if !errs.IsUnavailable(err) {
				t.Errorf("kind %s, want unavailable: %v", errs.KindOf(err), err)
			}
			for _, want := range []string{lib, "driver >= 570", "--backend emulated"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// A library that loads but is not a CUDA driver is named, with the first
// entry point it lacks.
func TestNotADriver(t *testing.T) {
	_, err := New(Options{Library: "libc.so.6"})
	if err == nil {
		t.Fatal("libc was accepted as the driver")
	}
	if !errs.IsUnavailable(err) || !strings.Contains(err.Error(), "libc.so.6 does not export cuInit") {
		t.Fatalf("err = %v, want unavailable naming the missing cuInit", err)
	}
}

func TestMissingDriverAvailable(t *testing.T) {
	if _, err := loadDriver(""); err == nil {
		t.Skip("an NVIDIA driver is installed here")
	}
	if Available() {
		t.Fatal("Available() is true without a driver")
	}
	if _, err := Discover(); err == nil || !errs.IsUnavailable(err) {
		t.Fatalf("Discover without a driver: %v, want an unavailable error", err)
	}
}
