package worker

import (
	"log/slog"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/cuda"
)

// cudaDriver is the real-GPU backend: NVIDIA's driver loaded at run time.
// The session's GPU is Options.Device (an ordinal or a UUID); the worker
// enumerates every GPU so that a restore can remap it (see docs/gpu.md).
var cudaDriver = driver{
	available: cuda.Available,
	open: func(o Options, log *slog.Logger) (backend.Device, error) {
		return cuda.New(cuda.Options{Device: o.Device, Log: log, PlainMemory: o.CUDAPlainMemory})
	},
	host: func(Options) (backend.HostInfo, error) { return cuda.Discover() },
}
