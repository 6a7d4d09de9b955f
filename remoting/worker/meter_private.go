package worker

import (
	"context"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// The meter wraps the device, which hides the device's optional
// interfaces from the dispatch; these pass them on.

func (m *meter) TPCLayout(ctx context.Context, c backend.Ctx) ([]byte, []byte, error) {
	l, ok := m.Device.(backend.TPCLayouts)
	if !ok {
		return nil, nil, cu.Errorf(cu.ErrorNotSupported, "TPCLayout: this backend does not know the device's TPC layout")
	}
	return l.TPCLayout(ctx, c)
}

func (m *meter) StreamGetID(ctx context.Context, c backend.Ctx, s backend.Stream) (uint64, error) {
	ids, ok := m.Device.(backend.StreamIDs)
	if !ok {
		return 0, cu.Errorf(cu.ErrorNotSupported, "StreamGetId: this backend does not number its streams")
	}
	return ids.StreamGetID(ctx, c, s)
}

// MemHandleRetain counts the new reference like a retained handle's: the
// memory stays counted until the last reference and mapping are gone.
func (m *meter) MemHandleRetain(ctx context.Context, h backend.MemHandle) error {
	r, ok := m.Device.(backend.MemHandleRetainer)
	if !ok {
		return cu.Errorf(cu.ErrorNotSupported, "MemHandleRetain: this backend cannot retain a memory handle")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := r.MemHandleRetain(ctx, h); err != nil {
		return err
	}
	if ref := m.handles[h]; ref != nil {
		ref.refs++
		ref.phys.refs++
	}
	return nil
}
