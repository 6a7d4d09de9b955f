package main

import (
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/cuda"
)

// checkTarget refuses, before anything is sent, a host that could not run
// this host's sessions: another backend, or on the cuda backend an older
// driver or no GPU of this host's model. It is what migrate and resume --on
// ask first, so that the user gets one line naming the host instead of a
// failed restore after the image has crossed the network; the image's own
// GPU records are checked again when it is restored there.
func (d *daemon) checkTarget(target backend.HostInfo) error {
	if target.Backend != d.host.Backend {
		return errs.New(errs.FailedPrecondition, "host", "runs the %q backend and this host the %q backend: pick a host with the same backend",
			target.Backend, d.host.Backend)
	}
	if d.host.Backend != "cuda" {
		return nil
	}
	gpus, err := cuda.ManifestGPUs(d.host, d.cfg.device)
	if err != nil || len(gpus) == 0 {
		return nil // nothing to compare with here: the restore checks the image's records
	}
	uuids := make([]string, len(gpus))
	for i, g := range gpus {
		uuids[i] = g.UUID
	}
	return cuda.CheckCompatible(cuda.Snapshot{Driver: d.host.DriverVersion, Device: gpus[0], Enumerated: uuids}, target)
}
