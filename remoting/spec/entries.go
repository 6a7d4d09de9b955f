package spec

import (
	"fmt"
	"slices"
)

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

func lookupOnly(names ...string) []Entry {
	var es []Entry
	for _, n := range names {
		es = append(es, Entry{Name: n, Symbols: []Symbol{sym(n, 2000)}, Kind: LookupOnly})
	}
	return es
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

// Entries is every C entry point of libcuda.so.1, each symbol once: the
// core calls below, the CUDA runtime's surface (entries_runtime.go), the
// surface of cuBLAS and PyTorch (entries_torch.go) and what NVIDIA's
// libraries need besides (entries_libs.go), joined by resolveEntries here
// and nowhere else.
var Entries = resolveEntries(coreEntries, runtimeEntries, torchEntries, libraryEntries)

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
	remote("cuDevicePrimaryCtxRetain", "CUcontext *pctx, CUdevice dev", "PrimaryCtxRetain", a("dev"), a("pctx"),
		sym("cuDevicePrimaryCtxRetain", 7000)),
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
		a("GC_F(hfunc)", "(int32_t)attrib"), a("pi"), sym("cuFuncGetAttribute", 2020)),
	remote("cuFuncSetAttribute", "CUfunction hfunc, CUfunction_attribute attrib, int value", "FuncSetAttribute",
		a("GC_F(hfunc)", "(int32_t)attrib", "value"), nil, sym("cuFuncSetAttribute", 9000)),
	custom("cuLaunchKernel"),

	// Streams.
	remote("cuStreamCreate", "CUstream *phStream, unsigned int Flags", "StreamCreate", a("Flags", "0"), a("phStream")),
	remote("cuStreamCreateWithPriority", "CUstream *phStream, unsigned int flags, int priority", "StreamCreate",
		a("flags", "priority"), a("phStream"), sym("cuStreamCreateWithPriority", 5050)),
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

// implemented reports whether e is served by generated or hand-written C
// (not a stub).
func (e Entry) implemented() bool { return e.Kind == Remote || e.Kind == Custom || e.Kind == Local }

// resolveEntries joins entry lists into one table in which every symbol
// is exported once and every call has one implementation, so that each
// list can add to a call without editing another list:
//
//   - Implemented entries of the same base name become one entry, at the
//     place of the first. It exports the union of their symbols (a later
//     list adds the per-thread-default-stream forms or CUDA 13's
//     context-taking forms of a call an earlier list serves) and takes its
//     kind and wire description from the last, which thereby takes over
//     every symbol of the call: the runtime's cached cuFuncGetAttribute
//     replaces the core's forwarding one, and the client-side caches'
//     cuCtxGetDevice serves the runtime's cuCtxGetDevice_v2 too. Listing a
//     symbol again must repeat its version and per-thread flag.
//   - A stub (Unsupported, LookupOnly) is dropped when an implemented
//     entry exports its symbol or serves its name, so implementing a call
//     is adding its entry, never editing a stub list.
//
// A contradiction (a symbol listed with two versions, a symbol claimed by
// two calls, a Remote entry left to serve symbols it does not list) is a
// mistake in the tables and panics, which fails go generate and every
// test of the package.
func resolveEntries(lists ...[]Entry) []Entry {
	all := slices.Concat(lists...)
	var out []Entry
	at := map[string]int{}       // base name -> index in out
	owner := map[string]string{} // symbol -> base name
	for _, e := range all {
		if !e.implemented() {
			continue
		}
		for _, s := range e.Symbols {
			if o, ok := owner[s.Name]; ok && o != e.Name {
				panic(fmt.Sprintf("spec: symbol %s is exported by both %s and %s", s.Name, o, e.Name))
			}
			owner[s.Name] = e.Name
		}
		i, ok := at[e.Name]
		if !ok {
			at[e.Name] = len(out)
			e.Symbols = slices.Clone(e.Symbols)
			out = append(out, e)
			continue
		}
		out[i] = mergeEntry(out[i], e)
	}
	var stubs []Entry
	for _, e := range all {
		switch e.Kind {
		case Unsupported:
			_, served := owner[e.Symbols[0].Name]
			if _, named := at[e.Name]; served || named {
				continue
			}
		case LookupOnly:
			_, served := owner[e.Name]
			if _, named := at[e.Name]; served || named || exported(all, e.Name) {
				continue
			}
		default:
			continue
		}
		stubs = append(stubs, e)
	}
	return append(out, stubs...)
}

// mergeEntry joins a later entry of a call into the one already listed:
// the union of their symbols, oldest first, with the later entry's kind,
// prototype and op.
//
// Only a Remote entry's newest symbol is generated from its prototype
// (the others are aliases of it), so a Remote entry cannot take over a
// symbol it does not list: that form has parameters of its own (a _v2
// that takes a context, a per-thread form) and needs a Custom entry.
func mergeEntry(prev, next Entry) Entry {
	syms := prev.Symbols
	if next.Kind == Remote {
		for _, p := range prev.Symbols {
			if !slices.ContainsFunc(next.Symbols, func(s Symbol) bool { return s.Name == p.Name }) {
				panic(fmt.Sprintf("spec: Remote entry %s cannot serve %s, which it does not list; make it Custom", next.Name, p.Name))
			}
		}
	}
	for _, s := range next.Symbols {
		j := slices.IndexFunc(syms, func(p Symbol) bool { return p.Name == s.Name })
		if j < 0 {
			syms = append(syms, s)
			continue
		}
		if syms[j] != s {
			panic(fmt.Sprintf("spec: %s lists symbol %s as %+v and again as %+v", next.Name, s.Name, syms[j], s))
		}
	}
	if next.Kind == Remote {
		next.Symbols = slices.Clone(next.Symbols) // its own order: the last is generated
		return next
	}
	slices.SortStableFunc(syms, func(a, b Symbol) int { return a.Version - b.Version })
	next.Symbols = syms
	return next
}

// exported reports whether an Unsupported entry already exports name
// (cuGetProcAddress finds it under its base name).
func exported(all []Entry, name string) bool {
	for _, e := range all {
		if e.Kind != Unsupported {
			continue
		}
		for _, s := range e.Symbols {
			if s.Name == name || s.Name == name+"_v2" || s.Name == name+"_v3" || s.Name == name+"_v4" {
				return true
			}
		}
	}
	return false
}
