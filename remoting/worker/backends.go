package worker

import (
	"fmt"
	"log/slog"
	"strconv"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
)

// Backend names.
const (
	BackendAuto     = "auto"
	BackendEmulated = "emulated"
	BackendCUDA     = "cuda"
)

// driver is one way of making a backend.Device. Adding a backend is one
// entry in drivers.
type driver struct {
	// available reports whether `auto` may pick it.
	available func() bool
	// open makes the session's device; it runs on the worker's call thread.
	open func(o Options, log *slog.Logger) (backend.Device, error)
	// host describes the host's devices for GET /v1/host.
	host func(o Options) (backend.HostInfo, error)
}

// drivers lists the backends in the order `auto` tries them.
func drivers() []struct {
	name string
	d    driver
} {
	return []struct {
		name string
		d    driver
	}{
		{BackendCUDA, cudaDriver},
		{BackendEmulated, driver{available: func() bool { return true }, open: openEmulated, host: emulatedHost}},
	}
}

func lookup(name string) (driver, bool) {
	for _, e := range drivers() {
		if e.name == name && e.d.open != nil {
			return e.d, true
		}
	}
	return driver{}, false
}

// Resolve turns a --backend value into a concrete backend name: auto picks
// cuda when a usable GPU and driver are present, else emulated.
func Resolve(name string) (string, error) {
	if name == BackendAuto || name == "" {
		for _, e := range drivers() {
			if e.d.open != nil && e.d.available() {
				return e.name, nil
			}
		}
		return BackendEmulated, nil
	}
	d, ok := lookup(name)
	if !ok {
		return "", errs.New(errs.InvalidArgument, "", "unknown backend %q: use auto, emulated or cuda", name)
	}
	if !d.available() {
		return "", errs.New(errs.Unavailable, "", "backend %q is not usable on this host (no NVIDIA driver or GPU); use --backend emulated", name)
	}
	return name, nil
}

// HostInfo describes the host's devices under a resolved backend.
func HostInfo(name string, o Options) (backend.HostInfo, error) {
	d, ok := lookup(name)
	if !ok {
		return backend.HostInfo{}, errs.New(errs.InvalidArgument, "", "unknown backend %q", name)
	}
	return d.host(o)
}

func open(o Options, log *slog.Logger) (backend.Device, error) {
	d, ok := lookup(o.Backend)
	if !ok {
		return nil, fmt.Errorf("unknown backend %q", o.Backend)
	}
	return d.open(o, log)
}

func emulatedConfig(o Options, log *slog.Logger) (emulated.Config, error) {
	ord := 0
	if o.Device != "" {
		var err error
		if ord, err = strconv.Atoi(o.Device); err != nil || ord < 0 {
			return emulated.Config{}, fmt.Errorf("emulated device %q: want an ordinal", o.Device)
		}
	}
	return emulated.Config{MemBytes: o.EmulatedMemBytes, Seed: o.Seed, Ordinal: ord, Log: log}, nil
}

func openEmulated(o Options, log *slog.Logger) (backend.Device, error) {
	cfg, err := emulatedConfig(o, log)
	if err != nil {
		return nil, err
	}
	return emulated.New(cfg), nil
}

func emulatedHost(o Options) (backend.HostInfo, error) {
	cfg, err := emulatedConfig(o, nil)
	if err != nil {
		return backend.HostInfo{}, err
	}
	return backend.HostInfo{
		Backend:       BackendEmulated,
		DriverVersion: "13.0 (emulated)",
		GPUs:          []backend.GPU{emulated.New(cfg).GPU()},
	}, nil
}
