package emulated

import (
	"context"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// A context's resource limits (CUlimit, CUDA 13's numbering).
const (
	limitStackSize          = 0
	limitPrintfFIFOSize     = 1
	limitMallocHeapSize     = 2
	limitSyncDepth          = 3
	limitPendingLaunchCount = 4
	limitMaxL2Fetch         = 5
	limitPersistingL2       = 6
	limitShmemSize          = 7 // shared memory kernels may use (CUDA 12.5); read-only
	limitCIGEnabled         = 8 // the context shares the GPU with graphics (CIG); read-only
	limitCIGShmemFallback   = 9
	limitCount              = 10
)

// limitDefaults are a new context's limits: NVIDIA's defaults for the
// sizes the interpreter has no use for, and for the shared memory limit
// all the shared memory of a multiprocessor, since an emulated context
// never shares the device with graphics.
var limitDefaults = [limitCount]uint64{
	limitStackSize:          1 << 10,
	limitPrintfFIFOSize:     1 << 20,
	limitMallocHeapSize:     8 << 20,
	limitSyncDepth:          2,
	limitPendingLaunchCount: 2048,
	limitMaxL2Fetch:         64,
	limitPersistingL2:       0,
	limitShmemSize:          228 << 10, // attrMaxSharedMemoryPerMultipro
	limitCIGEnabled:         0,
	limitCIGShmemFallback:   1,
}

func (d *Device) CtxGetLimit(_ context.Context, h backend.Ctx, limit int32) (uint64, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	if limit < 0 || limit >= limitCount {
		return 0, cu.Errorf(cu.ErrorUnsupportedLimit, "limit %d does not exist", limit)
	}
	if v, ok := c.limits[limit]; ok {
		return v, nil
	}
	return limitDefaults[limit], nil
}

func (d *Device) CtxSetLimit(_ context.Context, h backend.Ctx, limit int32, value uint64) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	switch {
	case limit < 0 || limit >= limitCount:
		return cu.Errorf(cu.ErrorUnsupportedLimit, "limit %d does not exist", limit)
	case limit == limitShmemSize || limit == limitCIGEnabled:
		return cu.Errorf(cu.ErrorInvalidValue, "limit %d can only be read", limit)
	case limit == limitMaxL2Fetch && value > 128:
		return cu.Errorf(cu.ErrorInvalidValue, "L2 fetch granularity %d (must be 0..128)", value)
	}
	if c.limits == nil {
		c.limits = map[int32]uint64{}
	}
	c.limits[limit] = value
	return nil
}

// OccupancyClusters is answered by the client's own calculator: the
// interpreter runs blocks independently and groups no SMs.
func (d *Device) OccupancyClusters(_ context.Context, h backend.Ctx, fh backend.Function, _ backend.LaunchConfig, _ backend.ClusterQuery) (int32, error) {
	if _, _, err := d.function(h, fh); err != nil {
		return 0, err
	}
	return 0, cu.Errorf(cu.ErrorNotSupported, "the emulated device leaves cluster occupancy to the client")
}
