// Package emulated is a device backend that needs no GPU: device memory
// lives in host memory (anonymous mappings, one per allocation) and kernels
// run on the PTX interpreter of package ptx.
//
// Work is executed in the order the worker submits it, to completion, before
// the call returns; streams and events therefore complete immediately, which
// honours CUDA's ordering rules trivially. Errors raised by a kernel are not
// returned by Launch: they are kept on the context and reported by the next
// call on it, as CUDA reports asynchronous failures.
//
// A Device is used by one goroutine at a time (the worker's call thread);
// only the memory lookups a running kernel makes (Span), the statistics
// accessors and the reads of a parked memory's snapshot (park.go) are safe
// for concurrent use.
package emulated

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Name is what cuDeviceGetName reports.
const Name = "gpuctl emulated device"

// DriverVersion is the CUDA version the emulated driver reports (13.0),
// matching the header the interposer ships.
const DriverVersion = 13000

// DefaultMemBytes is the device size when Config.MemBytes is zero.
const DefaultMemBytes = 16 << 30

// Config describes one emulated device.
type Config struct {
	// MemBytes is the device memory size reported and enforced; zero means
	// DefaultMemBytes.
	MemBytes uint64
	// Cores is the multiprocessor count and the number of goroutines a
	// launch uses; zero means runtime.NumCPU().
	Cores int
	// Seed makes the device UUID stable: the same seed and ordinal always
	// give the same UUID. gpud passes its host name.
	Seed string
	// Ordinal is the host-side index of this device, used in its UUID.
	Ordinal int
	// Log receives diagnostics (kernel failures); nil discards them.
	Log *slog.Logger
}

// Device is an emulated GPU. It implements backend.Device and
// backend.Suspender.
type Device struct {
	cfg   Config
	uuid  [16]byte
	mem   *arena
	ids   uint64 // last handle issued; handles of all kinds share one space
	start time.Time

	primary   *context_ // nil while the primary context is inactive
	pflags    uint32    // primary context flags, kept across activations
	prefs     int       // primary context retain count
	ctxs      map[backend.Ctx]*context_
	streams   map[backend.Stream]*stream
	events    map[backend.Event]*event
	modules   map[backend.Module]*module
	funcs     map[backend.Function]*function
	suspended bool

	// The layout of the memory Park handed out, until Unpark takes it
	// back, and the snapshot an Unpark kept (park.go). snap is atomic
	// because the snapshot's ReleaseMem may run on any goroutine.
	parked *parking
	snap   atomic.Pointer[snapshot]
	// reuse is the memfd the last Unpark mapped back, which the next
	// Park brings up to date instead of copying everything (park.go).
	reuse *parkReuse
	// LastPark says what the last Park copied.
	LastPark ParkStats

	// Memory pools (pools.go), virtual memory (vmm.go) and the queues of
	// streams blocked on a stream wait (memops.go).
	pools       map[backend.MemPool]*mempool
	poolDefault backend.MemPool
	poolCurrent backend.MemPool // 0: the default pool
	poolOf      map[uint64]*mempool
	resvs       map[uint64]*reservation
	phys        map[backend.MemHandle]*physical
	blocked     map[*blockQ]*context_
	log         *slog.Logger
}

var (
	_ backend.Device    = (*Device)(nil)
	_ backend.Suspender = (*Device)(nil)
)

// New returns an emulated device.
func New(cfg Config) *Device {
	if cfg.MemBytes == 0 {
		cfg.MemBytes = DefaultMemBytes
	}
	if cfg.Cores <= 0 {
		cfg.Cores = runtime.NumCPU()
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "gpuctl-emulated/%s/%d", cfg.Seed, cfg.Ordinal))
	var id [16]byte
	copy(id[:], sum[:16])
	id[6] = id[6]&0x0f | 0x50 // RFC 9562 version 5 layout: name-based
	id[8] = id[8]&0x3f | 0x80
	return &Device{
		cfg:     cfg,
		uuid:    id,
		mem:     newArena(cfg.MemBytes),
		start:   time.Now(),
		ctxs:    map[backend.Ctx]*context_{},
		streams: map[backend.Stream]*stream{},
		events:  map[backend.Event]*event{},
		modules: map[backend.Module]*module{},
		funcs:   map[backend.Function]*function{},
		log:     log,
		pools:   map[backend.MemPool]*mempool{},
		poolOf:  map[uint64]*mempool{},
		resvs:   map[uint64]*reservation{},
		phys:    map[backend.MemHandle]*physical{},
		blocked: map[*blockQ]*context_{},
	}
}

// MemInUse is the number of bytes of device memory currently allocated.
// Safe for concurrent use.
func (d *Device) MemInUse() uint64 { return d.mem.inUse() }

// UUIDString formats the device UUID the way nvidia-smi does.
func (d *Device) UUIDString() string { return FormatUUID(d.uuid) }

// FormatUUID formats a device UUID as "GPU-xxxxxxxx-xxxx-...".
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// GPU describes the device for listings and manifests.
func (d *Device) GPU() backend.GPU {
	return backend.GPU{Index: d.cfg.Ordinal, Name: Name, UUID: d.UUIDString(), MemoryBytes: d.cfg.MemBytes, PCIBusID: pciBusID}
}

func (d *Device) newID() uint64 {
	d.ids++
	// Handles look like pointers and never collide with small integers an
	// application might pass by mistake.
	return 0x5000_0000 + d.ids*16
}

const pciBusID = "0000:00:00.0"

func (d *Device) checkDev(dev int32) error {
	if dev != 0 {
		return cu.Errorf(cu.ErrorInvalidDevice, "device %d: the emulated host exposes one device, ordinal 0", dev)
	}
	return nil
}

func (d *Device) DriverVersion(context.Context) (int32, error) { return DriverVersion, nil }
func (d *Device) DeviceCount(context.Context) (int32, error)   { return 1, nil }

func (d *Device) DeviceName(_ context.Context, dev int32) (string, error) {
	if err := d.checkDev(dev); err != nil {
		return "", err
	}
	return Name, nil
}

func (d *Device) DeviceUUID(_ context.Context, dev int32) ([16]byte, error) {
	if err := d.checkDev(dev); err != nil {
		return [16]byte{}, err
	}
	return d.uuid, nil
}

func (d *Device) DeviceTotalMem(_ context.Context, dev int32) (uint64, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	return d.cfg.MemBytes, nil
}

func (d *Device) DeviceAttribute(_ context.Context, attr int32, dev int32) (int32, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	return d.attribute(attr)
}

func (d *Device) DevicePCIBusID(_ context.Context, dev int32) (string, error) {
	if err := d.checkDev(dev); err != nil {
		return "", err
	}
	return pciBusID, nil
}

// Close frees every allocation and forgets every handle.
func (d *Device) Close() error {
	for h := range d.ctxs {
		d.destroyCtx(d.ctxs[h])
	}
	d.primary, d.prefs = nil, 0
	d.closeVMM()
	d.mem.freeAll()
	d.pools, d.poolOf, d.poolDefault, d.poolCurrent = map[backend.MemPool]*mempool{}, map[uint64]*mempool{}, 0, 0
	d.blocked = map[*blockQ]*context_{}
	d.parked = nil
	d.dropReuse()
	if s := d.snap.Load(); s != nil {
		_ = s.ReleaseMem(context.Background())
	}
	return nil
}

// Suspend leaves the device idle for a process dump. Work has always
// completed by the time a call returns, so there is nothing to drain; the
// flag only guards against calls arriving between Suspend and Resume.
func (d *Device) Suspend(context.Context) error {
	d.suspended = true
	return nil
}

// Resume undoes Suspend.
func (d *Device) Resume(context.Context) error {
	d.suspended = false
	return nil
}
