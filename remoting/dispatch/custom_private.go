package dispatch

import (
	"context"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// maxTPCs bounds a TPC layout: the driver keeps it in arrays of 256
// bytes.
const maxTPCs = 256

// doTPCLayout serves the driver's TPC layout to a client whose cuBLASLt
// asks for it; backends that do not know it answer
// CUDA_ERROR_NOT_SUPPORTED.
func (s *Session) doTPCLayout(ctx context.Context, x *call, c backend.Ctx) ([]byte, []byte, error) {
	l, ok := s.dev.(backend.TPCLayouts)
	if !ok {
		return nil, nil, cu.Errorf(cu.ErrorNotSupported, "TPCLayout: this backend does not know the device's TPC layout")
	}
	gpc, local, err := l.TPCLayout(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	if len(gpc) != len(local) || len(gpc) > maxTPCs {
		return nil, nil, cu.Errorf(cu.ErrorUnknown, "TPCLayout: backend answered %d and %d bytes (want equal lengths up to %d)", len(gpc), len(local), maxTPCs)
	}
	return gpc, local, nil
}

func (s *Session) doStreamGetId(ctx context.Context, x *call, c backend.Ctx, st backend.Stream) (uint64, error) {
	ids, ok := s.dev.(backend.StreamIDs)
	if !ok {
		return 0, cu.Errorf(cu.ErrorNotSupported, "StreamGetId: this backend does not number its streams")
	}
	return ids.StreamGetID(ctx, c, st)
}

func (s *Session) doMemHandleRetain(ctx context.Context, x *call, h backend.MemHandle) error {
	r, ok := s.dev.(backend.MemHandleRetainer)
	if !ok {
		return cu.Errorf(cu.ErrorNotSupported, "MemHandleRetain: this backend cannot retain a memory handle")
	}
	return r.MemHandleRetain(ctx, h)
}
