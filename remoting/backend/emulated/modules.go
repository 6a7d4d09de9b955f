package emulated

import (
	"context"
	"errors"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated/ptx"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

type module struct {
	ctx     backend.Ctx
	mod     *ptx.Module
	globals []uint64 // device addresses of the module's variables
}

type function struct {
	ctx    backend.Ctx
	module backend.Module
	fn     *ptx.Function
	// maxDynShared is CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
	// carveout is CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT.
	maxDynShared int32
	carveout     int32
	paramBytes   uint32 // the end of the last parameter
	// The cluster attributes a program may set (CUDA 12): the required
	// cluster shape, whether non-portable sizes are allowed and the
	// scheduling policy. They matter only to cluster launches, which
	// this device refuses, but are kept and reported as set.
	clusterDims  [3]int32
	nonPortable  int32
	clusterSched int32
}

// CUfunction_attribute values the backend answers itself.
const (
	funcAttrMaxThreadsPerBlock = 0
	funcAttrSharedSizeBytes    = 1
	funcAttrMaxDynamicShared   = 8
	funcAttrPreferredCarveout  = 9
	funcAttrClusterWidth       = 11 // ..13: height, depth
	funcAttrNonPortableCluster = 14
	funcAttrClusterScheduling  = 15
)

func (d *Device) ModuleLoad(_ context.Context, h backend.Ctx, image []byte) (backend.Module, error) {
	if _, err := d.ctx(h); err != nil {
		return 0, err
	}
	pm, err := ptx.Load(image)
	if err != nil {
		return 0, err
	}
	m := &module{ctx: h, mod: pm}
	for _, g := range pm.Globals() {
		size := g.Size
		if size == 0 {
			size = 1 // an empty variable still needs an address of its own
		}
		a, err := d.mem.alloc(size, h)
		if err == nil {
			copy(a.data, g.Init)
			m.globals = append(m.globals, a.base)
			err = pm.BindGlobal(g.Name, a.base)
		}
		if err != nil {
			d.freeGlobals(m)
			return 0, err
		}
	}
	handle := backend.Module(d.newID())
	d.modules[handle] = m
	return handle, nil
}

func (d *Device) freeGlobals(m *module) {
	for _, p := range m.globals {
		_ = d.mem.free(p)
	}
	m.globals = nil
}

// isGlobal reports whether p is the address of a module variable.
func (d *Device) isGlobal(p uint64) bool {
	for _, m := range d.modules {
		for _, g := range m.globals {
			if g == p {
				return true
			}
		}
	}
	return false
}

func (d *Device) module(h backend.Ctx, mh backend.Module) (*module, error) {
	if _, err := d.ctx(h); err != nil {
		return nil, err
	}
	m, ok := d.modules[mh]
	if !ok || m.ctx != h {
		return nil, cu.Errorf(cu.ErrorInvalidHandle, "module %#x does not exist in context %#x", uint64(mh), uint64(h))
	}
	return m, nil
}

func (d *Device) ModuleUnload(_ context.Context, h backend.Ctx, mh backend.Module) error {
	m, err := d.module(h, mh)
	if err != nil {
		return err
	}
	for fh, f := range d.funcs {
		if f.module == mh {
			delete(d.funcs, fh)
		}
	}
	d.freeGlobals(m)
	delete(d.modules, mh)
	return nil
}

func (d *Device) ModuleGetFunction(_ context.Context, h backend.Ctx, mh backend.Module, name string) (backend.Function, []backend.Param, error) {
	m, err := d.module(h, mh)
	if err != nil {
		return 0, nil, err
	}
	pf, err := m.mod.Function(name)
	if err != nil {
		return 0, nil, err
	}
	ps := pf.Params()
	params := make([]backend.Param, len(ps))
	var paramBytes uint32
	for i, p := range ps {
		params[i] = backend.Param{Offset: p.Offset, Size: p.Size}
		paramBytes = max(paramBytes, p.Offset+p.Size)
	}
	fh := backend.Function(d.newID())
	static, _ := pf.Attribute(funcAttrSharedSizeBytes)
	d.funcs[fh] = &function{ctx: h, module: mh, fn: pf, maxDynShared: sharedPerBlock - static, carveout: -1, paramBytes: paramBytes}
	return fh, params, nil
}

func (d *Device) ModuleGetGlobal(_ context.Context, h backend.Ctx, mh backend.Module, name string) (backend.DevPtr, uint64, error) {
	m, err := d.module(h, mh)
	if err != nil {
		return 0, 0, err
	}
	addr, size, err := m.mod.GlobalAddr(name)
	if err != nil {
		return 0, 0, err
	}
	return backend.DevPtr(addr), size, nil
}

func (d *Device) function(h backend.Ctx, fh backend.Function) (*context_, *function, error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, nil, err
	}
	f, ok := d.funcs[fh]
	if !ok || f.ctx != h {
		return nil, nil, cu.Errorf(cu.ErrorInvalidHandle, "function %#x does not exist in context %#x", uint64(fh), uint64(h))
	}
	return c, f, nil
}

func (d *Device) FuncGetAttribute(_ context.Context, h backend.Ctx, fh backend.Function, attr int32) (int32, error) {
	_, f, err := d.function(h, fh)
	if err != nil {
		return 0, err
	}
	switch attr {
	case funcAttrMaxDynamicShared:
		return f.maxDynShared, nil
	case funcAttrPreferredCarveout:
		return f.carveout, nil
	case funcAttrClusterWidth, funcAttrClusterWidth + 1, funcAttrClusterWidth + 2:
		return f.clusterDims[attr-funcAttrClusterWidth], nil
	case funcAttrNonPortableCluster:
		return f.nonPortable, nil
	case funcAttrClusterScheduling:
		return f.clusterSched, nil
	}
	return f.fn.Attribute(attr)
}

func (d *Device) FuncSetAttribute(_ context.Context, h backend.Ctx, fh backend.Function, attr int32, value int32) error {
	_, f, err := d.function(h, fh)
	if err != nil {
		return err
	}
	switch attr {
	case funcAttrMaxDynamicShared:
		static, _ := f.fn.Attribute(funcAttrSharedSizeBytes)
		if value < 0 || value+static > sharedPerBlockOptin {
			return cu.Errorf(cu.ErrorInvalidValue, "dynamic shared memory of %d bytes plus %d static exceeds the %d-byte opt-in limit",
				value, static, sharedPerBlockOptin)
		}
		f.maxDynShared = value
	case funcAttrPreferredCarveout:
		if value < -1 || value > 100 {
			return cu.Errorf(cu.ErrorInvalidValue, "shared memory carveout %d (must be -1..100)", value)
		}
		f.carveout = value
	case funcAttrClusterWidth, funcAttrClusterWidth + 1, funcAttrClusterWidth + 2:
		if value < 0 || value > maxClusterSize {
			return cu.Errorf(cu.ErrorInvalidValue, "cluster dimension %d (must be 0..%d)", value, maxClusterSize)
		}
		f.clusterDims[attr-funcAttrClusterWidth] = value
	case funcAttrNonPortableCluster:
		if value != 0 && value != 1 {
			return cu.Errorf(cu.ErrorInvalidValue, "non-portable cluster size allowed must be 0 or 1, not %d", value)
		}
		f.nonPortable = value
	case funcAttrClusterScheduling:
		if value < 0 || value > 2 {
			return cu.Errorf(cu.ErrorInvalidValue, "cluster scheduling policy %d (must be 0..2)", value)
		}
		f.clusterSched = value
	default:
		return cu.Errorf(cu.ErrorInvalidValue, "function attribute %d cannot be set", attr)
	}
	return nil
}

// Launch checks the configuration (bad arguments fail the call itself, as
// in CUDA) and runs the kernel to completion. A failure inside the kernel
// is recorded on the context for the next call to report.
func (d *Device) Launch(ctx context.Context, h backend.Ctx, fh backend.Function, cfg backend.LaunchConfig) error {
	c, f, err := d.function(h, fh)
	if err != nil {
		return err
	}
	if err := d.stream(c, cfg.Stream); err != nil {
		return err
	}
	if err := checkLaunch(cfg, f); err != nil {
		return err
	}
	// Clusters share distributed shared memory and synchronise across
	// blocks, and a cooperative grid synchronises as a whole; the
	// interpreter runs blocks independently and does neither. The device
	// reports both as unsupported (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH and
	// _COOPERATIVE_LAUNCH are 0), so clients refuse them before sending.
	if cfg.Clustered() {
		return cu.Errorf(cu.ErrorNotSupported, "kernel %s: thread-block clusters (%v) are not supported by the emulated device",
			f.fn.Name(), cfg.Cluster)
	}
	if cfg.Cooperative {
		return cu.Errorf(cu.ErrorNotSupported, "kernel %s: cooperative launches are not supported by the emulated device", f.fn.Name())
	}
	if d.later(c, cfg.Stream, func() {
		// It runs during a later call, whose connection may be another.
		if err := d.run(context.WithoutCancel(ctx), c, f, cfg); err != nil {
			c.fail(err)
		}
	}) {
		return nil
	}
	err = d.run(ctx, c, f, cfg)
	d.pump()
	return err
}

// run executes a checked launch.
func (d *Device) run(ctx context.Context, c *context_, f *function, cfg backend.LaunchConfig) error {
	// No more goroutines than blocks: a small launch should not pay for
	// idle workers.
	blocks := uint64(cfg.Grid[0]) * uint64(cfg.Grid[1]) * uint64(cfg.Grid[2])
	workers := d.cfg.Cores
	if blocks < uint64(workers) {
		workers = int(blocks)
	}
	err := f.fn.Run(ctx, ptx.Launch{Grid: cfg.Grid, Block: cfg.Block, SharedBytes: cfg.SharedBytes, Params: cfg.Params}, d.mem, workers)
	if err == nil {
		return nil
	}
	if !isCUDA(err) || errors.Is(err, context.Canceled) {
		return err
	}
	if cu.Code(err) == cu.ErrorInvalidValue {
		return err // a configuration the interpreter rejects up front
	}
	d.log.Warn("kernel failed", "kernel", f.fn.Name(), "err", err)
	c.fail(err)
	return nil
}

func checkLaunch(cfg backend.LaunchConfig, f *function) error {
	g, b := cfg.Grid, cfg.Block
	if g[0] == 0 || g[1] == 0 || g[2] == 0 || b[0] == 0 || b[1] == 0 || b[2] == 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "launch dimensions grid %v block %v: every dimension must be at least 1", g, b)
	}
	if g[0] > maxGridDimX || g[1] > maxGridDimYZ || g[2] > maxGridDimYZ {
		return cu.Errorf(cu.ErrorInvalidValue, "grid %v exceeds the limits [%d %d %d]", g, maxGridDimX, maxGridDimYZ, maxGridDimYZ)
	}
	if b[0] > maxThreadsPerBlock || b[1] > maxThreadsPerBlock || b[2] > maxBlockDimZ ||
		uint64(b[0])*uint64(b[1])*uint64(b[2]) > maxThreadsPerBlock {
		return cu.Errorf(cu.ErrorInvalidValue, "block %v exceeds %d threads (z at most %d)", b, maxThreadsPerBlock, maxBlockDimZ)
	}
	// The H200 refuses a parameter buffer longer than the kernel's
	// parameters (a struct's tail padding passed through `extra`) with
	// LAUNCH_OUT_OF_RESOURCES; do the same so programs fail here first.
	if uint32(len(cfg.Params)) > f.paramBytes {
		return cu.Errorf(cu.ErrorLaunchOutOfResources, "the parameter buffer holds %d bytes but the kernel takes %d; pass the exact size with CU_LAUNCH_PARAM_BUFFER_SIZE",
			len(cfg.Params), f.paramBytes)
	}
	if int64(cfg.SharedBytes) > int64(f.maxDynShared) {
		return cu.Errorf(cu.ErrorInvalidValue, "%d bytes of dynamic shared memory exceed the function's limit of %d; raise it with cuFuncSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)",
			cfg.SharedBytes, f.maxDynShared)
	}
	return nil
}
