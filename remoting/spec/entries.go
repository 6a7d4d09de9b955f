package spec

// EntryKind says who implements a C entry point.
type EntryKind int

const (
	// Remote: the generator writes the body, which calls the op's RPC
	// wrapper with Args and stores its outputs through Outs.
	Remote EntryKind = iota
	// Custom: hand-written in the interposer (remoting/interposer/src)
	// on top of the generated RPC wrappers, because the call needs more
	// than argument forwarding (bulk data, client-side caches).
	Custom
	// Local: hand-written and served entirely in the client (error
	// strings, the current-context stack, host memory).
	Local
	// Unsupported: exported so that programs link and cuGetProcAddress
	// finds it; it logs its name once and returns
	// CUDA_ERROR_NOT_SUPPORTED. An entry of another kind that exports the
	// same symbol replaces it (see Entries).
	Unsupported
	// LookupOnly: not exported; cuGetProcAddress hands out a stub that
	// logs the name once and returns CUDA_ERROR_NOT_SUPPORTED, so that a
	// runtime resolving every name it knows gets a function for each.
	LookupOnly
)

// Symbol is one exported symbol of an entry and the CUDA version
// (1000*major + 10*minor) from which cuGetProcAddress hands it out for the
// entry's base name.
type Symbol struct {
	Name    string
	Version int
	// PerThread: the form cuGetProcAddress hands out when asked with
	// CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM (the _ptsz and _ptds
	// symbols, whose NULL stream is the per-thread default stream).
	PerThread bool
}

// Entry is one driver API call as programs see it.
type Entry struct {
	Name    string // base name, as cuGetProcAddress is asked for it
	Symbols []Symbol
	Kind    EntryKind
	// Proto is the C parameter list (Remote entries only).
	Proto string
	// Op, Args and Outs describe a Remote entry: the wire op, one C
	// expression per op input (the context is added when the op has
	// one), and one C pointer parameter per op output.
	Op   string
	Args []string
	Outs []string
}

func sym(name string, v int) Symbol { return Symbol{Name: name, Version: v} }

// ptsym is a per-thread-default-stream symbol (see Symbol.PerThread).
func ptsym(name string, v int) Symbol { return Symbol{Name: name, Version: v, PerThread: true} }

func remote(name, proto, op string, args, outs []string, syms ...Symbol) Entry {
	if len(syms) == 0 {
		syms = []Symbol{sym(name, 2000)}
	}
	return Entry{Name: name, Symbols: syms, Kind: Remote, Proto: proto, Op: op, Args: args, Outs: outs}
}

func custom(name string, syms ...Symbol) Entry {
	if len(syms) == 0 {
		syms = []Symbol{sym(name, 2000)}
	}
	return Entry{Name: name, Symbols: syms, Kind: Custom}
}

func local(name string, syms ...Symbol) Entry {
	e := custom(name, syms...)
	e.Kind = Local
	return e
}

func unsupported(names ...string) []Entry {
	var es []Entry
	for _, n := range names {
		es = append(es, Entry{Name: n, Symbols: []Symbol{sym(n, 2000)}, Kind: Unsupported})
	}
	return es
}

// a is shorthand for a list of C expressions or parameter names.
func a(s ...string) []string { return s }

// Entries is every C entry point of libcuda.so.1: the core calls below,
// the runtime-API surface (entries_runtime.go), what NVIDIA's libraries
// need besides (entries_libs.go) and the unsupported and
// lookup-only stubs, minus any stub whose name an implemented entry
// already serves.
var Entries = resolveEntries(coreEntries, runtimeEntries, libraryEntries)

// coreEntries are the driver calls of driver-API programs. The C helpers used in
// Args: GC_H(handle) passes an opaque handle, GC_S(stream) also maps the
// legacy and per-thread default streams to the context's default stream,
// GC_F(function) passes a function's server handle.
var coreEntries = append([]Entry{
	// Errors, version, lookup: local.
	local("cuGetErrorString"),
	local("cuGetErrorName"),
	custom("cuInit"),
	custom("cuDriverGetVersion"),
	local("cuGetProcAddress", sym("cuGetProcAddress", 11030), sym("cuGetProcAddress_v2", 12000)),

	// Devices.
	custom("cuDeviceGet"),
	remote("cuDeviceGetCount", "int *count", "DeviceCount", nil, a("count")),
	custom("cuDeviceGetName"),
	custom("cuDeviceGetUuid", sym("cuDeviceGetUuid", 9020), sym("cuDeviceGetUuid_v2", 11040)),
	remote("cuDeviceTotalMem", "size_t *bytes, CUdevice dev", "DeviceTotalMem", a("dev"), a("bytes"),
		sym("cuDeviceTotalMem_v2", 3020)),
	remote("cuDeviceGetAttribute", "int *pi, CUdevice_attribute attrib, CUdevice dev", "DeviceAttribute",
		a("(int32_t)attrib", "dev"), a("pi")),
	custom("cuDeviceComputeCapability"),
	custom("cuDeviceGetPCIBusId"),
	custom("cuDeviceGetByPCIBusId"),

	// Primary contexts.
	remote("cuDevicePrimaryCtxRetain", "CUcontext *pctx, CUdevice dev", "PrimaryCtxRetain", a("dev"), a("pctx")),
	remote("cuDevicePrimaryCtxRelease", "CUdevice dev", "PrimaryCtxRelease", a("dev"), nil,
		sym("cuDevicePrimaryCtxRelease_v2", 11000)),
	remote("cuDevicePrimaryCtxReset", "CUdevice dev", "PrimaryCtxReset", a("dev"), nil,
		sym("cuDevicePrimaryCtxReset_v2", 11000)),
	remote("cuDevicePrimaryCtxGetState", "CUdevice dev, unsigned int *flags, int *active", "PrimaryCtxState",
		a("dev"), a("flags", "active")),
	remote("cuDevicePrimaryCtxSetFlags", "CUdevice dev, unsigned int flags", "PrimaryCtxSetFlags", a("dev", "flags"), nil,
		sym("cuDevicePrimaryCtxSetFlags_v2", 11000)),

	// Contexts. Creation and destruction also maintain the calling
	// thread's context stack; the stack itself is local.
	custom("cuCtxCreate", sym("cuCtxCreate_v2", 3020), sym("cuCtxCreate_v3", 11040), sym("cuCtxCreate_v4", 12050)),
	custom("cuCtxDestroy", sym("cuCtxDestroy_v2", 4000)),
	local("cuCtxPushCurrent", sym("cuCtxPushCurrent_v2", 4000)),
	local("cuCtxPopCurrent", sym("cuCtxPopCurrent_v2", 4000)),
	local("cuCtxSetCurrent"),
	local("cuCtxGetCurrent"),
	local("cuCtxGetApiVersion"),
	local("cuCtxGetStreamPriorityRange"),
	remote("cuCtxGetDevice", "CUdevice *device", "CtxDevice", nil, a("device")),
	remote("cuCtxSynchronize", "void", "CtxSynchronize", nil, nil),

	// Memory. Allocation and free also maintain the client's table of
	// device ranges, which cuMemcpy uses to tell device from host.
	custom("cuMemAlloc", sym("cuMemAlloc_v2", 3020)),
	custom("cuMemFree", sym("cuMemFree_v2", 3020)),
	remote("cuMemGetInfo", "size_t *free, size_t *total", "MemGetInfo", nil, a("free", "total"), sym("cuMemGetInfo_v2", 3020)),
	remote("cuMemGetAddressRange", "CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr", "MemGetAddressRange",
		a("dptr"), a("pbase", "psize"), sym("cuMemGetAddressRange_v2", 3020)),
	local("cuMemAllocHost", sym("cuMemAllocHost_v2", 3020)),
	local("cuMemFreeHost"),
	local("cuMemHostAlloc"),
	local("cuMemHostGetFlags"),
	local("cuMemHostRegister", sym("cuMemHostRegister_v2", 6050)),
	local("cuMemHostUnregister"),
	// Pointer queries are answered from the allocations this client made.
	local("cuPointerGetAttribute"),

	// Copies and fills.
	custom("cuMemcpy"),
	custom("cuMemcpyAsync"),
	custom("cuMemcpyHtoD", sym("cuMemcpyHtoD_v2", 3020)),
	custom("cuMemcpyDtoH", sym("cuMemcpyDtoH_v2", 3020)),
	custom("cuMemcpyDtoD", sym("cuMemcpyDtoD_v2", 3020)),
	custom("cuMemcpyHtoDAsync", sym("cuMemcpyHtoDAsync_v2", 3020)),
	custom("cuMemcpyDtoHAsync", sym("cuMemcpyDtoHAsync_v2", 3020)),
	custom("cuMemcpyDtoDAsync", sym("cuMemcpyDtoDAsync_v2", 3020)),
	custom("cuMemsetD8", sym("cuMemsetD8_v2", 3020)),
	custom("cuMemsetD16", sym("cuMemsetD16_v2", 3020)),
	custom("cuMemsetD32", sym("cuMemsetD32_v2", 3020)),
	custom("cuMemsetD8Async"),
	custom("cuMemsetD16Async"),
	custom("cuMemsetD32Async"),

	// Modules.
	custom("cuModuleLoad"),
	custom("cuModuleLoadData"),
	custom("cuModuleLoadDataEx"),
	custom("cuModuleLoadFatBinary"),
	remote("cuModuleUnload", "CUmodule hmod", "ModuleUnload", a("GC_H(hmod)"), nil),
	custom("cuModuleGetFunction"),
	custom("cuModuleGetGlobal", sym("cuModuleGetGlobal_v2", 3020)),

	// Execution.
	remote("cuFuncGetAttribute", "int *pi, CUfunction_attribute attrib, CUfunction hfunc", "FuncGetAttribute",
		a("GC_F(hfunc)", "(int32_t)attrib"), a("pi")),
	remote("cuFuncSetAttribute", "CUfunction hfunc, CUfunction_attribute attrib, int value", "FuncSetAttribute",
		a("GC_F(hfunc)", "(int32_t)attrib", "value"), nil),
	custom("cuLaunchKernel"),

	// Streams.
	remote("cuStreamCreate", "CUstream *phStream, unsigned int Flags", "StreamCreate", a("Flags", "0"), a("phStream")),
	remote("cuStreamCreateWithPriority", "CUstream *phStream, unsigned int flags, int priority", "StreamCreate",
		a("flags", "priority"), a("phStream")),
	remote("cuStreamQuery", "CUstream hStream", "StreamQuery", a("GC_S(hStream)"), nil),
	remote("cuStreamSynchronize", "CUstream hStream", "StreamSynchronize", a("GC_S(hStream)"), nil),
	custom("cuStreamWaitEvent"),
	remote("cuStreamDestroy", "CUstream hStream", "StreamDestroy", a("GC_H(hStream)"), nil, sym("cuStreamDestroy_v2", 4000)),

	// Events.
	remote("cuEventCreate", "CUevent *phEvent, unsigned int Flags", "EventCreate", a("Flags"), a("phEvent")),
	custom("cuEventRecord"),
	custom("cuEventRecordWithFlags"),
	remote("cuEventQuery", "CUevent hEvent", "EventQuery", a("GC_H(hEvent)"), nil),
	remote("cuEventSynchronize", "CUevent hEvent", "EventSynchronize", a("GC_H(hEvent)"), nil),
	remote("cuEventDestroy", "CUevent hEvent", "EventDestroy", a("GC_H(hEvent)"), nil, sym("cuEventDestroy_v2", 4000)),
	remote("cuEventElapsedTime", "float *pMilliseconds, CUevent hStart, CUevent hEnd", "EventElapsedTime",
		a("GC_H(hStart)", "GC_H(hEnd)"), a("pMilliseconds"), sym("cuEventElapsedTime", 2000), sym("cuEventElapsedTime_v2", 12080)),
},
	// Calls programs commonly reach that gpuctl does not serve yet.
	unsupported(
		"cuGetExportTable", "cuDeviceGetProperties", "cuDeviceGetLuid",
		"cuDeviceGetDefaultMemPool", "cuDeviceCanAccessPeer", "cuDeviceGetP2PAttribute",
		"cuCtxGetFlags", "cuCtxSetFlags", "cuCtxGetLimit", "cuCtxSetLimit", "cuCtxGetCacheConfig", "cuCtxSetCacheConfig",
		"cuCtxGetSharedMemConfig", "cuCtxSetSharedMemConfig", "cuCtxEnablePeerAccess", "cuCtxDisablePeerAccess",
		"cuCtxGetId", "cuCtxGetExecAffinity", "cuCtxResetPersistingL2Cache",
		"cuMemAllocManaged", "cuMemAllocPitch_v2", "cuMemHostGetDevicePointer_v2", "cuMemAllocAsync", "cuMemFreeAsync",
		"cuMemAllocFromPoolAsync", "cuMemPoolCreate", "cuMemPoolDestroy", "cuMemPrefetchAsync", "cuMemAdvise",
		"cuMemAddressReserve", "cuMemAddressFree", "cuMemCreate", "cuMemRelease", "cuMemMap", "cuMemUnmap",
		"cuMemSetAccess", "cuMemGetAllocationGranularity",
		"cuMemcpy2D_v2", "cuMemcpy2DAsync_v2", "cuMemcpy2DUnaligned_v2", "cuMemcpy3D_v2", "cuMemcpy3DAsync_v2",
		"cuMemcpyPeer", "cuMemcpyPeerAsync", "cuMemcpyHtoA_v2", "cuMemcpyAtoH_v2",
		"cuMemsetD2D8_v2", "cuMemsetD2D16_v2", "cuMemsetD2D32_v2",
		"cuPointerGetAttributes", "cuPointerSetAttribute",
		"cuModuleGetTexRef", "cuModuleGetSurfRef", "cuModuleGetLoadingMode", "cuModuleGetFunctionCount",
		"cuLinkCreate_v2", "cuLinkAddData_v2", "cuLinkAddFile_v2", "cuLinkComplete", "cuLinkDestroy",
		"cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload", "cuLibraryGetKernel", "cuLibraryGetModule",
		"cuLibraryGetGlobal", "cuKernelGetFunction", "cuKernelGetAttribute", "cuKernelSetAttribute",
		"cuFuncSetCacheConfig", "cuFuncSetSharedMemConfig", "cuFuncGetModule", "cuFuncGetName",
		"cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuLaunchHostFunc",
		"cuOccupancyMaxActiveBlocksPerMultiprocessor", "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
		"cuOccupancyMaxPotentialBlockSize", "cuOccupancyAvailableDynamicSMemPerBlock",
		"cuStreamGetPriority", "cuStreamGetFlags", "cuStreamGetCtx", "cuStreamGetId", "cuStreamAddCallback",
		"cuStreamAttachMemAsync", "cuStreamBeginCapture_v2", "cuStreamEndCapture", "cuStreamIsCapturing",
		"cuStreamGetCaptureInfo_v2", "cuStreamGetCaptureInfo_v3", "cuStreamWriteValue32_v2", "cuStreamWaitValue32_v2",
		"cuGraphCreate", "cuGraphDestroy", "cuGraphInstantiateWithFlags", "cuGraphLaunch", "cuGraphExecDestroy",
		"cuIpcGetMemHandle", "cuIpcOpenMemHandle_v2", "cuIpcCloseMemHandle", "cuIpcGetEventHandle", "cuIpcOpenEventHandle",
		"cuProfilerStart", "cuProfilerStop",
		"cuCheckpointProcessGetRestoreThreadId", "cuCheckpointProcessGetState", "cuCheckpointProcessLock",
		"cuCheckpointProcessCheckpoint", "cuCheckpointProcessRestore", "cuCheckpointProcessUnlock",
	)...)
