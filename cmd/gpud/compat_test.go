package main

import (
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

func TestCheckTarget(t *testing.T) {
	h200 := backend.GPU{Index: 0, Name: "NVIDIA H200", UUID: "GPU-a", MemoryBytes: 140 << 30}
	here := backend.HostInfo{Backend: "cuda", DriverVersion: "580.159.04", GPUs: []backend.GPU{h200}}
	for _, tc := range []struct {
		name   string
		host   backend.HostInfo
		target backend.HostInfo
		want   string // "" = accepted; else a word of the refusal
	}{
		{"same GPU and driver", here, backend.HostInfo{Backend: "cuda", DriverVersion: "580.159.04", GPUs: []backend.GPU{{Name: "NVIDIA H200", UUID: "GPU-b", MemoryBytes: 140 << 30}}}, ""},
		{"newer driver", here, backend.HostInfo{Backend: "cuda", DriverVersion: "590.10.01", GPUs: []backend.GPU{{Name: "NVIDIA H200", UUID: "GPU-b", MemoryBytes: 140 << 30}}}, ""},
		{"older driver", here, backend.HostInfo{Backend: "cuda", DriverVersion: "570.86.10", GPUs: []backend.GPU{{Name: "NVIDIA H200", UUID: "GPU-b", MemoryBytes: 140 << 30}}}, "older driver"},
		{"other model", here, backend.HostInfo{Backend: "cuda", DriverVersion: "580.159.04", GPUs: []backend.GPU{{Name: "NVIDIA A100", UUID: "GPU-c", MemoryBytes: 80 << 30}}}, "same GPU model"},
		{"other backend", here, backend.HostInfo{Backend: "emulated"}, "backend"},
		{"emulated to emulated", backend.HostInfo{Backend: "emulated"}, backend.HostInfo{Backend: "emulated"}, ""},
		{"emulated to cuda", backend.HostInfo{Backend: "emulated"}, here, "backend"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &daemon{host: tc.host}
			d.cfg.device = "0"
			err := d.checkTarget(tc.target)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want a refusal saying %q", err, tc.want)
			}
		})
	}
}
