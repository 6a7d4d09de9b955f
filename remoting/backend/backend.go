// Package backend defines what a session worker needs from a GPU: the
// Device interface. Two implementations exist: remoting/backend/cuda drives
// the real driver, and remoting/backend/emulated keeps device memory in host
// memory and runs PTX on an interpreter.
//
// Every method returns an error that carries a CUDA result (see package cu);
// the worker's dispatch puts that result on the wire unchanged. Handles are
// opaque 64-bit values chosen by the backend. A backend must reject a handle
// it did not issue with cu.ErrorInvalidHandle rather than crash, because the
// handle came from an untrusted client.
//
// A Device is used by one goroutine at a time: the worker executes a
// session's calls strictly in order on one locked OS thread. Stream ordering
// therefore comes for free; a backend may still run work asynchronously as
// long as it honours the stream and event semantics it reports.
package backend

import (
	"context"
	"io"

	"github.com/gpuctl/gpuctl/api"
)

// Handle types. They are distinct so that the generated dispatch cannot
// pass a stream where a module belongs.
type (
	Ctx      uint64
	Module   uint64
	Function uint64
	Stream   uint64 // 0 is the context's default (legacy NULL) stream
	Event    uint64
	DevPtr   uint64
)

// Device is the whole surface a worker drives. It is composed of role
// interfaces so that a consumer can ask for only the part it uses.
type Device interface {
	Info
	Contexts
	Memory
	Modules
	Launcher
	Streams
	Events
	Extended
	// Close releases everything the device holds. The worker calls it when
	// its session ends.
	Close() error
}

// Info answers the device-discovery calls. Values must be truthful for the
// device that executes the kernels: programs size their launches from them.
type Info interface {
	DriverVersion(ctx context.Context) (int32, error)
	DeviceCount(ctx context.Context) (int32, error)
	DeviceName(ctx context.Context, dev int32) (string, error)
	DeviceUUID(ctx context.Context, dev int32) ([16]byte, error)
	DeviceTotalMem(ctx context.Context, dev int32) (uint64, error)
	// DeviceAttribute takes a CUdevice_attribute value.
	DeviceAttribute(ctx context.Context, attr int32, dev int32) (int32, error)
	DevicePCIBusID(ctx context.Context, dev int32) (string, error)
}

// Contexts manages CUDA contexts. The client tracks which context is
// current on each of its threads and passes it explicitly with every call
// that needs one, so the backend never has a notion of "current".
type Contexts interface {
	PrimaryCtxRetain(ctx context.Context, dev int32) (Ctx, error)
	PrimaryCtxRelease(ctx context.Context, dev int32) error
	PrimaryCtxReset(ctx context.Context, dev int32) error
	// PrimaryCtxState returns the primary context's flags and whether it
	// is active (retained at least once).
	PrimaryCtxState(ctx context.Context, dev int32) (flags uint32, active bool, err error)
	PrimaryCtxSetFlags(ctx context.Context, dev int32, flags uint32) error
	CtxCreate(ctx context.Context, dev int32, flags uint32) (Ctx, error)
	CtxDestroy(ctx context.Context, c Ctx) error
	CtxDevice(ctx context.Context, c Ctx) (int32, error)
	// CtxSynchronize waits for all work in c; it reports a sticky error
	// from earlier asynchronous work (a failed launch) exactly as CUDA does.
	CtxSynchronize(ctx context.Context, c Ctx) error
}

// Memory manages device allocations and copies. Bulk data moves through
// io.Reader and io.Writer so that a backend can read a client's bytes
// straight off the socket into device memory (or a staging buffer) and
// write device memory straight onto the socket, with no intermediate copy.
type Memory interface {
	MemAlloc(ctx context.Context, c Ctx, size uint64) (DevPtr, error)
	MemFree(ctx context.Context, c Ctx, p DevPtr) error
	MemGetInfo(ctx context.Context, c Ctx) (free, total uint64, err error)
	MemGetAddressRange(ctx context.Context, c Ctx, p DevPtr) (base DevPtr, size uint64, err error)
	// MemcpyHtoD reads exactly n bytes from src into dst. It must consume
	// all n bytes from src even when it fails, so the stream stays framed.
	MemcpyHtoD(ctx context.Context, c Ctx, dst DevPtr, src io.Reader, n uint64, s Stream) error
	// MemcpyDtoH writes exactly n bytes of src to dst, or returns an error
	// before writing anything.
	MemcpyDtoH(ctx context.Context, c Ctx, dst io.Writer, src DevPtr, n uint64, s Stream) error
	MemcpyDtoD(ctx context.Context, c Ctx, dst, src DevPtr, n uint64, s Stream) error
	// Memset writes count elements of elemSize (1, 2 or 4) bytes holding
	// value's low bytes.
	Memset(ctx context.Context, c Ctx, dst DevPtr, value uint32, elemSize int, count uint64, s Stream) error
}

// Param is one kernel parameter's place in the flat parameter buffer, as
// the kernel's PTX declares it. The client uses these to pack kernelParams.
type Param struct {
	Offset uint32
	Size   uint32
}

// Modules loads code. image is whatever the application passed to
// cuModuleLoadData(Ex)/cuModuleLoadFatBinary or read from a file: PTX text,
// a cubin or a fatbin.
type Modules interface {
	ModuleLoad(ctx context.Context, c Ctx, image []byte) (Module, error)
	ModuleUnload(ctx context.Context, c Ctx, m Module) error
	ModuleGetFunction(ctx context.Context, c Ctx, m Module, name string) (Function, []Param, error)
	ModuleGetGlobal(ctx context.Context, c Ctx, m Module, name string) (DevPtr, uint64, error)
	// FuncGetAttribute takes a CUfunction_attribute value.
	FuncGetAttribute(ctx context.Context, c Ctx, f Function, attr int32) (int32, error)
	FuncSetAttribute(ctx context.Context, c Ctx, f Function, attr int32, value int32) error
}

// LaunchConfig is one kernel launch. Params is the flat parameter buffer,
// laid out per the function's []Param.
type LaunchConfig struct {
	Grid, Block [3]uint32
	SharedBytes uint32
	Stream      Stream
	Params      []byte
	// Cluster is the thread-block cluster shape (compute capability 9.0
	// and later); zero or 1×1×1 launches without clusters.
	Cluster [3]uint32
	// Cooperative launches the grid so that all its blocks are resident
	// at once (grid-wide synchronisation).
	Cooperative bool
}

// Clustered reports whether the launch asks for clusters of more than one
// block.
func (c LaunchConfig) Clustered() bool {
	return uint64(max(c.Cluster[0], 1))*uint64(max(c.Cluster[1], 1))*uint64(max(c.Cluster[2], 1)) > 1
}

// Launcher runs kernels. A launch is asynchronous in CUDA: an error in the
// kernel itself (an illegal address) is reported by the next synchronising
// call on that context, not by Launch, which fails only for bad arguments.
type Launcher interface {
	Launch(ctx context.Context, c Ctx, f Function, cfg LaunchConfig) error
}

// Streams manages streams. Query returns cu.ErrorNotReady while work is
// pending.
type Streams interface {
	StreamCreate(ctx context.Context, c Ctx, flags uint32, priority int32) (Stream, error)
	StreamDestroy(ctx context.Context, c Ctx, s Stream) error
	StreamQuery(ctx context.Context, c Ctx, s Stream) error
	StreamSynchronize(ctx context.Context, c Ctx, s Stream) error
	StreamWaitEvent(ctx context.Context, c Ctx, s Stream, e Event, flags uint32) error
}

// Events manages events. Query returns cu.ErrorNotReady while the
// recorded work is pending.
type Events interface {
	EventCreate(ctx context.Context, c Ctx, flags uint32) (Event, error)
	EventDestroy(ctx context.Context, c Ctx, e Event) error
	EventRecord(ctx context.Context, c Ctx, e Event, s Stream) error
	EventQuery(ctx context.Context, c Ctx, e Event) error
	EventSynchronize(ctx context.Context, c Ctx, e Event) error
	EventElapsedTime(ctx context.Context, c Ctx, start, end Event) (float32, error)
}

// Suspender is the part of a backend the checkpoint pipeline needs, run in
// the worker before and after a CRIU dump. The emulated backend drains its
// work; the cuda backend's GPU state is suspended from outside the worker
// by gpud through the driver's checkpoint API, so its hooks only drain.
type Suspender interface {
	// Suspend finishes all outstanding device work and leaves the device
	// idle, so that the process image is self-consistent.
	Suspend(ctx context.Context) error
	// Resume undoes Suspend after a restore or a checkpoint that left the
	// session running.
	Resume(ctx context.Context) error
}

// GPU describes one physical device for manifests, compatibility checks
// and listings. A host reports its devices in the control API's terms
// (GET /v1/host), and a migration checks a target by what it reported,
// so the backend's description is the API's, not a copy of it.
type GPU = api.GPU

// HostInfo is what a host reports about its devices.
type HostInfo = api.HostInfo
