package emulated

import (
	"context"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// tpcsPerGPC is how many TPCs the emulated device puts in one GPC
// (Hopper's full GPC has nine).
const tpcsPerGPC = 9

// TPCLayout describes the emulated device as GPUs of compute capability
// 9.0 are built: two multiprocessors per TPC (one TPC for an odd one
// out) and up to nine TPCs per GPC, the TPCs numbered round-robin across
// the GPCs. Nothing runs differently for it; a library that asks gets a
// layout consistent with the multiprocessor count the device reports.
func (d *Device) TPCLayout(_ context.Context, h backend.Ctx) (gpc, local []byte, err error) {
	if _, err := d.ctx(h); err != nil {
		return nil, nil, err
	}
	tpcs := (d.cfg.Cores + 1) / 2
	if tpcs > 255 {
		tpcs = 255
	}
	gpcs := (tpcs + tpcsPerGPC - 1) / tpcsPerGPC
	gpc, local = make([]byte, tpcs), make([]byte, tpcs)
	for i := range tpcs {
		gpc[i], local[i] = byte(i%gpcs), byte(i/gpcs)
	}
	return gpc, local, nil
}

// Stream numbers: a created stream's is its handle (handles are never
// reused in a device's life); a context's default streams, which have no
// handle of their own, are numbered from the context's handle with a tag
// in the top bits that no handle carries.
const (
	streamIDLegacy    = 1 << 62
	streamIDPerThread = 2 << 62
)

// StreamGetID answers cuStreamGetId.
func (d *Device) StreamGetID(_ context.Context, h backend.Ctx, s backend.Stream) (uint64, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	if err := d.stream(c, s); err != nil {
		return 0, err
	}
	switch s {
	case 0, streamLegacy:
		return uint64(c.handle) | streamIDLegacy, nil
	case streamPerThread:
		return uint64(c.handle) | streamIDPerThread, nil
	}
	return uint64(s), nil
}

// MemHandleRetain takes one more reference to a physical allocation,
// which a MemRelease of the same handle drops.
func (d *Device) MemHandleRetain(_ context.Context, h backend.MemHandle) error {
	ph, ok := d.phys[h]
	if !ok || (ph.released && ph.refs == 0) {
		return cu.Errorf(cu.ErrorInvalidValue, "memory handle %#x does not exist", uint64(h))
	}
	ph.refs++
	return nil
}
