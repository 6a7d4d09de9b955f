package spec

// What NVIDIA's libraries (cuBLAS, cuBLASLt, cuDNN) and the CUDA samples
// need of the driver beyond cudart's look-ups and the extended surface.
// Its ops take codes 400-499.
//
// Its ops join Ops in spec.go and its entries join Entries in entries.go
// (resolveEntries), after the other lists: an entry here adds forms to a
// call listed earlier and takes over its implementation.

var libraryOps = []Op{
	// A launch with thread-block clusters or as a cooperative launch
	// (cuLaunchKernelEx's attributes, cuLaunchCooperativeKernel): cluster
	// dimensions (all 1 for none) and flags (LaunchExCooperative).
	// cuBLASLt launches its Hopper GEMM kernels in clusters.
	{Code: 400, Name: "LaunchEx", Launches: true, Ctx: true, Async: true, Custom: true, In: []Field{
		fn,
		f("gx", U32, "uint32"), f("gy", U32, "uint32"), f("gz", U32, "uint32"),
		f("bx", U32, "uint32"), f("by", U32, "uint32"), f("bz", U32, "uint32"),
		f("shared", U32, "uint32"), stream,
		f("cx", U32, "uint32"), f("cy", U32, "uint32"), f("cz", U32, "uint32"), f("flags", U32, "uint32"),
		f("params", Bytes, "[]byte"),
	}},

	// A context's resource limits (CUlimit), answered by the server's
	// driver: besides the stack, heap and printf sizes, CUDA 12.5 and
	// later report the shared memory available to kernels and whether the
	// context shares the GPU with graphics (CIG), which cuBLAS asks.
	{Code: 401, Name: "CtxGetLimit", Keeps: true, Ctx: true, In: []Field{f("limit", I32, "int32")}, Out: []Field{f("value", U64, "uint64")}},
	{Code: 402, Name: "CtxSetLimit", Ctx: true, In: []Field{f("limit", I32, "int32"), f("value", U64, "uint64")}},

	// Thread-block cluster occupancy of a function for a launch shape,
	// answered by the server's driver, which knows how the device's SMs
	// are grouped: query ClusterQueryMaxActive is
	// cuOccupancyMaxActiveClusters, ClusterQueryMaxSize
	// cuOccupancyMaxPotentialClusterSize. A zero cluster dimension leaves
	// the shape to the function's own (compile-time) cluster size.
	{Code: 403, Name: "OccupancyClusters", Keeps: true, Ctx: true, Custom: true, In: []Field{
		fn,
		f("gx", U32, "uint32"), f("gy", U32, "uint32"), f("gz", U32, "uint32"),
		f("bx", U32, "uint32"), f("by", U32, "uint32"), f("bz", U32, "uint32"),
		f("shared", U32, "uint32"),
		f("cx", U32, "uint32"), f("cy", U32, "uint32"), f("cz", U32, "uint32"), f("query", U32, "uint32"),
	}, Out: []Field{f("value", I32, "int32")}},

	// The device's TPC layout as the driver hands it to cuBLASLt (its
	// private table 1734dc26, slot 4): for each TPC, the GPC it belongs
	// to and its index within that GPC, one byte each. The answer comes
	// from the server's driver; see docs/export-tables.md.
	{Code: 404, Name: "TPCLayout", Keeps: true, Ctx: true, Custom: true,
		Out: []Field{f("gpc", Bytes, "[]byte"), f("local", Bytes, "[]byte")}},
	// A stream's unique number (cuStreamGetId), which cuBLASLt also
	// reads through its table's slot 39. s is a stream handle or
	// CU_STREAM_LEGACY (1) or CU_STREAM_PER_THREAD (2).
	{Code: 405, Name: "StreamGetId", Keeps: true, Ctx: true, Custom: true, In: []Field{stream}, Out: []Field{f("id", U64, "uint64")}},
	// One more reference to a physical allocation, which MemRelease
	// drops: what cuMemImportFromShareableHandle hands out for a handle
	// the same process exported.
	{Code: 406, Name: "MemHandleRetain", Custom: true, In: []Field{memHandle}},
}

// libraryEntries: cuBLAS and cuBLASLt resolve a fixed list of driver
// symbols with dlsym when a handle is created and fail the creation
// (CUBLAS_STATUS_INTERNAL_ERROR) when any of them is missing, whether or
// not they ever call it. dlsymNames is every name resolved that way by
// CUDA 13's libraries and PyTorch and by cuBLAS 12.4; a test checks that
// the library exports each one.
var libraryEntries = []Entry{
	// The pre-CUDA 4.0 names of the context stack calls; same arguments
	// and, for a process with one context stack per thread, same effect.
	local("cuCtxPushCurrent", sym("cuCtxPushCurrent", 2000), sym("cuCtxPushCurrent_v2", 4000)),
	local("cuCtxPopCurrent", sym("cuCtxPopCurrent", 2000), sym("cuCtxPopCurrent_v2", 4000)),

	// Cooperative launches (cudaLaunchCooperativeKernel), served with
	// cuLaunchKernelEx's cooperative attribute.
	custom("cuLaunchCooperativeKernel", sym("cuLaunchCooperativeKernel", 9000),
		ptsym("cuLaunchCooperativeKernel_ptsz", 9000)),

	// Profiler control. No profiler can attach to the remote GPU through
	// gpuctl, and with none attached NVIDIA's driver accepts these and
	// does nothing (cudaProfilerStart in NVIDIA's matrixMul sample).
	local("cuProfilerInitialize", sym("cuProfilerInitialize", 4000)),
	local("cuProfilerStart", sym("cuProfilerStart", 4000)),
	local("cuProfilerStop", sym("cuProfilerStop", 4000)),

	// Answered in the client from what it already knows: the legacy
	// device properties from the device's attributes, and the shared
	// memory bank size, fixed at four bytes on every GPU CUDA 12 and 13
	// support (a request for another is accepted and changes nothing, as
	// NVIDIA's driver does on those GPUs).
	local("cuDeviceGetProperties", sym("cuDeviceGetProperties", 2000)),
	local("cuCtxGetSharedMemConfig", sym("cuCtxGetSharedMemConfig", 4020)),
	local("cuCtxSetSharedMemConfig", sym("cuCtxSetSharedMemConfig", 4020)),
	local("cuFuncSetSharedMemConfig", sym("cuFuncSetSharedMemConfig", 4020)),

	// A stream's unique number, answered by the server's driver.
	custom("cuStreamGetId", sym("cuStreamGetId", 12000), ptsym("cuStreamGetId_ptsz", 12000)),

	// Shareable handles of physical allocations, within one process (a
	// local file descriptor names the server's handle): PyTorch's
	// expandable segments resolve both when they start.
	custom("cuMemExportToShareableHandle", sym("cuMemExportToShareableHandle", 10020)),
	custom("cuMemImportFromShareableHandle", sym("cuMemImportFromShareableHandle", 10020)),
}

// dlsymNames are the driver symbols cuBLAS, cuBLASLt, cuDNN and PyTorch
// resolve with dlsym (CUDA 12.4 and 13).
var dlsymNames = []string{
	"cuCtxDisablePeerAccess", "cuCtxEnablePeerAccess", "cuCtxGetCurrent", "cuCtxGetDevice", "cuCtxGetLimit",
	"cuCtxPopCurrent", "cuCtxPopCurrent_v2", "cuCtxPushCurrent", "cuCtxPushCurrent_v2", "cuCtxSetCurrent",
	"cuCtxSynchronize", "cuDeviceCanAccessPeer", "cuDeviceGet", "cuDeviceGetAttribute", "cuDeviceGetName",
	"cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset",
	"cuDevicePrimaryCtxRetain", "cuDeviceTotalMem_v2", "cuDriverGetVersion", "cuEventCreate",
	"cuEventDestroy_v2", "cuEventElapsedTime", "cuEventQuery", "cuEventRecord", "cuEventSynchronize",
	"cuFuncGetAttribute", "cuFuncSetAttribute", "cuFuncSetCacheConfig", "cuGetErrorName", "cuGetErrorString",
	"cuGetExportTable", "cuGetProcAddress_v2", "cuGraphDestroy", "cuGraphExecDestroy",
	"cuGraphExecKernelNodeSetParams", "cuGraphGetNodes", "cuGraphInstantiate", "cuGraphKernelNodeGetParams",
	"cuGraphLaunch", "cuGraphNodeGetType", "cuInit", "cuKernelGetAttribute", "cuKernelGetFunction",
	"cuKernelGetLibrary", "cuKernelSetAttribute", "cuLaunchKernel", "cuLaunchKernelEx", "cuLibraryGetKernel",
	"cuLibraryLoadData", "cuLibraryUnload", "cuLinkAddData_v2", "cuLinkAddFile_v2", "cuLinkComplete",
	"cuLinkCreate_v2", "cuLinkDestroy", "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuMemPrefetchAsync",
	"cuMemcpy", "cuMemcpy2DAsync_v2", "cuMemcpyAsync", "cuMemcpyDtoDAsync_v2", "cuMemcpyDtoH_v2",
	"cuMemcpyHtoD_v2", "cuMemsetD8_v2", "cuModuleGetFunction", "cuModuleGetGlobal_v2", "cuModuleLoadData",
	"cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuModuleUnload", "cuOccupancyAvailableDynamicSMemPerBlock",
	"cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
	"cuOccupancyMaxActiveClusters", "cuPointerGetAttribute", "cuPointerGetAttributes", "cuStreamBatchMemOp",
	"cuStreamBeginCapture_v2", "cuStreamCreate", "cuStreamDestroy_v2", "cuStreamEndCapture",
	"cuStreamGetCaptureInfo_v2", "cuStreamGetCtx", "cuStreamIsCapturing", "cuStreamSynchronize",
	"cuStreamWaitEvent", "cuStreamWaitValue32", "cuTensorMapEncodeTiled", "cuThreadExchangeStreamCaptureMode",
}
