package cuda

// #include "api.h"
import "C"

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Options configures a Device.
type Options struct {
	// Library is the driver library to load: a soname or a path. Empty
	// means DefaultLibrary through the loader's search path.
	Library string
	// Device names the one GPU this session may use: its UUID
	// ("GPU-xxxxxxxx-..."), or its ordinal ("1") in PCI bus order, the
	// order of nvidia-smi and NVML. Empty means ordinal 0. gpud assigns it.
	Device string
	// Log receives diagnostics; nil discards them.
	Log *slog.Logger
	// PlainMemory serves cuMemAlloc from the driver's allocator instead
	// of chunks the worker maps itself (vmm.go): the driver's checkpoint
	// then copies all device memory, and the worker saves none itself.
	PlainMemory bool
}

// Device drives one real GPU through the driver. It implements
// backend.Device and backend.Suspender.
//
// The worker process enumerates every GPU of the host (it must, so that a
// restore can pass the driver a full permutation of GPU UUIDs), but the
// client is shown only the session's GPU, as device 0.
type Device struct {
	drv        *driver
	log        *slog.Logger
	dev        C.CUdevice // the session's GPU in this process's numbering
	ordinal    int
	uuid       [16]byte
	enumerated []string

	ids         uint64 // last handle issued; handles of all kinds share one space
	ctxs        map[backend.Ctx]*cuCtx
	primary     backend.Ctx // 0 while the client holds no primary context
	primaryRefs int
	funcs       map[backend.Function]*function
	ext         *extState // pools and virtual memory; nil until first used
	vmm         *vmmState // chunks for cuMemAlloc; nil with Options.PlainMemory
	closed      bool
}

var (
	_ backend.Device    = (*Device)(nil)
	_ backend.Suspender = (*Device)(nil)
)

// Available reports whether the NVIDIA driver loads from the default
// location, initialises, and shows at least one GPU. gpud's
// `--backend auto` uses it.
func Available() bool {
	drv, err := loadDriver("")
	if err != nil {
		return false
	}
	n, err := drv.deviceCount()
	return err == nil && n > 0
}

// New loads the driver and selects the session's GPU.
func New(opts Options) (*Device, error) {
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// CUDA numbers GPUs fastest first unless told otherwise; NVML, nvidia-smi
	// and gpud's listings number them in PCI order. The worker is a process
	// of its own, so it adopts PCI order before the driver starts and an
	// ordinal means the same GPU everywhere.
	if _, set := os.LookupEnv("CUDA_DEVICE_ORDER"); !set {
		os.Setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
	}
	drv, err := loadDriver(opts.Library)
	if err != nil {
		return nil, err
	}
	enumerated, err := drv.enumerate()
	if err != nil {
		return nil, errs.Wrap(err, errs.Unavailable, "", "listing GPUs")
	}
	if len(enumerated) == 0 {
		return nil, errs.New(errs.Unavailable, "", "the NVIDIA driver shows no GPU to this process: check CUDA_VISIBLE_DEVICES and nvidia-smi")
	}
	ordinal, err := pickDevice(opts.Device, enumerated)
	if err != nil {
		return nil, err
	}
	dev, err := drv.device(ordinal)
	if err != nil {
		return nil, err
	}
	u, err := drv.uuid(dev)
	if err != nil {
		return nil, err
	}
	log.Debug("cuda device selected", "ordinal", ordinal, "uuid", FormatUUID(u), "gpus", len(enumerated))
	var vmm *vmmState
	if !opts.PlainMemory {
		vmm = &vmmState{chunks: map[uint64]*vmmChunk{}}
	}
	return &Device{
		vmm:        vmm,
		drv:        drv,
		log:        log,
		dev:        dev,
		ordinal:    ordinal,
		uuid:       u,
		enumerated: enumerated,
		ctxs:       map[backend.Ctx]*cuCtx{},
		funcs:      map[backend.Function]*function{},
	}, nil
}

// pickDevice resolves Options.Device against the UUIDs this process
// enumerated, in ordinal order.
func pickDevice(want string, enumerated []string) (int, error) {
	if want == "" {
		return 0, nil
	}
	if n, err := strconv.Atoi(want); err == nil {
		if n < 0 || n >= len(enumerated) {
			return 0, errs.New(errs.InvalidArgument, "", "GPU %d does not exist: this host has %d GPUs (0..%d)", n, len(enumerated), len(enumerated)-1)
		}
		return n, nil
	}
	for i, u := range enumerated {
		if strings.EqualFold(u, want) {
			return i, nil
		}
	}
	return 0, errs.New(errs.NotFound, "", "GPU %s is not on this host (it has %s)", want, strings.Join(enumerated, ", "))
}

// GPU describes the session's GPU for manifests and listings.
func (d *Device) GPU() backend.GPU {
	g := backend.GPU{Index: d.ordinal, UUID: FormatUUID(d.uuid)}
	g.Name, _ = d.drv.name(d.dev)
	g.MemoryBytes, _ = d.drv.totalMem(d.dev)
	g.PCIBusID, _ = d.drv.pciBusID(d.dev)
	return g
}

// Enumerated returns the UUIDs of every GPU this worker process sees, in
// CUDA ordinal order. A checkpoint records them: a restore elsewhere must
// map every one of them (see PlanRemap).
func (d *Device) Enumerated() []string { return append([]string(nil), d.enumerated...) }

func (d *Device) newID() uint64 {
	d.ids++
	// Handles are never small integers, so that a client passing an
	// ordinal or a count by mistake gets CUDA_ERROR_INVALID_HANDLE.
	return 0x7000_0000 + d.ids*16
}

func (d *Device) checkDev(dev int32) error {
	if dev != 0 {
		return cu.Errorf(cu.ErrorInvalidDevice, "device %d: this session is given one GPU, device 0", dev)
	}
	return nil
}

func (d *Device) DriverVersion(context.Context) (int32, error) { return d.drv.version() }
func (d *Device) DeviceCount(context.Context) (int32, error)   { return 1, nil }

func (d *Device) DeviceName(_ context.Context, dev int32) (string, error) {
	if err := d.checkDev(dev); err != nil {
		return "", err
	}
	return d.drv.name(d.dev)
}

func (d *Device) DeviceUUID(_ context.Context, dev int32) ([16]byte, error) {
	if err := d.checkDev(dev); err != nil {
		return [16]byte{}, err
	}
	return d.drv.uuid(d.dev)
}

func (d *Device) DeviceTotalMem(_ context.Context, dev int32) (uint64, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	return d.drv.totalMem(d.dev)
}

func (d *Device) DeviceAttribute(_ context.Context, attr int32, dev int32) (int32, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	var v C.int
	if err := d.drv.check(C.gc_device_attribute(d.drv.api, d.dev, C.int(attr), &v), "cuDeviceGetAttribute"); err != nil {
		return 0, err
	}
	return int32(v), nil
}

// DevicePCIBusID reports what the driver says. After a restore that moved
// the session to another GPU the driver still reports the old bus ID.
func (d *Device) DevicePCIBusID(_ context.Context, dev int32) (string, error) {
	if err := d.checkDev(dev); err != nil {
		return "", err
	}
	return d.drv.pciBusID(d.dev)
}

// Close destroys every context the client left behind, which frees their
// memory, modules, streams and events, and drops the client's references
// to the primary context. It is safe to call twice.
func (d *Device) Close() error {
	if d.closed {
		return nil
	}
	d.closed = true
	var first error
	for h, c := range d.ctxs {
		if c.primary {
			continue
		}
		if err := d.destroyCtx(h, c); err != nil && first == nil {
			first = err
		}
	}
	if d.primary != 0 {
		c := d.ctxs[d.primary]
		d.dropCtx(d.primary, c)
		for ; d.primaryRefs > 0; d.primaryRefs-- {
			if err := d.drv.check(C.gc_primary_release(d.drv.api, d.dev), "cuDevicePrimaryCtxRelease"); err != nil && first == nil {
				first = err
			}
		}
		d.primary = 0
	}
	return first
}

// Suspend drains all device work so that the driver's checkpoint, which
// gpud starts from outside this process, finds the GPU idle. A context
// that a failed kernel has poisoned is drained too (its work is over); the
// client learns of the failure from its next call, as it would have.
func (d *Device) Suspend(context.Context) error {
	for h, c := range d.ctxs {
		if err := d.drv.check(C.gc_ctx_synchronize(d.drv.api, c.raw), "cuCtxSynchronize"); err != nil {
			d.log.Warn("context reports an earlier failure while draining for a checkpoint", "ctx", uint64(h), "err", err)
		}
	}
	return nil
}

// Resume has nothing to undo: the driver restores contexts in place, and
// every call names its context, so the thread's current context is set
// again on first use.
func (d *Device) Resume(context.Context) error { return nil }
