package cuda

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// SuspendHook is the checkpoint pipeline's "suspend" step for cuda
// workers (it satisfies checkpoint.Suspender): Suspend locks the worker's
// driver calls and moves its GPU state into its own memory, so CRIU can
// dump it; Resume puts the state back on the same GPU and unlocks, which
// is both the step's undo and how a --leave-running checkpoint continues.
type SuspendHook struct {
	Checkpointer *Checkpointer
	// LockTimeout bounds the wait for the worker's in-flight driver
	// calls; zero means DefaultLockTimeout.
	LockTimeout time.Duration
}

func (h SuspendHook) Suspend(ctx context.Context, pid int) error {
	return h.Checkpointer.Suspend(ctx, pid, h.LockTimeout)
}

func (h SuspendHook) Resume(ctx context.Context, pid int) error {
	return h.Checkpointer.Resume(ctx, pid, nil)
}

// ManifestGPUs orders a host's GPUs for an image manifest: the session's
// GPU first, then every other GPU the worker enumerated. Workers see all
// of the host's GPUs, so this is the full list the driver must map on a
// restore, and RestoreHook reads the session's GPU from its head.
//
// session is a UUID or an index (GPU.Index; UUIDs are unambiguous, an
// index is NVML's numbering, which matches CUDA's on hosts of one model).
func ManifestGPUs(host backend.HostInfo, session string) ([]backend.GPU, error) {
	i := gpuIndex(host, session)
	if i < 0 {
		return nil, errs.New(errs.NotFound, "", "GPU %s is not on this host", session)
	}
	out := []backend.GPU{host.GPUs[i]}
	out = append(out, host.GPUs[:i]...)
	return append(out, host.GPUs[i+1:]...), nil
}

// gpuIndex finds a GPU of host by UUID or by index; -1 if none.
func gpuIndex(host backend.HostInfo, id string) int {
	if i := slices.IndexFunc(host.GPUs, func(g backend.GPU) bool { return strings.EqualFold(g.UUID, id) }); i >= 0 {
		return i
	}
	if n, err := strconv.Atoi(id); err == nil {
		return slices.IndexFunc(host.GPUs, func(g backend.GPU) bool { return g.Index == n })
	}
	return -1
}

// target resolves h.Target to a UUID; an unknown one is left as given,
// for PlanRestore to refuse with its reason.
func (h RestoreHook) target() string {
	if i := gpuIndex(h.Host, h.Target); i >= 0 {
		return h.Host.GPUs[i].UUID
	}
	return h.Target
}

// snapshotOf reads a manifest's GPU list (ManifestGPUs' order).
func snapshotOf(imageGPUs []backend.GPU, driver string) (Snapshot, error) {
	if len(imageGPUs) == 0 {
		return Snapshot{}, errs.New(errs.DataLoss, "", "the image records no GPUs; it was not taken on the cuda backend")
	}
	s := Snapshot{Driver: driver, Device: imageGPUs[0]}
	for _, g := range imageGPUs {
		s.Enumerated = append(s.Enumerated, g.UUID)
	}
	return s, nil
}

// RestoreHook is the restore pipeline's "resume" step for cuda workers
// (it satisfies restore.Resumer): after CRIU has restored the worker, it
// restores the GPU state, onto another GPU when needed, and unlocks.
type RestoreHook struct {
	Checkpointer *Checkpointer
	// Host describes this host (Discover).
	Host backend.HostInfo
	// Target is the GPU restored sessions run on, by UUID or index (as
	// gpud's --device); empty keeps a session on its own GPU when this
	// host has it, else picks the first GPU of the same model.
	Target string
}

// Check refuses an image this host cannot restore, before anything is
// touched. driver is the image's driver version, "" when it recorded
// none (the driver comparison is then skipped).
func (h RestoreHook) Check(imageGPUs []backend.GPU, driver string) error {
	s, err := snapshotOf(imageGPUs, driver)
	if err != nil {
		return err
	}
	if s.Driver == "" {
		s.Driver = "0"
	}
	_, _, err = PlanRestore(s, h.Host, h.target())
	return err
}

// Resume restores the GPU state of the restored worker pid. The driver
// gets a full permutation of the image's GPUs when the session moves.
func (h RestoreHook) Resume(ctx context.Context, pid int, imageGPUs []backend.GPU) error {
	s, err := snapshotOf(imageGPUs, "0")
	if err != nil {
		return err
	}
	target, pairs, err := PlanRestore(s, h.Host, h.target())
	if err != nil {
		return err
	}
	h.Checkpointer.log.Info("restoring GPU state", "pid", pid, "from", s.Device.UUID, "to", target, "pairs", len(pairs))
	return h.Checkpointer.Resume(ctx, pid, pairs)
}
