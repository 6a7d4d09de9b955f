package cuda

// #cgo LDFLAGS: -ldl
// #include <stdlib.h>
// #include "api.h"
import "C"

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// DefaultLibrary is the driver library's soname, found through the
// dynamic loader's search path.
const DefaultLibrary = "libcuda.so.1"

// driver is a loaded libcuda.so.1. It is never unloaded: the driver keeps
// threads and mappings that outlive any one user.
type driver struct {
	api  *C.gc_api
	path string
	// sticky is the first error that leaves a context unusable (a kernel
	// fault) any call reported; see stickyCodes.
	sticky atomic.Pointer[cu.Error]
}

// stickyCodes are the results after which the driver answers every call
// with the same error, for the rest of the process.
var stickyCodes = map[cu.Result]bool{
	cu.ErrorIllegalAddress: true, cu.ErrorLaunchTimeout: true, cu.ErrorHardwareStackError: true,
	cu.ErrorIllegalInstruction: true, cu.ErrorMisalignedAddress: true, cu.ErrorInvalidAddressSpace: true,
	cu.ErrorInvalidPC: true, cu.ErrorLaunchFailed: true, cu.ErrorAssert: true,
}

// libDirs are where NVIDIA's libraries live when the loader's search path
// does not name them: container-style hosts keep them in
// /usr/local/nvidia/lib64 and reach them only through LD_LIBRARY_PATH,
// which a daemon's environment may lack.
func libDirs() []string {
	return []string{"/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"}
}

// candidates lists the files to try for a library: the name through the
// loader's search path first, then the usual directories.
func candidates(name string) []string {
	out := []string{name}
	for _, d := range libDirs() {
		out = append(out, d+"/"+name)
	}
	return out
}

// loadDriver opens the driver library and runs cuInit. An empty path
// tries DefaultLibrary through the loader's search path, then the usual
// directories; the first error is the one reported.
func loadDriver(path string) (*driver, error) {
	if path != "" {
		return openDriver(path)
	}
	var first error
	for _, p := range candidates(DefaultLibrary) {
		d, err := openDriver(p)
		if err == nil {
			return d, nil
		}
		if first == nil {
			first = err
		}
	}
	return nil, first
}

// openDriver opens the driver library at path (a soname or a file) and
// runs cuInit. It refuses gpuctl's own client library, which a stray
// LD_LIBRARY_PATH could otherwise put in the driver's place.
func openDriver(path string) (*driver, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	var msg [512]C.char
	api := C.gc_load(cpath, &msg[0], C.size_t(len(msg)))
	if api == nil {
		return nil, errs.New(errs.Unavailable, "", "NVIDIA driver library %s did not load (%s): install NVIDIA driver >= 570 or run gpud with --backend emulated",
			path, C.GoString(&msg[0]))
	}
	d := &driver{api: api, path: path}
	if C.gc_is_interposer(api) != 0 {
		return nil, errs.New(errs.FailedPrecondition, "", "%s is gpuctl's client library, not NVIDIA's driver: remove gpuctl's lib directory from LD_LIBRARY_PATH for gpud", path)
	}
	if err := d.check(C.gc_init(api), "cuInit"); err != nil {
		return nil, errs.Wrap(err, errs.Unavailable, "", "NVIDIA driver did not initialise")
	}
	return d, nil
}

// check turns a CUresult into nil or a *cu.Error naming the call. Hot
// paths that expect CUDA_ERROR_NOT_READY compare the result first.
func (d *driver) check(r C.CUresult, call string) error {
	if r == 0 {
		return nil
	}
	code := cu.Result(r)
	e := &cu.Error{Code: code, Detail: call}
	if s := C.GoString(C.gc_error_string(d.api, r)); s != "" {
		e.Detail = call + ": " + s
	}
	if stickyCodes[code] {
		d.sticky.CompareAndSwap(nil, e)
	}
	return e
}

// version returns cuDriverGetVersion's value, e.g. 13000 for CUDA 13.0.
func (d *driver) version() (int32, error) {
	var v C.int
	if err := d.check(C.gc_driver_version(d.api, &v), "cuDriverGetVersion"); err != nil {
		return 0, err
	}
	return int32(v), nil
}

// deviceCount returns how many GPUs this process enumerated.
func (d *driver) deviceCount() (int, error) {
	var n C.int
	if err := d.check(C.gc_device_count(d.api, &n), "cuDeviceGetCount"); err != nil {
		return 0, err
	}
	return int(n), nil
}

func (d *driver) device(ordinal int) (C.CUdevice, error) {
	var dev C.CUdevice
	if err := d.check(C.gc_device_get(d.api, C.int(ordinal), &dev), "cuDeviceGet"); err != nil {
		return 0, err
	}
	return dev, nil
}

func (d *driver) uuid(dev C.CUdevice) ([16]byte, error) {
	var u C.CUuuid
	var out [16]byte
	if err := d.check(C.gc_device_uuid(d.api, dev, &u), "cuDeviceGetUuid"); err != nil {
		return out, err
	}
	for i := range out {
		out[i] = byte(u.bytes[i])
	}
	return out, nil
}

func (d *driver) name(dev C.CUdevice) (string, error) {
	var buf [256]C.char
	if err := d.check(C.gc_device_name(d.api, dev, &buf[0], C.int(len(buf))), "cuDeviceGetName"); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

func (d *driver) totalMem(dev C.CUdevice) (uint64, error) {
	var n C.size_t
	if err := d.check(C.gc_device_total_mem(d.api, dev, &n), "cuDeviceTotalMem"); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

func (d *driver) pciBusID(dev C.CUdevice) (string, error) {
	var buf [64]C.char
	if err := d.check(C.gc_device_pci_bus_id(d.api, dev, &buf[0], C.int(len(buf))), "cuDeviceGetPCIBusId"); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// enumerate returns the UUID of every GPU this process sees, by ordinal.
func (d *driver) enumerate() ([]string, error) {
	n, err := d.deviceCount()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		dev, err := d.device(i)
		if err != nil {
			return nil, err
		}
		u, err := d.uuid(dev)
		if err != nil {
			return nil, err
		}
		out = append(out, FormatUUID(u))
	}
	return out, nil
}

// FormatUUID writes a GPU UUID the way nvidia-smi and NVML do:
// GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// ParseUUID reads a GPU UUID in FormatUUID's form; the "GPU-" prefix is
// optional and case does not matter.
func ParseUUID(s string) ([16]byte, error) {
	var u [16]byte
	t := s
	if len(t) >= 4 && (t[:4] == "GPU-" || t[:4] == "gpu-") {
		t = t[4:]
	}
	hex := make([]byte, 0, 32)
	for i := 0; i < len(t); i++ {
		c := t[i]
		if c == '-' {
			continue
		}
		hex = append(hex, c)
	}
	if len(hex) != 32 || (len(hex) != len(t) && !validGroups(t)) {
		return u, errs.New(errs.InvalidArgument, "", "GPU UUID %q is not of the form GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", s)
	}
	for i := range u {
		hi, ok1 := unhex(hex[2*i])
		lo, ok2 := unhex(hex[2*i+1])
		if !ok1 || !ok2 {
			return u, errs.New(errs.InvalidArgument, "", "GPU UUID %q has a character that is not hexadecimal", s)
		}
		u[i] = hi<<4 | lo
	}
	return u, nil
}

// validGroups checks the 8-4-4-4-12 grouping when dashes are present.
func validGroups(t string) bool {
	groups := []int{8, 4, 4, 4, 12}
	n, g := 0, 0
	for i := 0; i <= len(t); i++ {
		if i == len(t) || t[i] == '-' {
			if g >= len(groups) || n != groups[g] {
				return false
			}
			g++
			n = 0
			continue
		}
		n++
	}
	return g == len(groups)
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
