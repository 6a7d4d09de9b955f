package spec

// The driver surface that the CUDA runtime, cuBLAS and PyTorch reach
// beyond plain driver-API programs: client-side caches of device and
// context state, module upload by content hash, memory pools and
// stream-ordered allocation, virtual memory management, stream memory
// operations, tensor maps, 2D/3D and peer copies, stream capture and
// graphs. Its ops take codes 300-399.
//
// Its ops join Ops in spec.go and its entries join Entries in entries.go
// (resolveEntries): an entry here replaces a stub of the same symbol and
// takes over the implementation of a call listed earlier, keeping the
// symbols the earlier lists give it.

var (
	pool      = f("pool", U64, "backend.MemPool")
	memHandle = f("h", U64, "backend.MemHandle")
	size      = f("size", U64, "uint64")
	allocType = f("allocType", U32, "uint32")
	handleTy  = f("handleTypes", U32, "uint32")
	locType   = f("locType", U32, "uint32")
	locID     = f("locID", I32, "int32")
	width     = f("width", U64, "uint64")
	height    = f("height", U64, "uint64")
	depth     = f("depth", U64, "uint64")
)

var torchOps = []Op{
	// DeviceAttributes answers every attribute below count at once, each
	// as (u32 result, i32 value), so the client fills its cache of them
	// with one round trip.
	{Code: 300, Name: "DeviceAttributes", Keeps: true, Custom: true, In: []Field{dev, f("count", U32, "uint32")},
		Out: []Field{f("values", Bytes, "[]byte")}},

	// Module upload once: ModuleLoadCached loads the image whose SHA-256
	// is hash from the host's module cache (found false: the host lacks
	// it); ModuleUpload sends the image, which the host checks against
	// hash, loads and keeps in its cache.
	{Code: 301, Name: "ModuleLoadCached", Ctx: true, Custom: true, In: []Field{f("hash", Bytes, "[]byte"), size},
		Out: []Field{mod, f("found", Bool, "bool")}},
	{Code: 302, Name: "ModuleUpload", Ctx: true, Custom: true, Bulk: BulkIn, In: []Field{f("hash", Bytes, "[]byte")},
		Out: []Field{mod}},

	// Memory pools and stream-ordered allocation. Pools belong to a
	// device; a pool handle of 0 in MemAllocAsync is the device's current
	// pool.
	{Code: 310, Name: "DeviceGetMemPool", In: []Field{dev}, Out: []Field{pool}},
	{Code: 311, Name: "DeviceGetDefaultMemPool", In: []Field{dev}, Out: []Field{pool}},
	{Code: 312, Name: "DeviceSetMemPool", In: []Field{dev, pool}},
	{Code: 313, Name: "MemPoolCreate", In: []Field{allocType, handleTy, locType, locID, f("maxSize", U64, "uint64")}, Out: []Field{pool}},
	{Code: 314, Name: "MemPoolDestroy", In: []Field{pool}},
	{Code: 315, Name: "MemPoolSetAttribute", In: []Field{pool, f("attr", I32, "int32"), f("value", U64, "uint64")}},
	{Code: 316, Name: "MemPoolGetAttribute", Keeps: true, In: []Field{pool, f("attr", I32, "int32")}, Out: []Field{f("value", U64, "uint64")}},
	{Code: 317, Name: "MemPoolTrimTo", In: []Field{pool, f("keep", U64, "uint64")}},
	{Code: 318, Name: "MemAllocAsync", Ctx: true, In: []Field{size, pool, stream}, Out: []Field{ptr}},
	{Code: 319, Name: "MemFreeAsync", Ctx: true, Async: true, In: []Field{ptr, stream}},

	// Virtual memory management.
	{Code: 320, Name: "MemAddressReserve", In: []Field{size, f("align", U64, "uint64"), f("addr", U64, "backend.DevPtr"), f("flags", U64, "uint64")},
		Out: []Field{ptr}},
	{Code: 321, Name: "MemAddressFree", In: []Field{ptr, size}},
	{Code: 322, Name: "MemCreate", In: []Field{size, allocType, handleTy, locType, locID, f("compression", U32, "uint32"), f("flags", U64, "uint64")},
		Out: []Field{memHandle}},
	{Code: 323, Name: "MemRelease", In: []Field{memHandle}},
	{Code: 324, Name: "MemMap", In: []Field{ptr, size, f("offset", U64, "uint64"), memHandle, f("flags", U64, "uint64")}},
	{Code: 325, Name: "MemUnmap", In: []Field{ptr, size}},
	// descs: count x (u32 location type, i32 location id, u32 flags).
	{Code: 326, Name: "MemSetAccess", Custom: true, In: []Field{ptr, size, f("descs", Bytes, "[]byte")}},
	{Code: 327, Name: "MemGetAccess", Keeps: true, In: []Field{locType, locID, ptr}, Out: []Field{f("flags", U64, "uint64")}},
	{Code: 328, Name: "MemGetAllocationGranularity", Keeps: true, In: []Field{allocType, handleTy, locType, locID, f("option", U32, "uint32")},
		Out: []Field{f("granularity", U64, "uint64")}},
	{Code: 329, Name: "MemRetainAllocationHandle", In: []Field{ptr}, Out: []Field{memHandle}},

	// Stream memory operations. width is 32 or 64 (bits).
	{Code: 330, Name: "StreamWaitValue", Ctx: true, Async: true,
		In: []Field{stream, f("addr", U64, "backend.DevPtr"), f("value", U64, "uint64"), f("flags", U32, "uint32"), f("width", U32, "uint32")}},
	{Code: 331, Name: "StreamWriteValue", Ctx: true, Async: true,
		In: []Field{stream, f("addr", U64, "backend.DevPtr"), f("value", U64, "uint64"), f("flags", U32, "uint32"), f("width", U32, "uint32")}},
	// ops: count x (u32 type, u32 flags, u64 address, u64 value).
	{Code: 332, Name: "StreamBatchMemOp", Ctx: true, Async: true, Custom: true,
		In: []Field{stream, f("flags", U32, "uint32"), f("ops", Bytes, "[]byte")}},

	// TensorMapEncode encodes a CUtensorMap on the device's driver; kind
	// 0 is tiled, 1 im2col; params are laid out as docs/protocol.md says.
	{Code: 335, Name: "TensorMapEncode", Keeps: true, Custom: true, In: []Field{f("kind", U32, "uint32"), f("params", Bytes, "[]byte")},
		Out: []Field{f("tmap", Bytes, "[]byte")}},

	// Pitched copies (cuMemcpy2D/3D): the host side travels packed, row
	// after row; the device side is described by base, pitch and height
	// (rows per slice).
	{Code: 340, Name: "MemcpyHtoD3D", Keeps: true, Ctx: true, Async: true, Custom: true, Bulk: BulkIn,
		In: []Field{f("dst", U64, "backend.DevPtr"), f("dstPitch", U64, "uint64"), f("dstHeight", U64, "uint64"), width, height, depth, stream}},
	{Code: 341, Name: "MemcpyDtoH3D", Keeps: true, Ctx: true, Custom: true, Bulk: BulkOut,
		In: []Field{f("src", U64, "backend.DevPtr"), f("srcPitch", U64, "uint64"), f("srcHeight", U64, "uint64"), width, height, depth, stream}},
	{Code: 342, Name: "MemcpyDtoD3D", Keeps: true, Ctx: true, Async: true, Custom: true,
		In: []Field{f("dst", U64, "backend.DevPtr"), f("dstPitch", U64, "uint64"), f("dstHeight", U64, "uint64"),
			f("src", U64, "backend.DevPtr"), f("srcPitch", U64, "uint64"), f("srcHeight", U64, "uint64"), width, height, depth, stream}},
	// MemcpyPeer copies between two contexts; the op's context is the
	// calling thread's, which the stream belongs to.
	{Code: 343, Name: "MemcpyPeer", Keeps: true, Ctx: true, Async: true,
		In: []Field{f("dst", U64, "backend.DevPtr"), f("dstCtx", U64, "backend.Ctx"), f("src", U64, "backend.DevPtr"),
			f("srcCtx", U64, "backend.Ctx"), f("n", U64, "uint64"), stream}},
}

var torchEntries = []Entry{
	// Device and context state answered from the client's caches.
	custom("cuDeviceGetCount"),
	custom("cuDeviceTotalMem", sym("cuDeviceTotalMem_v2", 3020)),
	custom("cuDeviceGetAttribute"),
	custom("cuDevicePrimaryCtxRetain", sym("cuDevicePrimaryCtxRetain", 7000)),
	custom("cuDevicePrimaryCtxRelease", sym("cuDevicePrimaryCtxRelease", 7000), sym("cuDevicePrimaryCtxRelease_v2", 11000)),
	custom("cuDevicePrimaryCtxReset", sym("cuDevicePrimaryCtxReset", 7000), sym("cuDevicePrimaryCtxReset_v2", 11000)),
	custom("cuDevicePrimaryCtxGetState"),
	custom("cuDevicePrimaryCtxSetFlags", sym("cuDevicePrimaryCtxSetFlags", 7000), sym("cuDevicePrimaryCtxSetFlags_v2", 11000)),
	custom("cuCtxGetDevice"),
	local("cuCtxGetFlags", sym("cuCtxGetFlags", 7000)),

	// Peer access: a session sees one GPU.
	local("cuDeviceCanAccessPeer", sym("cuDeviceCanAccessPeer", 4000)),
	local("cuDeviceGetP2PAttribute", sym("cuDeviceGetP2PAttribute", 8000)),
	local("cuCtxEnablePeerAccess", sym("cuCtxEnablePeerAccess", 4000)),
	local("cuCtxDisablePeerAccess", sym("cuCtxDisablePeerAccess", 4000)),

	// Streams are tracked in the client (flags, priority, capture state).
	custom("cuStreamCreate"),
	custom("cuStreamCreateWithPriority", sym("cuStreamCreateWithPriority", 5050)),
	custom("cuStreamDestroy", sym("cuStreamDestroy_v2", 4000)),
	custom("cuStreamQuery"),
	custom("cuStreamSynchronize"),
	custom("cuCtxSynchronize"),
	local("cuStreamGetFlags", sym("cuStreamGetFlags", 5050)),
	local("cuStreamGetPriority", sym("cuStreamGetPriority", 5050)),
	local("cuStreamGetCtx", sym("cuStreamGetCtx", 9020)),

	// Stream capture and graphs, recorded and replayed by the client.
	custom("cuStreamBeginCapture", sym("cuStreamBeginCapture", 10000), sym("cuStreamBeginCapture_v2", 10010)),
	custom("cuStreamEndCapture", sym("cuStreamEndCapture", 10000)),
	custom("cuStreamIsCapturing", sym("cuStreamIsCapturing", 10000)),
	custom("cuStreamGetCaptureInfo", sym("cuStreamGetCaptureInfo", 10010), sym("cuStreamGetCaptureInfo_v2", 11030),
		sym("cuStreamGetCaptureInfo_v3", 12030)),
	custom("cuStreamUpdateCaptureDependencies", sym("cuStreamUpdateCaptureDependencies", 11030),
		sym("cuStreamUpdateCaptureDependencies_v2", 12030)),
	local("cuThreadExchangeStreamCaptureMode", sym("cuThreadExchangeStreamCaptureMode", 10010)),
	custom("cuGraphCreate", sym("cuGraphCreate", 10000)),
	custom("cuGraphDestroy", sym("cuGraphDestroy", 10000)),
	custom("cuGraphGetNodes", sym("cuGraphGetNodes", 10000)),
	custom("cuGraphGetRootNodes", sym("cuGraphGetRootNodes", 10000)),
	custom("cuGraphGetEdges", sym("cuGraphGetEdges", 10000), sym("cuGraphGetEdges_v2", 12030)),
	custom("cuGraphNodeGetType", sym("cuGraphNodeGetType", 10000)),
	custom("cuGraphNodeGetDependencies", sym("cuGraphNodeGetDependencies", 10000), sym("cuGraphNodeGetDependencies_v2", 12030)),
	custom("cuGraphAddDependencies", sym("cuGraphAddDependencies", 10000), sym("cuGraphAddDependencies_v2", 12030)),
	custom("cuGraphAddEmptyNode", sym("cuGraphAddEmptyNode", 10000)),
	custom("cuGraphAddKernelNode", sym("cuGraphAddKernelNode", 10000), sym("cuGraphAddKernelNode_v2", 12000)),
	custom("cuGraphKernelNodeGetParams", sym("cuGraphKernelNodeGetParams", 10000), sym("cuGraphKernelNodeGetParams_v2", 12000)),
	custom("cuGraphKernelNodeSetParams", sym("cuGraphKernelNodeSetParams", 10000), sym("cuGraphKernelNodeSetParams_v2", 12000)),
	custom("cuGraphAddMemsetNode", sym("cuGraphAddMemsetNode", 10000)),
	custom("cuGraphAddMemcpyNode", sym("cuGraphAddMemcpyNode", 10000)),
	custom("cuGraphInstantiate", sym("cuGraphInstantiate", 10000), sym("cuGraphInstantiate_v2", 11000)),
	custom("cuGraphInstantiateWithFlags", sym("cuGraphInstantiateWithFlags", 11040)),
	custom("cuGraphInstantiateWithParams", sym("cuGraphInstantiateWithParams", 12000)),
	custom("cuGraphExecKernelNodeSetParams", sym("cuGraphExecKernelNodeSetParams", 10010), sym("cuGraphExecKernelNodeSetParams_v2", 12000)),
	custom("cuGraphLaunch", sym("cuGraphLaunch", 10000)),
	custom("cuGraphUpload", sym("cuGraphUpload", 11010)),
	custom("cuGraphExecDestroy", sym("cuGraphExecDestroy", 10000)),
	custom("cuLaunchHostFunc", sym("cuLaunchHostFunc", 10000)),
	custom("cuStreamAddCallback", sym("cuStreamAddCallback", 5000), ptsym("cuStreamAddCallback_ptsz", 7000)),

	// Memory pools and stream-ordered allocation.
	custom("cuDeviceGetDefaultMemPool", sym("cuDeviceGetDefaultMemPool", 11020)),
	custom("cuDeviceGetMemPool", sym("cuDeviceGetMemPool", 11020)),
	custom("cuDeviceSetMemPool", sym("cuDeviceSetMemPool", 11020)),
	custom("cuMemPoolCreate", sym("cuMemPoolCreate", 11020)),
	custom("cuMemPoolDestroy", sym("cuMemPoolDestroy", 11020)),
	custom("cuMemPoolSetAttribute", sym("cuMemPoolSetAttribute", 11020)),
	custom("cuMemPoolGetAttribute", sym("cuMemPoolGetAttribute", 11020)),
	custom("cuMemPoolTrimTo", sym("cuMemPoolTrimTo", 11020)),
	custom("cuMemPoolSetAccess", sym("cuMemPoolSetAccess", 11020)),
	custom("cuMemPoolGetAccess", sym("cuMemPoolGetAccess", 11020)),
	custom("cuMemAllocAsync", sym("cuMemAllocAsync", 11020)),
	custom("cuMemAllocFromPoolAsync", sym("cuMemAllocFromPoolAsync", 11020)),
	custom("cuMemFreeAsync", sym("cuMemFreeAsync", 11020)),

	// Virtual memory management.
	custom("cuMemAddressReserve", sym("cuMemAddressReserve", 10020)),
	custom("cuMemAddressFree", sym("cuMemAddressFree", 10020)),
	custom("cuMemCreate", sym("cuMemCreate", 10020)),
	custom("cuMemRelease", sym("cuMemRelease", 10020)),
	custom("cuMemMap", sym("cuMemMap", 10020)),
	custom("cuMemUnmap", sym("cuMemUnmap", 10020)),
	custom("cuMemSetAccess", sym("cuMemSetAccess", 10020)),
	custom("cuMemGetAccess", sym("cuMemGetAccess", 10020)),
	custom("cuMemGetAllocationGranularity", sym("cuMemGetAllocationGranularity", 10020)),
	custom("cuMemGetAllocationPropertiesFromHandle", sym("cuMemGetAllocationPropertiesFromHandle", 10020)),
	custom("cuMemRetainAllocationHandle", sym("cuMemRetainAllocationHandle", 11000)),

	// Stream memory operations.
	custom("cuStreamWaitValue32", sym("cuStreamWaitValue32", 8000), sym("cuStreamWaitValue32_v2", 11070)),
	custom("cuStreamWaitValue64", sym("cuStreamWaitValue64", 9000), sym("cuStreamWaitValue64_v2", 11070)),
	custom("cuStreamWriteValue32", sym("cuStreamWriteValue32", 8000), sym("cuStreamWriteValue32_v2", 11070)),
	custom("cuStreamWriteValue64", sym("cuStreamWriteValue64", 9000), sym("cuStreamWriteValue64_v2", 11070)),
	custom("cuStreamBatchMemOp", sym("cuStreamBatchMemOp", 8000), sym("cuStreamBatchMemOp_v2", 11070)),

	// Tensor maps, encoded by the device's driver.
	custom("cuTensorMapEncodeTiled", sym("cuTensorMapEncodeTiled", 12000)),
	custom("cuTensorMapEncodeIm2col", sym("cuTensorMapEncodeIm2col", 12000)),

	// Pitched and peer copies.
	custom("cuMemcpy2D", sym("cuMemcpy2D_v2", 3020)),
	custom("cuMemcpy2DAsync", sym("cuMemcpy2DAsync_v2", 3020)),
	custom("cuMemcpy2DUnaligned", sym("cuMemcpy2DUnaligned_v2", 3020)),
	custom("cuMemcpy3D", sym("cuMemcpy3D_v2", 3020)),
	custom("cuMemcpy3DAsync", sym("cuMemcpy3DAsync_v2", 3020)),
	custom("cuMemcpyPeer", sym("cuMemcpyPeer", 4000)),
	custom("cuMemcpyPeerAsync", sym("cuMemcpyPeerAsync", 4000)),
}
