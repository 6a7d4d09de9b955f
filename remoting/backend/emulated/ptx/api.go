// Package ptx parses the PTX that nvcc emits and executes its kernels on
// the host. It is the engine of the emulated backend.
//
// This file fixes the package's surface; the parser and interpreter fill
// it in.
package ptx

import (
	"context"

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
}

// Module is a loaded PTX module.
type Module struct {
	_ struct{}
}

// Function is a kernel (.entry) of a module.
type Function struct {
	_ struct{}
}

// Load parses image, which may be PTX text, a cubin (ELF) or a fatbin
// (including compressed entries) that embeds PTX. An image without PTX
// fails with CUDA_ERROR_NO_BINARY_FOR_GPU and says how to rebuild it.
func Load(image []byte) (*Module, error) {
	return nil, cu.Errorf(cu.ErrorNotSupported, "PTX loading is not implemented")
}

// Globals lists the module's variables that need device memory.
func (m *Module) Globals() []Global { return nil }

// BindGlobal records the device address of the named variable.
func (m *Module) BindGlobal(name string, addr uint64) error {
	return cu.Errorf(cu.ErrorNotFound, "global %q", name)
}

// GlobalAddr returns a bound variable's address and size
// (cuModuleGetGlobal). Unknown names fail with CUDA_ERROR_NOT_FOUND.
func (m *Module) GlobalAddr(name string) (addr, size uint64, err error) {
	return 0, 0, cu.Errorf(cu.ErrorNotFound, "global %q", name)
}

// Function looks up a kernel by name (CUDA_ERROR_NOT_FOUND if absent).
func (m *Module) Function(name string) (*Function, error) {
	return nil, cu.Errorf(cu.ErrorNotFound, "kernel %q", name)
}

// Name is the kernel's (mangled) name.
func (f *Function) Name() string { return "" }

// Params is the kernel's parameter layout.
func (f *Function) Params() []Param { return nil }

// Attribute answers cuFuncGetAttribute for a CUfunction_attribute value
// (max threads per block, static shared bytes, local bytes, registers,
// PTX and binary version).
func (f *Function) Attribute(attr int32) (int32, error) {
	return 0, cu.ErrorNotSupported
}

// Run executes the launch to completion, running blocks in parallel on up
// to workers goroutines. Errors are *cu.Error: CUDA_ERROR_ILLEGAL_ADDRESS
// for an out-of-bounds access, CUDA_ERROR_NOT_SUPPORTED naming an
// unsupported instruction, CUDA_ERROR_INVALID_VALUE for a bad launch
// configuration. A kernel can never crash the calling process.
func (f *Function) Run(ctx context.Context, l Launch, mem Memory, workers int) error {
	return cu.Errorf(cu.ErrorNotSupported, "PTX execution is not implemented")
}
