package cuda

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// Discover lists the host's GPUs through NVML (libnvidia-ml.so.1): model,
// UUID, memory and PCI bus ID of each, and the driver version. It needs no
// CUDA context and does not disturb running sessions. GPU.Index is NVML's
// index (PCI order); sessions name their GPU by UUID, which is the same
// in every numbering.
func Discover() (backend.HostInfo, error) {
	lib, err := openNVML()
	if err != nil {
		return backend.HostInfo{}, err
	}
	defer lib.Shutdown()
	info := backend.HostInfo{Backend: "cuda"}
	v, r := lib.SystemGetDriverVersion()
	if r != nvml.SUCCESS {
		return info, nvmlErr(lib, r, "reading the driver version")
	}
	info.DriverVersion = v
	n, r := lib.DeviceGetCount()
	if r != nvml.SUCCESS {
		return info, nvmlErr(lib, r, "counting GPUs")
	}
	for i := 0; i < n; i++ {
		dev, r := lib.DeviceGetHandleByIndex(i)
		if r != nvml.SUCCESS {
			return info, nvmlErr(lib, r, fmt.Sprintf("opening GPU %d", i))
		}
		g := backend.GPU{Index: i}
		if g.Name, r = dev.GetName(); r != nvml.SUCCESS {
			return info, nvmlErr(lib, r, fmt.Sprintf("reading GPU %d's name", i))
		}
		if g.UUID, r = dev.GetUUID(); r != nvml.SUCCESS {
			return info, nvmlErr(lib, r, fmt.Sprintf("reading GPU %d's UUID", i))
		}
		mem, r := dev.GetMemoryInfo()
		if r != nvml.SUCCESS {
			return info, nvmlErr(lib, r, fmt.Sprintf("reading GPU %d's memory size", i))
		}
		g.MemoryBytes = mem.Total
		if pci, r := dev.GetPciInfo(); r == nvml.SUCCESS {
			g.PCIBusID = busID(pci.BusId)
		}
		info.GPUs = append(info.GPUs, g)
	}
	return info, nil
}

// openNVML starts NVML from the loader's search path or, failing that,
// the usual directories of NVIDIA's libraries.
func openNVML() (nvml.Interface, error) {
	var first error
	for i, p := range candidates("libnvidia-ml.so.1") {
		var lib nvml.Interface
		if i == 0 {
			lib = nvml.New()
		} else {
			lib = nvml.New(nvml.WithLibraryPath(p))
		}
		r := lib.Init()
		if r == nvml.SUCCESS {
			return lib, nil
		}
		if first == nil {
			first = errs.New(errs.Unavailable, "", "NVML did not start (%s): install NVIDIA driver >= 570, or use the emulated backend", nvmlError(lib, r))
		}
	}
	return nil, first
}

// busID turns NVML's C string into the form CUDA prints
// ("00000000:19:00.0" becomes "0000:19:00.0").
func busID(b [32]int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	id := strings.ToLower(s.String())
	if len(id) == len("00000000:00:00.0") && strings.HasPrefix(id, "0000") {
		id = id[4:]
	}
	return id
}

func nvmlError(lib nvml.Interface, r nvml.Return) string {
	if r == nvml.ERROR_LIBRARY_NOT_FOUND {
		return "libnvidia-ml.so.1 not found"
	}
	return lib.ErrorString(r)
}

func nvmlErr(lib nvml.Interface, r nvml.Return, what string) error {
	return errs.New(errs.Unavailable, "", "NVML: %s: %s", what, nvmlError(lib, r))
}
