// Package ptx parses the PTX that nvcc emits and executes its kernels on
// the host. It is the engine of the emulated backend.
//
// Load accepts PTX text, fatbins (compressed entries included) and ELF
// images that embed them. The parser builds a syntax tree; the compiler
// resolves every operand to a register slot (constants and special
// registers included) and every instruction to one closure, so the
// interpreter's inner loop is an indirect call per warp-instruction.
//
// Execution is SIMT: a warp of 32 lanes runs each instruction for all of
// its converged lanes at once. Divergent lanes keep their own program
// counters; the warp always runs the lanes with the lowest one, which
// reconverges if/else and loops at their join point, and warp-wide
// instructions (shfl, vote, match, redux) see exactly the converged lanes.
// Warps of a block run cooperatively on one goroutine and meet at
// barriers; blocks run in parallel on a pool of goroutines.
package ptx

import (
	"context"
	"io"
	"runtime/debug"
	"sync"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Memory is global device memory as the emulated backend lays it out: a
// set of disjoint allocations in a 64-bit address space.
type Memory interface {
	// Span returns the allocation that contains addr: its base address and
	// its bytes. ok is false when addr lies in no allocation; the kernel
	// then fails with CUDA_ERROR_ILLEGAL_ADDRESS.
	Span(addr uint64) (base uint64, data []byte, ok bool)
}

// Param is one kernel parameter's place in the flat parameter buffer.
type Param struct {
	Offset uint32
	Size   uint32
}

// Global is a module-scope .global or .const variable. The backend
// allocates Size bytes of device memory for it, copies Init (which may be
// shorter than Size; the rest is zero) there, and tells the module the
// address with BindGlobal before the first launch.
type Global struct {
	Name string
	Size uint64
	Init []byte
}

// Launch is one kernel launch.
type Launch struct {
	Grid, Block [3]uint32
	SharedBytes uint32 // dynamic shared memory (.extern .shared)
	Params      []byte // flat, laid out per Function.Params
	// Output receives the kernel's printf output, one Write per call;
	// nil discards it. Writes are serialised.
	Output io.Writer
}

// Module is a loaded PTX module.
type Module struct {
	ptxVersion  int    // major*10 + minor
	sm          int    // the .target architecture
	constBytes  uint64 // total size of the .const variables
	vars        []Global
	varIndex    map[string]int
	sharedVars  []*varDecl     // module and function-scope .shared variables
	sharedIndex map[string]int // by name ("func\x00name" for function scope)
	cfuncs      map[string]*cfunc
	entries     map[string]*Function
	entryOrder  []string

	mu    sync.Mutex
	gaddr []uint64
	bound []bool
}

// Function is a kernel (.entry) of a module.
type Function struct {
	m  *Module
	cf *cfunc
	// workers keeps block state between launches of the same shape.
	workers sync.Pool
}

// Limits of the emulated device, as the backend reports them.
const (
	MaxThreadsPerBlock = 1024
	MaxSharedPerBlock  = 227 << 10 // opt-in maximum, as on sm_90
	DefaultSharedLimit = 48 << 10
	// maxBlockRegisterBytes bounds the register files of one block.
	maxBlockRegisterBytes = 64 << 20
)

// Load parses image, which may be PTX text, a cubin (ELF) or a fatbin
// (including compressed entries) that embeds PTX. An image without PTX
// fails with CUDA_ERROR_NO_BINARY_FOR_GPU and says how to rebuild it.
func Load(image []byte) (m *Module, err error) {
	defer func() {
		// Last resort: a bug in the loader must not take the worker down.
		if r := recover(); r != nil {
			m, err = nil, cu.Errorf(cu.ErrorInvalidPTX, "emulator fault while loading the module: %v\n%s", r, debug.Stack())
		}
	}()
	src, err := extractPTX(image)
	if err != nil {
		return nil, err
	}
	a, err := parseSource(src)
	if err != nil {
		return nil, cu.Errorf(cu.ErrorInvalidPTX, "PTX syntax error: %v", err)
	}
	if a.version == "" {
		return nil, cu.Errorf(cu.ErrorInvalidPTX, "PTX has no .version directive")
	}
	if a.verMajor < 6 || a.verMajor > 9 {
		return nil, cu.Errorf(cu.ErrorUnsupportedPTXVersion, "PTX ISA version %s is not supported (6.0 to 9.x are)", a.version)
	}
	if a.sm > DeviceSM {
		return nil, cu.Errorf(cu.ErrorNoBinaryForGPU,
			"PTX targets %s, newer than the emulated device (sm_%d): rebuild with -gencode arch=compute_%d,code=compute_%d",
			a.target, DeviceSM, DeviceSM, DeviceSM)
	}
	return compileModule(a)
}

// Globals lists the module's variables that need device memory.
func (m *Module) Globals() []Global {
	out := make([]Global, len(m.vars))
	copy(out, m.vars)
	return out
}

// BindGlobal records the device address of the named variable.
func (m *Module) BindGlobal(name string, addr uint64) error {
	i, ok := m.varIndex[name]
	if !ok {
		return cu.Errorf(cu.ErrorNotFound, "global %q is not defined in this module", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.gaddr[i] = addr
	m.bound[i] = true
	return nil
}

// GlobalAddr returns a bound variable's address and size
// (cuModuleGetGlobal). Unknown names fail with CUDA_ERROR_NOT_FOUND.
func (m *Module) GlobalAddr(name string) (addr, size uint64, err error) {
	i, ok := m.varIndex[name]
	if !ok {
		return 0, 0, cu.Errorf(cu.ErrorNotFound, "global %q is not defined in this module", name)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.bound[i] {
		return 0, 0, cu.Errorf(cu.ErrorNotFound, "global %q has no device memory yet", name)
	}
	return m.gaddr[i], m.vars[i].Size, nil
}

// Kernels lists the module's kernel names in source order.
func (m *Module) Kernels() []string { return append([]string(nil), m.entryOrder...) }

// Function looks up a kernel by name (CUDA_ERROR_NOT_FOUND if absent).
func (m *Module) Function(name string) (*Function, error) {
	f, ok := m.entries[name]
	if !ok {
		return nil, cu.Errorf(cu.ErrorNotFound, "kernel %q is not defined in this module", name)
	}
	return f, nil
}

// Name is the kernel's (mangled) name.
func (f *Function) Name() string { return f.cf.name }

// Params is the kernel's parameter layout.
func (f *Function) Params() []Param { return append([]Param(nil), f.cf.kparams...) }

// paramBytes is the size of the flat parameter buffer.
func (f *Function) paramBytes() uint32 {
	var n uint32
	for _, p := range f.cf.kparams {
		n = max(n, p.Offset+p.Size)
	}
	return n
}

// CUfunction_attribute values.
const (
	attrMaxThreadsPerBlock      = 0
	attrSharedSizeBytes         = 1
	attrConstSizeBytes          = 2
	attrLocalSizeBytes          = 3
	attrNumRegs                 = 4
	attrPTXVersion              = 5
	attrBinaryVersion           = 6
	attrCacheModeCA             = 7
	attrMaxDynamicSharedSize    = 8
	attrPreferredSharedCarveout = 9
	attrLast                    = 15
)

func (f *Function) maxThreads() int32 {
	cf := f.cf
	limit := MaxThreadsPerBlock
	// A function with a huge register file fits fewer threads per block,
	// as on the device.
	if perWarp := len(cf.template) * 8; perWarp > 0 {
		limit = min(limit, maxBlockRegisterBytes/perWarp*warpSize)
	}
	switch {
	case cf.reqntid[0] > 0:
		return int32(min(cf.reqntid[0]*cf.reqntid[1]*cf.reqntid[2], limit))
	case cf.maxntid[0] > 0:
		return int32(min(cf.maxntid[0]*cf.maxntid[1]*cf.maxntid[2], limit))
	}
	return int32(limit)
}

// Attribute answers cuFuncGetAttribute for a CUfunction_attribute value
// (max threads per block, static shared bytes, local bytes, registers,
// PTX and binary version).
func (f *Function) Attribute(attr int32) (int32, error) {
	m := f.m
	switch attr {
	case attrMaxThreadsPerBlock:
		return f.maxThreads(), nil
	case attrSharedSizeBytes:
		return int32(f.cf.staticShared), nil
	case attrConstSizeBytes:
		return int32(min(m.constBytes, 1<<31-1)), nil
	case attrLocalSizeBytes:
		return int32(f.cf.localSize), nil
	case attrNumRegs:
		return int32(min(max(f.cf.nregs, 16), 255)), nil
	case attrPTXVersion:
		return int32(m.ptxVersion), nil
	case attrBinaryVersion:
		return DeviceSM, nil
	case attrCacheModeCA:
		return 0, nil
	case attrMaxDynamicSharedSize:
		return int32(DefaultSharedLimit - min(f.cf.staticShared, DefaultSharedLimit)), nil
	case attrPreferredSharedCarveout:
		return -1, nil
	}
	if attr > attrPreferredSharedCarveout && attr <= attrLast {
		return 0, nil
	}
	return 0, cu.Errorf(cu.ErrorInvalidValue, "function attribute %d is not known", attr)
}

// Run executes the launch to completion, running blocks in parallel on up
// to workers goroutines. Errors are *cu.Error: CUDA_ERROR_ILLEGAL_ADDRESS
// for an out-of-bounds access, CUDA_ERROR_NOT_SUPPORTED naming an
// unsupported instruction, CUDA_ERROR_INVALID_VALUE for a bad launch
// configuration. A kernel can never crash the calling process.
func (f *Function) Run(ctx context.Context, l Launch, mem Memory, workers int) error {
	_, err := f.run(ctx, l, mem, workers)
	return err
}

// Validate checks a launch configuration without running it: the errors a
// real cuLaunchKernel returns at once rather than at the next
// synchronisation (CUDA_ERROR_INVALID_VALUE for bad dimensions, parameters
// or shared memory; CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES for more threads
// than the kernel allows). Run performs the same checks.
func (f *Function) Validate(l Launch) error {
	_, err := f.prepare(context.Background(), l, nil)
	return err
}

// runStats describes one finished launch (for benchmarks).
type runStats struct {
	ThreadInstructions uint64 // instructions issued, counted per thread
}

// run is Run that also reports statistics.
func (f *Function) run(ctx context.Context, l Launch, mem Memory, workers int) (runStats, error) {
	ln, err := f.prepare(ctx, l, mem)
	if err != nil {
		return runStats{}, err
	}
	err = execute(ln, workers, &f.workers)
	return runStats{ThreadInstructions: ln.tinsts.Load()}, err
}

// prepare validates a launch and sets up its shared state.
func (f *Function) prepare(ctx context.Context, l Launch, mem Memory) (*launch, error) {
	name := f.cf.name
	g, b := l.Grid, l.Block
	for i := 0; i < 3; i++ {
		if g[i] == 0 || b[i] == 0 {
			return nil, cu.Errorf(cu.ErrorInvalidValue, "kernel %s: grid %v and block %v must have no zero dimension", name, g, b)
		}
	}
	threads := uint64(b[0]) * uint64(b[1]) * uint64(b[2])
	if b[0] > 1024 || b[1] > 1024 || b[2] > 64 || threads > MaxThreadsPerBlock {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "kernel %s: block %v has %d threads; at most %d fit (x,y <= 1024, z <= 64)", name, b, threads, MaxThreadsPerBlock)
	}
	if threads > uint64(f.maxThreads()) {
		// Over the kernel's own limit (.maxntid/.reqntid or its
		// registers): the device's "too many resources requested".
		return nil, cu.Errorf(cu.ErrorLaunchOutOfResources, "kernel %s: block %v has %d threads; this kernel allows at most %d (CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK)",
			name, b, threads, f.maxThreads())
	}
	if d := f.cf.reqntid; d[0] > 0 && (uint32(d[0]) != b[0] || uint32(d[1]) != b[1] || uint32(d[2]) != b[2]) {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "kernel %s requires a block of %v threads (.reqntid), launched with %v", name, d, b)
	}
	if g[0] > 1<<31-1 || g[1] > 65535 || g[2] > 65535 {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "kernel %s: grid %v exceeds (2^31-1, 65535, 65535)", name, g)
	}
	if need := f.paramBytes(); uint32(len(l.Params)) < need {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "kernel %s takes %d bytes of parameters, the launch passed %d", name, need, len(l.Params))
	}
	// Each warp holds its kernel's register file; a block of them must
	// stay within reason (the device would refuse the launch too).
	warps := (threads + warpSize - 1) / warpSize
	if rf := warps * uint64(len(f.cf.template)) * 8; rf > maxBlockRegisterBytes {
		return nil, cu.Errorf(cu.ErrorLaunchOutOfResources, "kernel %s: a block of %d threads needs %d MiB of registers; at most %d MiB fit",
			name, threads, rf>>20, maxBlockRegisterBytes>>20)
	}
	m := f.m
	sh := uint64(f.cf.staticShared)
	if f.cf.hasDyn || l.SharedBytes > 0 {
		sh = uint64(f.cf.dynOff) + uint64(l.SharedBytes)
	}
	if sh > MaxSharedPerBlock {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "kernel %s needs %d bytes of shared memory per block; the device has %d", name, sh, MaxSharedPerBlock)
	}
	m.mu.Lock()
	gaddr := append([]uint64(nil), m.gaddr...)
	for i, ok := range m.bound {
		if !ok {
			m.mu.Unlock()
			return nil, cu.Errorf(cu.ErrorInvalidValue, "kernel %s: module variable %q has no device memory (BindGlobal was not called)", name, m.vars[i].Name)
		}
	}
	m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, canceled(name, err)
	}
	ln := &launch{
		ctx:      ctx,
		kernel:   f.cf,
		mod:      m,
		mem:      mem,
		params:   append([]byte(nil), l.Params...), // the kernel may write its copy
		grid:     g,
		blk:      b,
		shBytes:  uint32(sh),
		dynBytes: l.SharedBytes,
		out:      l.Output,
		gaddr:    gaddr,
	}
	ln.start = timeNow()
	return ln, nil
}
