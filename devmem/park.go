package devmem

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

// A checkpoint that leaves the session running parks the device memory
// (backend.Parker) instead of copying it to the host while the client
// waits: the backend snapshots it on the device and hands the memory and
// the snapshot out as descriptors, gpud holds them across the driver's
// checkpoint and the dump, and Unpark brings them back. The client then
// runs again and a Save with Snapshot set copies the snapshot to the host
// for the store, while the session runs.

// ErrNoPark says that the backend cannot park its memory; the caller
// saves it instead.
var ErrNoPark = errors.New("this backend cannot park device memory")

// Parked describes a park: Files descriptors travel with it, in the
// backend's order.
type Parked struct {
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// Where the time went: the snapshot, export and release
	// (ParkNS), and trimming the contexts' own reservations.
	ParkNS    int64  `json:"park_ns"`
	TrimNS    int64  `json:"trim_ns,omitempty"`
	TrimError string `json:"trim_error,omitempty"`
}

// UnparkRequest is what gpud asks of a parked worker; the descriptors
// Park handed out travel with it.
type UnparkRequest struct {
	// Keep keeps the snapshot for a Save with Snapshot set; without it
	// the snapshot is dropped (a checkpoint that failed after the park).
	Keep bool `json:"keep,omitempty"`
}

// Park parks dev's memory and trims its contexts; the returned files
// hold the memory until Unpark.
func (t *Tracker) Park(ctx context.Context, dev backend.DeviceMemory) ([]*os.File, Parked, error) {
	p, ok := dev.(backend.Parker)
	if !ok {
		return nil, Parked{}, ErrNoPark
	}
	t0 := time.Now()
	regs, err := dev.MemRegions(ctx)
	if err != nil {
		return nil, Parked{}, fmt.Errorf("list device memory: %w", err)
	}
	files, err := p.Park(ctx)
	if err != nil {
		return nil, Parked{}, fmt.Errorf("park device memory: %w", err)
	}
	pk := Parked{Files: len(files), ParkNS: time.Since(t0).Nanoseconds()}
	for _, r := range regs {
		pk.Bytes += int64(r.Size)
	}
	if tr, ok := dev.(backend.ContextTrimmer); ok {
		t1 := time.Now()
		if err := tr.TrimContexts(ctx); err != nil {
			pk.TrimError = err.Error()
		}
		pk.TrimNS = time.Since(t1).Nanoseconds()
	}
	return files, pk, nil
}

// Unpark maps parked memory back from files (Park's, which the caller
// keeps) and sets the contexts' trimmed limits back, before the session's
// next launch.
func (t *Tracker) Unpark(ctx context.Context, dev backend.DeviceMemory, files []*os.File, req UnparkRequest) error {
	p, ok := dev.(backend.Parker)
	if !ok {
		return ErrNoPark
	}
	if err := p.Unpark(ctx, files, req.Keep); err != nil {
		return fmt.Errorf("unpark device memory: %w", err)
	}
	if tr, ok := dev.(backend.ContextTrimmer); ok {
		if err := tr.UntrimContexts(ctx); err != nil {
			return fmt.Errorf("set the contexts' limits back: %w", err)
		}
	}
	return nil
}

// snapshotOf is the memory a Save with Snapshot set reads.
func snapshotOf(dev backend.DeviceMemory) (backend.DeviceMemory, error) {
	p, ok := dev.(backend.Parker)
	if !ok {
		return nil, ErrNoPark
	}
	s := p.MemSnapshot()
	if s == nil {
		return nil, errors.New("no snapshot of device memory is held: it was not kept, could not be mapped back, or was saved already")
	}
	return s, nil
}
