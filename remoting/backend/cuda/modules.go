package cuda

// #include <stdlib.h>
// #include "api.h"
import "C"

import (
	"context"
	"encoding/binary"
	"unsafe"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/cuda/modimage"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

type module struct {
	raw   C.CUmodule
	funcs map[C.CUfunction]backend.Function
	// vars is what the image defines that kernels and copies can
	// change outside the session's allocations; known is false when the
	// image could not be read with certainty (UntrackedState).
	vars  modimage.Info
	known bool
}

// function is a kernel the client looked up, with its parameter layout.
type function struct {
	raw      C.CUfunction
	ctx      backend.Ctx
	mod      backend.Module
	params   []backend.Param
	argBytes uint64 // size of the flat parameter buffer the kernel reads
}

// Image kinds, told apart by their first bytes.
const (
	fatbinMagic        = 0xBA55ED50 // a fatbin's header
	fatbinWrapperMagic = 0x466243B1 // the host-side struct nvcc emits around a fatbin
	maxParams          = 4096       // bounds the parameter walk on a broken driver
	jitLogBytes        = 8 << 10
)

// prepareImage checks that an image the client sent cannot lead the
// driver to read past its end, and NUL-terminates PTX text, which the
// driver reads as a C string. cubins and fatbins carry their own sizes;
// those sizes are checked against the bytes actually received.
func prepareImage(image []byte) ([]byte, error) {
	switch {
	case len(image) == 0:
		return nil, cu.Errorf(cu.ErrorInvalidImage, "empty module image")
	case len(image) >= 4 && string(image[:4]) == "\x7fELF":
		return image, checkELF(image)
	case len(image) >= 4 && binary.LittleEndian.Uint32(image) == fatbinMagic:
		if len(image) < 16 {
			return nil, cu.Errorf(cu.ErrorInvalidImage, "fatbin of %d bytes is shorter than its 16-byte header", len(image))
		}
		hdr := uint64(binary.LittleEndian.Uint16(image[6:]))
		body := binary.LittleEndian.Uint64(image[8:])
		if hdr < 16 || body > uint64(len(image)) || hdr+body > uint64(len(image)) {
			return nil, cu.Errorf(cu.ErrorInvalidImage, "fatbin header claims %d+%d bytes but %d arrived", hdr, body, len(image))
		}
		return image, nil
	case len(image) >= 4 && binary.LittleEndian.Uint32(image) == fatbinWrapperMagic:
		return nil, cu.Errorf(cu.ErrorInvalidImage, "the image is a fatbin wrapper, which holds a pointer into the client's memory; send the fatbin it points to")
	}
	if image[len(image)-1] == 0 {
		return image, nil
	}
	out := make([]byte, len(image)+1)
	copy(out, image)
	return out, nil
}

// checkELF bounds the section and program header tables of a cubin.
func checkELF(b []byte) error {
	if len(b) < 64 || b[4] != 2 || b[5] != 1 {
		return cu.Errorf(cu.ErrorInvalidImage, "cubin is not a little-endian ELF64 file")
	}
	le := binary.LittleEndian
	tables := []struct {
		what       string
		off        uint64
		num, entry uint16
	}{
		{"program header", le.Uint64(b[0x20:]), le.Uint16(b[0x38:]), le.Uint16(b[0x36:])},
		{"section header", le.Uint64(b[0x28:]), le.Uint16(b[0x3c:]), le.Uint16(b[0x3a:])},
	}
	for _, t := range tables {
		size := uint64(t.num) * uint64(t.entry)
		if t.off > uint64(len(b)) || size > uint64(len(b))-t.off {
			return cu.Errorf(cu.ErrorInvalidImage, "cubin %s table (%d entries at %d) lies outside its %d bytes", t.what, t.num, t.off, len(b))
		}
	}
	return nil
}

func (d *Device) ModuleLoad(_ context.Context, h backend.Ctx, image []byte) (backend.Module, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	image, err = prepareImage(image)
	if err != nil {
		return 0, err
	}
	// The image is copied to C memory: the driver may keep reading it
	// from threads of its own while it loads.
	cimg := C.CBytes(image)
	defer C.free(cimg)
	log := (*C.char)(C.malloc(jitLogBytes))
	defer C.free(unsafe.Pointer(log))
	var raw C.CUmodule
	if r := C.gc_module_load(d.drv.api, c.raw, cimg, &raw, log, jitLogBytes); r != 0 {
		err := d.drv.check(r, "cuModuleLoadData")
		if s := C.GoString(log); s != "" {
			err = cu.Errorf(cu.Code(err), "cuModuleLoadData: %s", s)
		}
		return 0, err
	}
	m := backend.Module(d.newID())
	vars, known := modimage.Inspect(image)
	c.modules[m] = &module{raw: raw, funcs: map[C.CUfunction]backend.Function{}, vars: vars, known: known}
	return m, nil
}

func (d *Device) module(h backend.Ctx, mh backend.Module) (*cuCtx, *module, error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, nil, err
	}
	m, ok := c.modules[mh]
	if !ok {
		return nil, nil, cu.Errorf(cu.ErrorInvalidHandle, "module %#x does not exist in this context", uint64(mh))
	}
	return c, m, nil
}

func (d *Device) ModuleUnload(_ context.Context, h backend.Ctx, mh backend.Module) error {
	c, m, err := d.module(h, mh)
	if err != nil {
		return err
	}
	if err := d.drv.check(C.gc_module_unload(d.drv.api, c.raw, m.raw), "cuModuleUnload"); err != nil {
		return err
	}
	for _, fh := range m.funcs {
		delete(d.funcs, fh)
	}
	c.mem.dropModule(uint64(mh))
	delete(c.modules, mh)
	return nil
}

// ModuleGetFunction returns the same handle for the same kernel each time,
// with its parameter layout from cuFuncGetParamInfo.
func (d *Device) ModuleGetFunction(_ context.Context, h backend.Ctx, mh backend.Module, name string) (backend.Function, []backend.Param, error) {
	c, m, err := d.module(h, mh)
	if err != nil {
		return 0, nil, err
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var raw C.CUfunction
	if err := d.drv.check(C.gc_module_function(d.drv.api, c.raw, m.raw, cname, &raw), "cuModuleGetFunction"); err != nil {
		return 0, nil, err
	}
	if fh, ok := m.funcs[raw]; ok {
		return fh, d.funcs[fh].params, nil
	}
	params, err := d.paramLayout(c, raw)
	if err != nil {
		return 0, nil, err
	}
	fh := backend.Function(d.newID())
	f := &function{raw: raw, ctx: h, mod: mh, params: params}
	for _, p := range params {
		f.argBytes = max(f.argBytes, uint64(p.Offset)+uint64(p.Size))
	}
	d.funcs[fh] = f
	m.funcs[raw] = fh
	return fh, params, nil
}

// paramLayout walks cuFuncGetParamInfo until the driver reports that the
// index is past the last parameter.
func (d *Device) paramLayout(c *cuCtx, f C.CUfunction) ([]backend.Param, error) {
	var out []backend.Param
	for i := 0; i < maxParams; i++ {
		var off, size C.size_t
		r := C.gc_func_param_info(d.drv.api, c.raw, f, C.size_t(i), &off, &size)
		switch cu.Result(r) {
		case cu.Success:
			out = append(out, backend.Param{Offset: uint32(off), Size: uint32(size)})
			continue
		case cu.ErrorInvalidValue:
			return out, nil
		case cu.ErrorNotSupported:
			return nil, cu.Errorf(cu.ErrorNotSupported, "the driver lacks cuFuncGetParamInfo (CUDA 12.4): install NVIDIA driver >= 570")
		}
		return nil, d.drv.check(r, "cuFuncGetParamInfo")
	}
	return nil, cu.Errorf(cu.ErrorInvalidImage, "kernel reports more than %d parameters", maxParams)
}

func (d *Device) ModuleGetGlobal(_ context.Context, h backend.Ctx, mh backend.Module, name string) (backend.DevPtr, uint64, error) {
	c, m, err := d.module(h, mh)
	if err != nil {
		return 0, 0, err
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p C.CUdeviceptr
	var n C.size_t
	if err := d.drv.check(C.gc_module_global(d.drv.api, c.raw, m.raw, cname, &p, &n), "cuModuleGetGlobal"); err != nil {
		return 0, 0, err
	}
	c.mem.add(span{base: uint64(p), size: uint64(n), module: uint64(mh)})
	return backend.DevPtr(p), uint64(n), nil
}

func (d *Device) function(h backend.Ctx, fh backend.Function) (*cuCtx, *function, error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, nil, err
	}
	f, ok := d.funcs[fh]
	if !ok || f.ctx != h {
		return nil, nil, cu.Errorf(cu.ErrorInvalidHandle, "function %#x does not exist in this context", uint64(fh))
	}
	return c, f, nil
}

func (d *Device) FuncGetAttribute(_ context.Context, h backend.Ctx, fh backend.Function, attr int32) (int32, error) {
	c, f, err := d.function(h, fh)
	if err != nil {
		return 0, err
	}
	var v C.int
	if err := d.drv.check(C.gc_func_get_attribute(d.drv.api, c.raw, f.raw, C.int(attr), &v), "cuFuncGetAttribute"); err != nil {
		return 0, err
	}
	return int32(v), nil
}

func (d *Device) FuncSetAttribute(_ context.Context, h backend.Ctx, fh backend.Function, attr int32, value int32) error {
	c, f, err := d.function(h, fh)
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_func_set_attribute(d.drv.api, c.raw, f.raw, C.int(attr), C.int(value)), "cuFuncSetAttribute")
}

// Launch hands the client's packed parameter buffer to the driver as is.
// A buffer shorter than the kernel's layout would let the kernel read
// past it, so it is refused here.
func (d *Device) Launch(_ context.Context, h backend.Ctx, fh backend.Function, cfg backend.LaunchConfig) error {
	c, f, err := d.function(h, fh)
	if err != nil {
		return err
	}
	raw, err := d.stream(c, cfg.Stream)
	if err != nil {
		return err
	}
	if uint64(len(cfg.Params)) < f.argBytes {
		return cu.Errorf(cu.ErrorInvalidValue, "kernel parameters are %d bytes but the kernel reads %d", len(cfg.Params), f.argBytes)
	}
	// The driver is told the kernel's own size: trailing bytes a client
	// added for alignment are not the kernel's business.
	var params unsafe.Pointer
	if f.argBytes > 0 {
		params = unsafe.Pointer(&cfg.Params[0])
	}
	grid := [3]C.uint{C.uint(cfg.Grid[0]), C.uint(cfg.Grid[1]), C.uint(cfg.Grid[2])}
	block := [3]C.uint{C.uint(cfg.Block[0]), C.uint(cfg.Block[1]), C.uint(cfg.Block[2])}
	if cfg.Clustered() || cfg.Cooperative {
		cluster := [3]C.uint{C.uint(max(cfg.Cluster[0], 1)), C.uint(max(cfg.Cluster[1], 1)), C.uint(max(cfg.Cluster[2], 1))}
		coop := C.int(0)
		if cfg.Cooperative {
			coop = 1
		}
		r := C.gc_launch_ex(d.drv.api, c.raw, f.raw, &grid[0], &block[0], C.uint(cfg.SharedBytes), raw, params, C.size_t(f.argBytes),
			&cluster[0], coop)
		return d.drv.check(r, "cuLaunchKernelEx")
	}
	r := C.gc_launch(d.drv.api, c.raw, f.raw, &grid[0], &block[0], C.uint(cfg.SharedBytes), raw, params, C.size_t(f.argBytes))
	return d.drv.check(r, "cuLaunchKernel")
}
