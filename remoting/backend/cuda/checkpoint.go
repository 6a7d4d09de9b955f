package cuda

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpuctl/gpuctl/errs"
)

// ProcessState is the driver's CUprocessState for a process.
type ProcessState int

const (
	StateRunning      ProcessState = 0 // CU_PROCESS_STATE_RUNNING
	StateLocked       ProcessState = 1 // CU_PROCESS_STATE_LOCKED
	StateCheckpointed ProcessState = 2 // CU_PROCESS_STATE_CHECKPOINTED
	StateFailed       ProcessState = 3 // CU_PROCESS_STATE_FAILED
)

func (s ProcessState) String() string {
	switch s {
	case StateRunning:
		return "running"
	case StateLocked:
		return "locked"
	case StateCheckpointed:
		return "checkpointed"
	case StateFailed:
		return "failed"
	}
	return fmt.Sprintf("state(%d)", int(s))
}

// GPUPair maps a GPU a checkpointed process used to the GPU it is
// restored on, both by UUID.
type GPUPair struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// DefaultLockTimeout bounds how long Lock waits for a process's
// in-flight driver calls to finish when the caller gives no timeout.
const DefaultLockTimeout = 10 * time.Second

// Checkpointer drives the driver's checkpoint API for other processes
// (gpud calls it on its workers' host PIDs):
// lock -> checkpoint -> (CRIU dump, restore) -> restore -> unlock.
// After Checkpoint the process holds no GPU state and no /dev/nvidia*
// files, so CRIU can dump it.
//
// The driver calls cannot be interrupted: ctx is checked before each one.
type Checkpointer struct {
	api procAPI
	log *slog.Logger
}

// procAPI is the driver's checkpoint API on one process; *driver
// implements it. The sequencing built on it (rollback, resuming from any
// state) is what Checkpointer adds.
type procAPI interface {
	lock(pid int, timeoutMs uint32) error
	checkpoint(pid int) error
	restore(pid int, from, to [][16]byte) error
	unlock(pid int) error
	state(pid int) (ProcessState, error)
}

// NewCheckpointer loads the driver in the calling process. Keeping the
// driver initialised here (or persistence mode on) also keeps the GPUs
// ready for restores.
func NewCheckpointer(library string, log *slog.Logger) (*Checkpointer, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	drv, err := loadDriver(library)
	if err != nil {
		return nil, err
	}
	if !drv.hasCheckpointAPI() {
		return nil, errs.New(errs.FailedPrecondition, "", "the NVIDIA driver at %s has no checkpoint API: install driver >= 570", drv.path)
	}
	return &Checkpointer{api: drv, log: log}, nil
}

func subject(pid int) string { return fmt.Sprintf("process %d", pid) }

// call runs one driver checkpoint call (described by what) and classifies
// its failure.
func (c *Checkpointer) call(ctx context.Context, pid int, what string, f func() error) error {
	if err := ctx.Err(); err != nil {
		return errs.Wrap(err, errs.Unavailable, subject(pid), "%s: not started", what)
	}
	start := time.Now()
	err := f()
	c.log.Debug("cuda checkpoint call", "op", what, "pid", pid, "took", time.Since(start), "err", err)
	if err != nil {
		return errs.Wrap(err, errs.FailedPrecondition, subject(pid), "%s", what)
	}
	return nil
}

// Lock stops the process's further driver calls and waits, at most
// timeout, for those in flight to finish.
func (c *Checkpointer) Lock(ctx context.Context, pid int, timeout time.Duration) error {
	if timeout <= 0 {
		timeout = DefaultLockTimeout
		if dl, ok := ctx.Deadline(); ok {
			timeout = time.Until(dl)
		}
	}
	ms := uint32(min(max(timeout.Milliseconds(), 1), 1<<31))
	return c.call(ctx, pid, "locking its CUDA calls", func() error { return c.api.lock(pid, ms) })
}

// Checkpoint copies the locked process's device memory to its host memory
// and releases its GPU resources.
func (c *Checkpointer) Checkpoint(ctx context.Context, pid int) error {
	return c.call(ctx, pid, "checkpointing its GPU state", func() error { return c.api.checkpoint(pid) })
}

// Restore puts a checkpointed process's state back on the GPUs. pairs
// is empty to restore on the same GPUs; otherwise it must be a full
// permutation of every GPU the process enumerated (see PlanRemap): the
// driver refuses a partial map with CUDA_ERROR_INVALID_VALUE.
func (c *Checkpointer) Restore(ctx context.Context, pid int, pairs []GPUPair) error {
	from := make([][16]byte, len(pairs))
	to := make([][16]byte, len(pairs))
	for i, p := range pairs {
		var err error
		if from[i], err = ParseUUID(p.From); err != nil {
			return err
		}
		if to[i], err = ParseUUID(p.To); err != nil {
			return err
		}
	}
	return c.call(ctx, pid, "restoring its GPU state", func() error { return c.api.restore(pid, from, to) })
}

// Unlock lets a restored (or merely locked) process call the driver again.
func (c *Checkpointer) Unlock(ctx context.Context, pid int) error {
	return c.call(ctx, pid, "unlocking its CUDA calls", func() error { return c.api.unlock(pid) })
}

// State reports where the process is in the checkpoint sequence.
func (c *Checkpointer) State(ctx context.Context, pid int) (ProcessState, error) {
	var s ProcessState
	err := c.call(ctx, pid, "reading its checkpoint state", func() error {
		var err error
		s, err = c.api.state(pid)
		return err
	})
	return s, err
}

// Suspend locks the process and checkpoints its GPU state, leaving it
// ready for a CRIU dump. On any failure it puts the process back to
// running (restore if needed, then unlock) before returning, so a failed
// suspend never leaves a session frozen.
func (c *Checkpointer) Suspend(ctx context.Context, pid int, timeout time.Duration) error {
	if err := c.Lock(ctx, pid, timeout); err != nil {
		return err
	}
	if err := c.Checkpoint(ctx, pid); err != nil {
		if rerr := c.Resume(context.WithoutCancel(ctx), pid, nil); rerr != nil {
			return fmt.Errorf("%w; rolling back also failed: %w", err, rerr)
		}
		return err
	}
	return nil
}

// Resume brings a process back from wherever Suspend left it, or from
// where a CRIU restore put it: restore (with pairs, when it moved to other
// GPUs) if its GPU state is checkpointed, then unlock. A running process
// is left alone, so Resume is safe to call more than once.
func (c *Checkpointer) Resume(ctx context.Context, pid int, pairs []GPUPair) error {
	st, err := c.State(ctx, pid)
	if err != nil {
		return err
	}
	switch st {
	case StateRunning:
		return nil
	case StateCheckpointed:
		if err := c.Restore(ctx, pid, pairs); err != nil {
			return err
		}
	case StateLocked:
	default:
		return errs.New(errs.FailedPrecondition, subject(pid), "the driver reports checkpoint state %s; the process cannot be resumed", st)
	}
	return c.Unlock(ctx, pid)
}
