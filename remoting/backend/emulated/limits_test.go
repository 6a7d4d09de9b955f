package emulated

import (
	"context"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

func TestContextLimits(t *testing.T) {
	d, c := newTestDevice(t, 16<<20)
	ctx := context.Background()
	other, err := d.CtxCreate(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Every limit of CUDA 13 reads, with the defaults a new context has;
	// the shared memory limit is a multiprocessor's shared memory.
	smSmem, _ := d.attribute(attrMaxSharedMemoryPerMultipro)
	for limit, want := range map[int32]uint64{
		limitStackSize: 1024, limitMallocHeapSize: 8 << 20, limitShmemSize: uint64(smSmem), limitCIGEnabled: 0,
		limitCIGShmemFallback: 1,
	} {
		if v, err := d.CtxGetLimit(ctx, c, limit); err != nil || v != want {
			t.Errorf("limit %d = %d, %v; want %d", limit, v, err, want)
		}
	}
	for _, tc := range []struct {
		name  string
		limit int32
		value uint64
		want  cu.Result
	}{
		{"stack size", limitStackSize, 4096, cu.Success},
		{"L2 fetch granularity", limitMaxL2Fetch, 128, cu.Success},
		{"L2 fetch granularity past 128", limitMaxL2Fetch, 129, cu.ErrorInvalidValue},
		{"shared memory is read-only", limitShmemSize, 1024, cu.ErrorInvalidValue},
		{"CIG is read-only", limitCIGEnabled, 1, cu.ErrorInvalidValue},
		{"no such limit", limitCount, 1, cu.ErrorUnsupportedLimit},
		{"negative limit", -1, 1, cu.ErrorUnsupportedLimit},
	} {
		err := d.CtxSetLimit(ctx, c, tc.limit, tc.value)
		if cu.Code(err) != tc.want {
			t.Errorf("%s: set %d = %v, want %v", tc.name, tc.value, err, tc.want)
			continue
		}
		if tc.want == cu.Success {
			if v, err := d.CtxGetLimit(ctx, c, tc.limit); err != nil || v != tc.value {
				t.Errorf("%s: read back %d, %v; want %d", tc.name, v, err, tc.value)
			}
		}
	}
	// Limits are per context.
	if v, _ := d.CtxGetLimit(ctx, other, limitStackSize); v != 1024 {
		t.Errorf("another context's stack size is %d after setting this one's, want 1024", v)
	}
	if _, err := d.CtxGetLimit(ctx, backend.Ctx(0xdead), limitStackSize); cu.Code(err) != cu.ErrorInvalidContext {
		t.Errorf("a limit of no context: %v, want CUDA_ERROR_INVALID_CONTEXT", err)
	}
	if _, err := d.CtxGetLimit(ctx, c, limitCount); cu.Code(err) != cu.ErrorUnsupportedLimit {
		t.Errorf("limit %d: %v, want CUDA_ERROR_UNSUPPORTED_LIMIT", limitCount, err)
	}
}
