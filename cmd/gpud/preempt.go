package main

import (
	"strconv"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/preempt"
	"github.com/gpuctl/gpuctl/restore"
)

// deviceBytes is the device memory the sessions share, which automatic
// preemption accounts for: the size of the GPU --device names (for the
// emulated backend, --emulated-mem). Zero when preemption is off.
func (d *daemon) deviceBytes() uint64 {
	if !d.cfg.preempt {
		return 0
	}
	if d.cfg.preemptMem > 0 {
		return d.cfg.preemptMem
	}
	for _, g := range d.host.GPUs {
		if strconv.Itoa(g.Index) == d.cfg.device || g.UUID == d.cfg.device {
			return g.MemoryBytes
		}
	}
	if len(d.host.GPUs) > 0 {
		return d.host.GPUs[0].MemoryBytes
	}
	return d.cfg.emulatedMem
}

// preemptRouter builds preemption: gpuctl preempt and resume, and, with
// --preempt, the session table's preempter, whose resumer run starts.
func (d *daemon) preemptRouter(ckpt *checkpoint.Service, rst *restore.Service, imgs imageStore) *preempt.Service {
	p := &preempt.Service{
		Sessions: d.manager, Checkpoint: ckpt, Restore: rst, Push: imgs, Token: d.token, TLS: d.peerTLS,
		API: d.cfg.api, Backend: d.workerOp.Backend, Metrics: preempt.NewMetrics(d.registry), Log: d.log,
		CheckTarget: d.checkTarget,
	}
	if d.cfg.preempt {
		d.manager.SetPreempter(p)
	}
	d.preempt = p
	return p
}
