package backend

import (
	"context"
	"io"
)

// More handle types: a memory pool (CUmemoryPool) and a physical
// allocation of virtual memory management (CUmemGenericAllocationHandle).
type (
	MemPool   uint64
	MemHandle uint64
)

// Extended is what the CUDA runtime, cuBLAS and PyTorch use beyond the
// calls of plain driver-API programs.
type Extended interface {
	Pools
	VirtualMemory
	StreamMemOps
	TensorMaps
	PitchedCopies
	ContextLimits
	ClusterOccupancy
}

// Pools serves memory pools and stream-ordered allocation
// (cuMemAllocAsync). Pools belong to a device, not a context. A pool
// argument of 0 to MemAllocAsync means the device's current pool.
type Pools interface {
	DeviceGetMemPool(ctx context.Context, dev int32) (MemPool, error)
	DeviceGetDefaultMemPool(ctx context.Context, dev int32) (MemPool, error)
	DeviceSetMemPool(ctx context.Context, dev int32, pool MemPool) error
	// MemPoolCreate takes CUmemPoolProps' allocation type, handle types
	// and location; maxSize 0 means no limit.
	MemPoolCreate(ctx context.Context, allocType, handleTypes, locType uint32, locID int32, maxSize uint64) (MemPool, error)
	MemPoolDestroy(ctx context.Context, pool MemPool) error
	// MemPoolSetAttribute and MemPoolGetAttribute take a
	// CUmemPool_attribute; int-valued attributes travel as 0 or 1.
	MemPoolSetAttribute(ctx context.Context, pool MemPool, attr int32, value uint64) error
	MemPoolGetAttribute(ctx context.Context, pool MemPool, attr int32) (uint64, error)
	MemPoolTrimTo(ctx context.Context, pool MemPool, keep uint64) error
	MemAllocAsync(ctx context.Context, c Ctx, size uint64, pool MemPool, s Stream) (DevPtr, error)
	MemFreeAsync(ctx context.Context, c Ctx, p DevPtr, s Stream) error
}

// AccessDesc is one CUmemAccessDesc: who may access a mapped range, how.
type AccessDesc struct {
	LocType uint32
	LocID   int32
	Flags   uint32
}

// VirtualMemory serves the VMM calls: address reservations, physical
// allocations, and mappings of the one onto the other.
type VirtualMemory interface {
	MemAddressReserve(ctx context.Context, size, align uint64, addr DevPtr, flags uint64) (DevPtr, error)
	MemAddressFree(ctx context.Context, p DevPtr, size uint64) error
	MemCreate(ctx context.Context, size uint64, allocType, handleTypes, locType uint32, locID int32, compression uint32, flags uint64) (MemHandle, error)
	MemRelease(ctx context.Context, h MemHandle) error
	MemMap(ctx context.Context, p DevPtr, size, offset uint64, h MemHandle, flags uint64) error
	MemUnmap(ctx context.Context, p DevPtr, size uint64) error
	MemSetAccess(ctx context.Context, p DevPtr, size uint64, descs []AccessDesc) error
	MemGetAccess(ctx context.Context, locType uint32, locID int32, p DevPtr) (uint64, error)
	MemGetAllocationGranularity(ctx context.Context, allocType, handleTypes, locType uint32, locID int32, option uint32) (uint64, error)
	// MemRetainAllocationHandle returns the handle mapped at p and takes
	// a reference on it, which MemRelease drops.
	MemRetainAllocationHandle(ctx context.Context, p DevPtr) (MemHandle, error)
}

// MemOp is one operation of cuStreamBatchMemOp (CUstreamBatchMemOpType:
// 1 wait 32, 2 write 32, 3 flush remote writes, 4 wait 64, 5 write 64,
// 6 barrier).
type MemOp struct {
	Type  uint32
	Flags uint32
	Addr  DevPtr
	Value uint64
}

// StreamMemOps serves the stream memory operations. width is 32 or 64.
// A wait blocks its stream, not the caller, until the value at addr
// satisfies the condition in flags (CUstreamWaitValue_flags).
type StreamMemOps interface {
	StreamWaitValue(ctx context.Context, c Ctx, s Stream, addr DevPtr, value uint64, flags, width uint32) error
	StreamWriteValue(ctx context.Context, c Ctx, s Stream, addr DevPtr, value uint64, flags, width uint32) error
	StreamBatchMemOp(ctx context.Context, c Ctx, s Stream, flags uint32, ops []MemOp) error
}

// TensorMapParams are the arguments of cuTensorMapEncodeTiled (Im2col
// false) or cuTensorMapEncodeIm2col.
type TensorMapParams struct {
	Im2col        bool
	DataType      uint32
	Rank          uint32
	Address       DevPtr
	GlobalDim     []uint64 // Rank entries
	GlobalStrides []uint64 // Rank-1 entries, in bytes
	BoxDim        []uint32 // tiled: Rank entries
	ElemStrides   []uint32 // Rank entries
	// Im2col only: the bounding box's corners (Rank-2 entries each), the
	// channels per pixel and the pixels per column.
	LowerCorner, UpperCorner                  []int32
	ChannelsPerPixel, PixelsPerColumn         uint32
	Interleave, Swizzle, L2Promotion, OOBFill uint32
}

// TensorMaps encodes TMA descriptors (CUtensorMap, 128 bytes). The layout
// is the device's: the cuda backend returns what NVIDIA's driver encodes.
type TensorMaps interface {
	TensorMapEncode(ctx context.Context, p TensorMapParams) ([128]byte, error)
}

// Pitched is one side of a pitched copy on the device: the address of the
// first byte copied, the bytes from one row to the next and the rows from
// one slice to the next.
type Pitched struct {
	Ptr    DevPtr
	Pitch  uint64
	Height uint64
}

// Extent is a pitched copy's size: Width bytes per row, Height rows per
// slice, Depth slices.
type Extent struct {
	Width, Height, Depth uint64
}

// PitchedCopies serves cuMemcpy2D/3D and the peer copies. Host data
// travels packed (rows of exactly Width bytes, one after another).
type PitchedCopies interface {
	// MemcpyHtoD3D reads Width*Height*Depth bytes from src; like
	// MemcpyHtoD it consumes them all even when it fails.
	MemcpyHtoD3D(ctx context.Context, c Ctx, dst Pitched, src io.Reader, e Extent, s Stream) error
	// MemcpyDtoH3D writes Width*Height*Depth bytes to dst, or fails
	// before writing any.
	MemcpyDtoH3D(ctx context.Context, c Ctx, dst io.Writer, src Pitched, e Extent, s Stream) error
	MemcpyDtoD3D(ctx context.Context, c Ctx, dst, src Pitched, e Extent, s Stream) error
	// MemcpyPeer copies n bytes from src in srcCtx to dst in dstCtx, on
	// stream s of c.
	MemcpyPeer(ctx context.Context, c Ctx, dst DevPtr, dstCtx Ctx, src DevPtr, srcCtx Ctx, n uint64, s Stream) error
}

// ContextLimits serves a context's resource limits (a CUlimit): the
// values the device's driver reports and accepts, since libraries size
// their work from them (cuBLAS asks CUDA 12.5's shared memory limit).
type ContextLimits interface {
	CtxGetLimit(ctx context.Context, c Ctx, limit int32) (uint64, error)
	CtxSetLimit(ctx context.Context, c Ctx, limit int32, value uint64) error
}

// ClusterQuery says which thread-block cluster occupancy question
// OccupancyClusters answers.
type ClusterQuery uint32

const (
	// ClusterMaxActive is cuOccupancyMaxActiveClusters: how many clusters
	// of the launch's shape can be resident on the device at once.
	ClusterMaxActive ClusterQuery = 0
	// ClusterMaxSize is cuOccupancyMaxPotentialClusterSize: the largest
	// cluster, in blocks, the launch could use.
	ClusterMaxSize ClusterQuery = 1
)

// ClusterOccupancy answers cluster occupancy for a launch configuration
// (Grid, Block, SharedBytes, Cluster; a zero Cluster leaves the shape to
// the function's compile-time one). The answer depends on how the
// device groups its SMs, which only its driver knows. A backend that
// cannot say returns cu.ErrorNotSupported; the client then computes an
// upper bound itself.
type ClusterOccupancy interface {
	OccupancyClusters(ctx context.Context, c Ctx, f Function, cfg LaunchConfig, q ClusterQuery) (int32, error)
}
