package spec

import "slices"

// runtimeEntries are the calls the CUDA runtime (cudart, static or shared,
// and the copies inside cuBLAS, cuBLASLt and cuDNN) makes beyond the core
// driver API: export tables, libraries and kernels, occupancy, the CUDA
// 13 context-taking forms and the per-thread-default-stream forms that
// cuGetProcAddress hands out. All are hand-written in
// remoting/interposer/src (gc_export.c, gc_runtime.c).
var runtimeEntries = append([]Entry{
	custom("cuGetExportTable"),

	// Primary contexts, also tracked in the client: their flags, and the
	// context-local storage whose destructors run when one goes away.
	custom("cuDevicePrimaryCtxRetain", sym("cuDevicePrimaryCtxRetain", 7000)),
	custom("cuDevicePrimaryCtxRelease", sym("cuDevicePrimaryCtxRelease", 7000), sym("cuDevicePrimaryCtxRelease_v2", 11000)),
	custom("cuDevicePrimaryCtxReset", sym("cuDevicePrimaryCtxReset", 7000), sym("cuDevicePrimaryCtxReset_v2", 11000)),

	// CUDA 13 gives these a context argument; cudart asks for them at 13000.
	custom("cuCtxGetDevice", sym("cuCtxGetDevice_v2", 13000)),
	custom("cuCtxSynchronize", sym("cuCtxSynchronize_v2", 13000)),

	// Context state answered in the client.
	custom("cuCtxGetFlags", sym("cuCtxGetFlags", 7000)),
	custom("cuCtxGetLimit", sym("cuCtxGetLimit", 3010)),
	custom("cuCtxSetLimit", sym("cuCtxSetLimit", 3010)),
	custom("cuCtxGetId", sym("cuCtxGetId", 12000)),
	custom("cuCtxGetCacheConfig", sym("cuCtxGetCacheConfig", 3020)),
	custom("cuCtxSetCacheConfig", sym("cuCtxSetCacheConfig", 3020)),

	// Pointers and mapped host memory.
	custom("cuPointerGetAttributes", sym("cuPointerGetAttributes", 7000)),
	custom("cuMemHostGetDevicePointer", sym("cuMemHostGetDevicePointer_v2", 3020)),

	// Modules, libraries and kernels (lazy loading).
	custom("cuModuleGetLoadingMode", sym("cuModuleGetLoadingMode", 11070)),
	custom("cuLibraryLoadData", sym("cuLibraryLoadData", 12000)),
	custom("cuLibraryLoadFromFile", sym("cuLibraryLoadFromFile", 12000)),
	custom("cuLibraryUnload", sym("cuLibraryUnload", 12000)),
	custom("cuLibraryGetKernel", sym("cuLibraryGetKernel", 12000)),
	custom("cuLibraryGetModule", sym("cuLibraryGetModule", 12000)),
	custom("cuLibraryGetGlobal", sym("cuLibraryGetGlobal", 12000)),
	custom("cuKernelGetFunction", sym("cuKernelGetFunction", 12000)),
	custom("cuKernelGetAttribute", sym("cuKernelGetAttribute", 12000)),
	custom("cuKernelSetAttribute", sym("cuKernelSetAttribute", 12000)),
	custom("cuKernelSetCacheConfig", sym("cuKernelSetCacheConfig", 12000)),
	custom("cuKernelGetName", sym("cuKernelGetName", 12030)),
	custom("cuKernelGetLibrary", sym("cuKernelGetLibrary", 12050)),
	custom("cuFuncGetAttribute", sym("cuFuncGetAttribute", 2020)),
	custom("cuFuncSetAttribute", sym("cuFuncSetAttribute", 9000)),
	custom("cuFuncSetCacheConfig", sym("cuFuncSetCacheConfig", 3000)),
	custom("cuFuncGetName", sym("cuFuncGetName", 12030)),
	custom("cuFuncGetModule", sym("cuFuncGetModule", 11000)),
	custom("cuLinkCreate", sym("cuLinkCreate_v2", 6050)),
	custom("cuLinkAddData", sym("cuLinkAddData_v2", 6050)),
	custom("cuLinkAddFile", sym("cuLinkAddFile_v2", 6050)),
	custom("cuLinkComplete", sym("cuLinkComplete", 5050)),
	custom("cuLinkDestroy", sym("cuLinkDestroy", 5050)),

	// Launches and occupancy.
	custom("cuLaunchKernelEx", sym("cuLaunchKernelEx", 11060), ptsym("cuLaunchKernelEx_ptsz", 11060)),
	custom("cuOccupancyMaxActiveBlocksPerMultiprocessor", sym("cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050)),
	custom("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags",
		sym("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000)),
	custom("cuOccupancyMaxPotentialBlockSize", sym("cuOccupancyMaxPotentialBlockSize", 6050)),
	custom("cuOccupancyMaxPotentialBlockSizeWithFlags", sym("cuOccupancyMaxPotentialBlockSizeWithFlags", 7000)),
	custom("cuOccupancyAvailableDynamicSMemPerBlock", sym("cuOccupancyAvailableDynamicSMemPerBlock", 10020)),
	custom("cuOccupancyMaxActiveClusters", sym("cuOccupancyMaxActiveClusters", 11070)),
	custom("cuOccupancyMaxPotentialClusterSize", sym("cuOccupancyMaxPotentialClusterSize", 11070)),

	// Per-thread-default-stream forms (flag 2 of cuGetProcAddress).
	custom("cuLaunchKernel", ptsym("cuLaunchKernel_ptsz", 7000)),
	custom("cuMemcpy", ptsym("cuMemcpy_ptds", 7000)),
	custom("cuMemcpyAsync", ptsym("cuMemcpyAsync_ptsz", 7000)),
	custom("cuMemcpyHtoD", ptsym("cuMemcpyHtoD_v2_ptds", 7000)),
	custom("cuMemcpyDtoH", ptsym("cuMemcpyDtoH_v2_ptds", 7000)),
	custom("cuMemcpyDtoD", ptsym("cuMemcpyDtoD_v2_ptds", 7000)),
	custom("cuMemcpyHtoDAsync", ptsym("cuMemcpyHtoDAsync_v2_ptsz", 7000)),
	custom("cuMemcpyDtoHAsync", ptsym("cuMemcpyDtoHAsync_v2_ptsz", 7000)),
	custom("cuMemcpyDtoDAsync", ptsym("cuMemcpyDtoDAsync_v2_ptsz", 7000)),
	custom("cuMemsetD8", ptsym("cuMemsetD8_v2_ptds", 7000)),
	custom("cuMemsetD16", ptsym("cuMemsetD16_v2_ptds", 7000)),
	custom("cuMemsetD32", ptsym("cuMemsetD32_v2_ptds", 7000)),
	custom("cuMemsetD8Async", ptsym("cuMemsetD8Async_ptsz", 7000)),
	custom("cuMemsetD16Async", ptsym("cuMemsetD16Async_ptsz", 7000)),
	custom("cuMemsetD32Async", ptsym("cuMemsetD32Async_ptsz", 7000)),
	custom("cuStreamQuery", ptsym("cuStreamQuery_ptsz", 7000)),
	custom("cuStreamSynchronize", ptsym("cuStreamSynchronize_ptsz", 7000)),
	custom("cuStreamWaitEvent", ptsym("cuStreamWaitEvent_ptsz", 7000)),
	custom("cuEventRecord", ptsym("cuEventRecord_ptsz", 7000)),
	custom("cuEventRecordWithFlags", ptsym("cuEventRecordWithFlags_ptsz", 11010)),
},
	// Every other name CUDA 13's cudart, cuBLAS, cuBLASLt, cuDNN and
	// PyTorch look up (../shared/traces/cuda13): cuGetProcAddress hands
	// out a logging stub instead of failing the look-up.
	lookupOnly(
		"0", "cuArray3DCreate", "cuArray3DGetDescriptor", "cuArrayCreate", "cuArrayDestroy", "cuArrayGetDescriptor",
		"cuArrayGetMemoryRequirements", "cuArrayGetPlane", "cuArrayGetSparseProperties", "cuCtxCreate", "cuCtxDetach",
		"cuCtxDisablePeerAccess", "cuCtxEnablePeerAccess", "cuCtxFromGreenCtx", "cuCtxGetApiVersion",
		"cuCtxGetCacheConfig", "cuCtxGetCurrent", "cuCtxGetDevResource", "cuCtxGetDevice", "cuCtxGetFlags", "cuCtxGetId",
		"cuCtxGetLimit", "cuCtxGetSharedMemConfig", "cuCtxGetStreamPriorityRange", "cuCtxPopCurrent", "cuCtxPushCurrent",
		"cuCtxRecordEvent", "cuCtxResetPersistingL2Cache", "cuCtxSetCacheConfig", "cuCtxSetCurrent", "cuCtxSetLimit",
		"cuCtxSetSharedMemConfig", "cuCtxSynchronize", "cuCtxWaitEvent", "cuDestroyExternalMemory",
		"cuDestroyExternalSemaphore", "cuDevResourceGenerateDesc", "cuDevSmResourceSplitByCount", "cuDeviceCanAccessPeer",
		"cuDeviceGet", "cuDeviceGetAttribute", "cuDeviceGetByPCIBusId", "cuDeviceGetCount", "cuDeviceGetDefaultMemPool",
		"cuDeviceGetDevResource", "cuDeviceGetGraphMemAttribute", "cuDeviceGetHostAtomicCapabilities",
		"cuDeviceGetMemPool", "cuDeviceGetName", "cuDeviceGetNvSciSyncAttributes", "cuDeviceGetP2PAtomicCapabilities",
		"cuDeviceGetP2PAttribute", "cuDeviceGetPCIBusId", "cuDeviceGetTexture1DLinearMaxWidth", "cuDeviceGetUuid",
		"cuDeviceGraphMemTrim", "cuDevicePrimaryCtxGetState", "cuDevicePrimaryCtxRelease", "cuDevicePrimaryCtxReset",
		"cuDevicePrimaryCtxRetain", "cuDevicePrimaryCtxSetFlags", "cuDeviceRegisterAsyncNotification",
		"cuDeviceSetGraphMemAttribute", "cuDeviceSetMemPool", "cuDeviceTotalMem", "cuDeviceUnregisterAsyncNotification",
		"cuDriverGetVersion", "cuEGLStreamConsumerAcquireFrame", "cuEGLStreamConsumerConnect",
		"cuEGLStreamConsumerConnectWithFlags", "cuEGLStreamConsumerDisconnect", "cuEGLStreamConsumerReleaseFrame",
		"cuEGLStreamProducerConnect", "cuEGLStreamProducerDisconnect", "cuEGLStreamProducerPresentFrame",
		"cuEGLStreamProducerReturnFrame", "cuEventCreate", "cuEventDestroy", "cuEventElapsedTime", "cuEventQuery",
		"cuEventRecord", "cuEventRecordWithFlags", "cuEventSynchronize", "cuExternalMemoryGetMappedBuffer",
		"cuExternalMemoryGetMappedMipmappedArray", "cuFlushGPUDirectRDMAWrites", "cuFuncGetAttribute", "cuFuncGetName",
		"cuFuncGetParamInfo", "cuFuncSetAttribute", "cuFuncSetCacheConfig", "cuFuncSetSharedMemConfig", "cuGLCtxCreate",
		"cuGLGetDevices", "cuGLInit", "cuGLMapBufferObject", "cuGLMapBufferObjectAsync", "cuGLRegisterBufferObject",
		"cuGLSetBufferObjectMapFlags", "cuGLUnmapBufferObject", "cuGLUnmapBufferObjectAsync", "cuGLUnregisterBufferObject",
		"cuGetErrorName", "cuGetErrorString", "cuGetExportTable", "cuGetProcAddress", "cuGraphAddChildGraphNode",
		"cuGraphAddDependencies", "cuGraphAddEmptyNode", "cuGraphAddEventRecordNode", "cuGraphAddEventWaitNode",
		"cuGraphAddExternalSemaphoresSignalNode", "cuGraphAddExternalSemaphoresWaitNode", "cuGraphAddHostNode",
		"cuGraphAddKernelNode", "cuGraphAddMemAllocNode", "cuGraphAddMemFreeNode", "cuGraphAddMemcpyNode",
		"cuGraphAddMemsetNode", "cuGraphAddNode", "cuGraphChildGraphNodeGetGraph", "cuGraphClone",
		"cuGraphConditionalHandleCreate", "cuGraphCreate", "cuGraphDebugDotPrint", "cuGraphDestroy", "cuGraphDestroyNode",
		"cuGraphEventRecordNodeGetEvent", "cuGraphEventRecordNodeSetEvent", "cuGraphEventWaitNodeGetEvent",
		"cuGraphEventWaitNodeSetEvent", "cuGraphExecChildGraphNodeSetParams", "cuGraphExecDestroy",
		"cuGraphExecEventRecordNodeSetEvent", "cuGraphExecEventWaitNodeSetEvent",
		"cuGraphExecExternalSemaphoresSignalNodeSetParams", "cuGraphExecExternalSemaphoresWaitNodeSetParams",
		"cuGraphExecGetFlags", "cuGraphExecHostNodeSetParams", "cuGraphExecKernelNodeSetParams",
		"cuGraphExecMemcpyNodeSetParams", "cuGraphExecMemsetNodeSetParams", "cuGraphExecNodeSetParams",
		"cuGraphExecUpdate", "cuGraphExternalSemaphoresSignalNodeGetParams",
		"cuGraphExternalSemaphoresSignalNodeSetParams", "cuGraphExternalSemaphoresWaitNodeGetParams",
		"cuGraphExternalSemaphoresWaitNodeSetParams", "cuGraphGetEdges", "cuGraphGetNodes", "cuGraphGetRootNodes",
		"cuGraphHostNodeGetParams", "cuGraphHostNodeSetParams", "cuGraphInstantiate", "cuGraphInstantiateWithFlags",
		"cuGraphInstantiateWithParams", "cuGraphKernelNodeCopyAttributes", "cuGraphKernelNodeGetAttribute",
		"cuGraphKernelNodeGetParams", "cuGraphKernelNodeSetAttribute", "cuGraphKernelNodeSetParams", "cuGraphLaunch",
		"cuGraphMemAllocNodeGetParams", "cuGraphMemFreeNodeGetParams", "cuGraphMemcpyNodeGetParams",
		"cuGraphMemcpyNodeSetParams", "cuGraphMemsetNodeGetParams", "cuGraphMemsetNodeSetParams", "cuGraphNodeFindInClone",
		"cuGraphNodeGetDependencies", "cuGraphNodeGetDependentNodes", "cuGraphNodeGetEnabled", "cuGraphNodeGetType",
		"cuGraphNodeSetEnabled", "cuGraphNodeSetParams", "cuGraphReleaseUserObject", "cuGraphRemoveDependencies",
		"cuGraphRetainUserObject", "cuGraphUpload", "cuGraphicsEGLRegisterImage", "cuGraphicsGLRegisterBuffer",
		"cuGraphicsGLRegisterImage", "cuGraphicsMapResources", "cuGraphicsResourceGetMappedEglFrame",
		"cuGraphicsResourceGetMappedMipmappedArray", "cuGraphicsResourceGetMappedPointer", "cuGraphicsResourceSetMapFlags",
		"cuGraphicsSubResourceGetMappedArray", "cuGraphicsUnmapResources", "cuGraphicsUnregisterResource",
		"cuGraphicsVDPAURegisterOutputSurface", "cuGraphicsVDPAURegisterVideoSurface", "cuGreenCtxCreate",
		"cuGreenCtxDestroy", "cuGreenCtxGetDevResource", "cuGreenCtxGetId", "cuGreenCtxRecordEvent",
		"cuGreenCtxStreamCreate", "cuGreenCtxWaitEvent", "cuImportExternalMemory", "cuImportExternalSemaphore", "cuInit",
		"cuIpcCloseMemHandle", "cuIpcGetEventHandle", "cuIpcGetMemHandle", "cuIpcOpenEventHandle", "cuIpcOpenMemHandle",
		"cuKernelGetAttribute", "cuKernelGetFunction", "cuKernelGetLibrary", "cuKernelGetName", "cuKernelGetParamInfo",
		"cuKernelSetAttribute", "cuKernelSetCacheConfig", "cuLaunchCooperativeKernel", "cuLaunchHostFunc",
		"cuLaunchKernel", "cuLaunchKernelEx", "cuLibraryEnumerateKernels", "cuLibraryGetGlobal", "cuLibraryGetKernel",
		"cuLibraryGetKernelCount", "cuLibraryGetManaged", "cuLibraryGetModule", "cuLibraryGetUnifiedFunction",
		"cuLibraryLoadData", "cuLibraryLoadFromFile", "cuLibraryUnload", "cuLinkAddData", "cuLinkAddFile",
		"cuLinkComplete", "cuLinkCreate", "cuLinkDestroy", "cuLogsCurrent", "cuLogsDumpToFile", "cuLogsDumpToMemory",
		"cuLogsRegisterCallback", "cuLogsUnregisterCallback", "cuMemAdvise", "cuMemAlloc", "cuMemAllocAsync",
		"cuMemAllocFromPoolAsync", "cuMemAllocManaged", "cuMemAllocPitch", "cuMemDiscardAndPrefetchBatchAsync",
		"cuMemDiscardBatchAsync", "cuMemFree", "cuMemFreeAsync", "cuMemFreeHost", "cuMemGetAddressRange",
		"cuMemGetDefaultMemPool", "cuMemGetInfo", "cuMemGetMemPool", "cuMemHostAlloc", "cuMemHostGetDevicePointer",
		"cuMemHostGetFlags", "cuMemHostRegister", "cuMemHostUnregister", "cuMemPoolCreate", "cuMemPoolDestroy",
		"cuMemPoolExportPointer", "cuMemPoolExportToShareableHandle", "cuMemPoolGetAccess", "cuMemPoolGetAttribute",
		"cuMemPoolImportFromShareableHandle", "cuMemPoolImportPointer", "cuMemPoolSetAccess", "cuMemPoolSetAttribute",
		"cuMemPoolTrimTo", "cuMemPrefetchAsync", "cuMemPrefetchBatchAsync", "cuMemRangeGetAttribute",
		"cuMemRangeGetAttributes", "cuMemSetMemPool", "cuMemcpy", "cuMemcpy2DAsync", "cuMemcpy2DUnaligned", "cuMemcpy3D",
		"cuMemcpy3DAsync", "cuMemcpy3DBatchAsync", "cuMemcpy3DPeer", "cuMemcpy3DPeerAsync", "cuMemcpyAsync",
		"cuMemcpyBatchAsync", "cuMemcpyDtoD", "cuMemcpyDtoDAsync", "cuMemcpyDtoH", "cuMemcpyDtoHAsync", "cuMemcpyHtoD",
		"cuMemcpyHtoDAsync", "cuMemcpyPeer", "cuMemcpyPeerAsync", "cuMemsetD2D8", "cuMemsetD2D8Async", "cuMemsetD8",
		"cuMemsetD8Async", "cuMipmappedArrayCreate", "cuMipmappedArrayDestroy", "cuMipmappedArrayGetLevel",
		"cuMipmappedArrayGetMemoryRequirements", "cuMipmappedArrayGetSparseProperties", "cuModuleGetFunction",
		"cuModuleGetGlobal", "cuModuleGetLoadingMode", "cuModuleGetSurfRef", "cuModuleGetTexRef", "cuModuleLoad",
		"cuModuleLoadData", "cuModuleLoadDataEx", "cuModuleLoadFatBinary", "cuModuleUnload",
		"cuOccupancyAvailableDynamicSMemPerBlock", "cuOccupancyMaxActiveBlocksPerMultiprocessor",
		"cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", "cuOccupancyMaxActiveClusters",
		"cuOccupancyMaxPotentialClusterSize", "cuPointerGetAttribute", "cuPointerGetAttributes", "cuProfilerInitialize",
		"cuProfilerStart", "cuProfilerStop", "cuSignalExternalSemaphoresAsync", "cuStreamAddCallback",
		"cuStreamAttachMemAsync", "cuStreamBatchMemOp", "cuStreamBeginCapture", "cuStreamBeginCaptureToGraph",
		"cuStreamCopyAttributes", "cuStreamCreate", "cuStreamCreateWithPriority", "cuStreamDestroy", "cuStreamEndCapture",
		"cuStreamGetAttribute", "cuStreamGetCaptureInfo", "cuStreamGetCtx", "cuStreamGetDevice", "cuStreamGetFlags",
		"cuStreamGetId", "cuStreamGetPriority", "cuStreamIsCapturing", "cuStreamQuery", "cuStreamSetAttribute",
		"cuStreamSynchronize", "cuStreamUpdateCaptureDependencies", "cuStreamWaitEvent", "cuStreamWaitValue32",
		"cuStreamWaitValue64", "cuStreamWriteValue32", "cuStreamWriteValue64", "cuSurfObjectCreate", "cuSurfObjectDestroy",
		"cuSurfObjectGetResourceDesc", "cuTensorMapEncodeTiled", "cuTexObjectCreate", "cuTexObjectDestroy",
		"cuTexObjectGetResourceDesc", "cuTexObjectGetResourceViewDesc", "cuTexObjectGetTextureDesc",
		"cuThreadExchangeStreamCaptureMode", "cuUserObjectCreate", "cuUserObjectRelease", "cuUserObjectRetain",
		"cuVDPAUCtxCreate", "cuVDPAUGetDevice", "cuWaitExternalSemaphoresAsync",
	)...)

func lookupOnly(names ...string) []Entry {
	var es []Entry
	for _, n := range names {
		es = append(es, Entry{Name: n, Symbols: []Symbol{sym(n, 2000)}, Kind: LookupOnly})
	}
	return es
}

// resolveEntries concatenates entry lists. An implemented entry whose
// symbols a later list implements again is replaced by the later one (the
// runtime's cached cuFuncGetAttribute replaces the core's forwarding
// one). An entry that is only a stub
// (Unsupported, LookupOnly) is dropped when an implemented entry exports
// the same symbol or serves the same base name, so the lists can grow
// independently: implementing a call is adding its entry, never editing
// a stub list.
func resolveEntries(lists ...[]Entry) []Entry {
	all := slices.Concat(lists...)
	served, names := map[string]bool{}, map[string]bool{}
	for _, e := range all {
		if e.Kind == Unsupported || e.Kind == LookupOnly {
			continue
		}
		names[e.Name] = true
		for _, s := range e.Symbols {
			served[s.Name] = true
		}
	}
	last := map[string]int{}
	for i, e := range all {
		if e.Kind != Unsupported && e.Kind != LookupOnly {
			for _, s := range e.Symbols {
				last[s.Name] = i
			}
		}
	}
	var out []Entry
	for i, e := range all {
		switch e.Kind {
		case Remote, Custom, Local:
			replaced := true
			for _, s := range e.Symbols {
				if last[s.Name] == i {
					replaced = false
				}
			}
			if replaced {
				continue
			}
		case Unsupported:
			if served[e.Symbols[0].Name] {
				continue
			}
		case LookupOnly:
			if names[e.Name] || served[e.Name] || exported(all, e.Name) {
				continue
			}
		}
		out = append(out, e)
	}
	return out
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
