// Run-time binding to NVIDIA's libcuda.so.1: dlopen, dlsym of each entry
// point by its versioned name, and thin wrappers that Go calls through cgo.
#include "api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(CUuuid) == 16, "CUuuid");
_Static_assert(sizeof(CUcheckpointLockArgs) == 64, "CUcheckpointLockArgs");
_Static_assert(sizeof(CUcheckpointCheckpointArgs) == 64, "CUcheckpointCheckpointArgs");
_Static_assert(sizeof(CUcheckpointUnlockArgs) == 64, "CUcheckpointUnlockArgs");
_Static_assert(sizeof(CUcheckpointRestoreArgs) == 64, "CUcheckpointRestoreArgs");
_Static_assert(sizeof(CUcheckpointGpuPair) == 32, "CUcheckpointGpuPair");
_Static_assert(offsetof(CUcheckpointRestoreArgs, gpuPairsCount) == 8, "gpuPairsCount");
_Static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute");
_Static_assert(offsetof(CUlaunchAttribute, value) == 8, "CUlaunchAttribute.value");
_Static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig");
_Static_assert(offsetof(CUlaunchConfig, hStream) == 32, "CUlaunchConfig.hStream");

enum {
	NOT_SUPPORTED = 801,
	INVALID_VALUE = 1,
	LAUNCH_PARAM_END = 0,
	LAUNCH_PARAM_BUFFER_POINTER = 1,
	LAUNCH_PARAM_BUFFER_SIZE = 2,
	JIT_ERROR_LOG_BUFFER = 5,
	JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

// sym resolves the first of up to two names that the library exports. The
// versioned name comes first: the unversioned one keeps its original,
// older ABI for binaries linked long ago.
static void *sym(void *lib, const char *name, const char *fallback)
{
	void *p = dlsym(lib, name);
	if (p == NULL && fallback != NULL)
		p = dlsym(lib, fallback);
	return p;
}

#define REQ(field, name, fallback)                                                       \
	do {                                                                             \
		*(void **)(&a->field) = sym(lib, name, fallback);                        \
		if (a->field == NULL) {                                                  \
			snprintf(err, errlen, "%s does not export %s", path, name);      \
			goto fail;                                                       \
		}                                                                        \
	} while (0)
#define OPT(field, name, fallback) (*(void **)(&a->field) = sym(lib, name, fallback))

gc_api *gc_load(const char *path, char *err, size_t errlen)
{
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL) {
		const char *e = dlerror();
		snprintf(err, errlen, "%s", e ? e : "dlopen failed");
		return NULL;
	}
	gc_api *a = calloc(1, sizeof *a);
	if (a == NULL) {
		snprintf(err, errlen, "out of memory");
		dlclose(lib);
		return NULL;
	}
	a->lib = lib;
	REQ(cuInit, "cuInit", NULL);
	REQ(cuDriverGetVersion, "cuDriverGetVersion", NULL);
	OPT(cuGetErrorString, "cuGetErrorString", NULL);
	REQ(cuDeviceGetCount, "cuDeviceGetCount", NULL);
	REQ(cuDeviceGet, "cuDeviceGet", NULL);
	REQ(cuDeviceGetName, "cuDeviceGetName", NULL);
	REQ(cuDeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid");
	REQ(cuDeviceTotalMem, "cuDeviceTotalMem_v2", NULL);
	REQ(cuDeviceGetAttribute, "cuDeviceGetAttribute", NULL);
	REQ(cuDeviceGetPCIBusId, "cuDeviceGetPCIBusId", NULL);
	REQ(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", NULL);
	REQ(cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", NULL);
	REQ(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset_v2", NULL);
	REQ(cuDevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState", NULL);
	REQ(cuDevicePrimaryCtxSetFlags, "cuDevicePrimaryCtxSetFlags_v2", NULL);
	OPT(cuCtxCreate, "cuCtxCreate_v2", NULL);
	OPT(cuCtxCreate_v4, "cuCtxCreate_v4", NULL);
	if (a->cuCtxCreate == NULL && a->cuCtxCreate_v4 == NULL) {
		snprintf(err, errlen, "%s exports neither cuCtxCreate_v2 nor cuCtxCreate_v4", path);
		goto fail;
	}
	REQ(cuCtxDestroy, "cuCtxDestroy_v2", NULL);
	REQ(cuCtxGetCurrent, "cuCtxGetCurrent", NULL);
	REQ(cuCtxSetCurrent, "cuCtxSetCurrent", NULL);
	REQ(cuCtxSynchronize, "cuCtxSynchronize", NULL);
	REQ(cuMemAlloc, "cuMemAlloc_v2", NULL);
	REQ(cuMemFree, "cuMemFree_v2", NULL);
	REQ(cuMemGetInfo, "cuMemGetInfo_v2", NULL);
	REQ(cuMemHostAlloc, "cuMemHostAlloc", NULL);
	REQ(cuMemFreeHost, "cuMemFreeHost", NULL);
	OPT(cuMemHostRegister, "cuMemHostRegister_v2", "cuMemHostRegister");
	OPT(cuMemHostUnregister, "cuMemHostUnregister", NULL);
	REQ(cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", NULL);
	REQ(cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", NULL);
	REQ(cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", NULL);
	REQ(cuMemsetD8Async, "cuMemsetD8Async", NULL);
	REQ(cuMemsetD16Async, "cuMemsetD16Async", NULL);
	REQ(cuMemsetD32Async, "cuMemsetD32Async", NULL);
	REQ(cuModuleLoadDataEx, "cuModuleLoadDataEx", NULL);
	REQ(cuModuleUnload, "cuModuleUnload", NULL);
	REQ(cuModuleGetFunction, "cuModuleGetFunction", NULL);
	REQ(cuModuleGetGlobal, "cuModuleGetGlobal_v2", NULL);
	REQ(cuFuncGetAttribute, "cuFuncGetAttribute", NULL);
	REQ(cuFuncSetAttribute, "cuFuncSetAttribute", NULL);
	OPT(cuFuncGetParamInfo, "cuFuncGetParamInfo", NULL);
	REQ(cuLaunchKernel, "cuLaunchKernel", NULL);
	OPT(cuLaunchKernelEx, "cuLaunchKernelEx", NULL);
	REQ(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", NULL);
	REQ(cuStreamDestroy, "cuStreamDestroy_v2", NULL);
	REQ(cuStreamQuery, "cuStreamQuery", NULL);
	REQ(cuStreamSynchronize, "cuStreamSynchronize", NULL);
	REQ(cuStreamWaitEvent, "cuStreamWaitEvent", NULL);
	REQ(cuEventCreate, "cuEventCreate", NULL);
	REQ(cuEventDestroy, "cuEventDestroy_v2", NULL);
	REQ(cuEventRecord, "cuEventRecord", NULL);
	REQ(cuEventQuery, "cuEventQuery", NULL);
	REQ(cuEventSynchronize, "cuEventSynchronize", NULL);
	REQ(cuEventElapsedTime, "cuEventElapsedTime_v2", "cuEventElapsedTime");
	OPT(cuCheckpointProcessLock, "cuCheckpointProcessLock", NULL);
	OPT(cuCheckpointProcessCheckpoint, "cuCheckpointProcessCheckpoint", NULL);
	OPT(cuCheckpointProcessRestore, "cuCheckpointProcessRestore", NULL);
	OPT(cuCheckpointProcessUnlock, "cuCheckpointProcessUnlock", NULL);
	OPT(cuCheckpointProcessGetState, "cuCheckpointProcessGetState", NULL);
	return a;
fail:
	dlclose(lib);
	free(a);
	return NULL;
}

// gc_is_interposer tells gpuctl's client library from NVIDIA's driver. The
// client library exports only the compute API it forwards; the driver
// always has graphics interop and texture objects, which a remote
// forwarder never will.
int gc_is_interposer(const gc_api *a)
{
	if (dlsym(a->lib, "gpuctl_interposer_version") != NULL)
		return 1;
	return dlsym(a->lib, "cuGraphicsUnregisterResource") == NULL &&
	       dlsym(a->lib, "cuTexObjectCreate") == NULL;
}

const char *gc_error_string(const gc_api *a, CUresult r)
{
	const char *s = NULL;
	if (a->cuGetErrorString == NULL || a->cuGetErrorString(r, &s) != 0 || s == NULL)
		return "";
	return s;
}

// use makes c current on this thread unless it already is. A NULL c
// leaves the thread as it is.
static CUresult use(const gc_api *a, CUcontext c)
{
	CUcontext cur = NULL;
	CUresult r;
	if (c == NULL)
		return 0;
	r = a->cuCtxGetCurrent(&cur);
	if (r != 0)
		return r;
	if (cur == c)
		return 0;
	return a->cuCtxSetCurrent(c);
}

#define USE(c)                                                                           \
	do {                                                                             \
		CUresult r_ = use(a, (c));                                               \
		if (r_ != 0)                                                             \
			return r_;                                                       \
	} while (0)

CUresult gc_init(const gc_api *a) { return a->cuInit(0); }
CUresult gc_driver_version(const gc_api *a, int *v) { return a->cuDriverGetVersion(v); }
CUresult gc_device_count(const gc_api *a, int *n) { return a->cuDeviceGetCount(n); }
CUresult gc_device_get(const gc_api *a, int ordinal, CUdevice *d) { return a->cuDeviceGet(d, ordinal); }
CUresult gc_device_name(const gc_api *a, CUdevice d, char *buf, int len)
{
	return a->cuDeviceGetName(buf, len, d);
}
CUresult gc_device_uuid(const gc_api *a, CUdevice d, CUuuid *u) { return a->cuDeviceGetUuid(u, d); }
CUresult gc_device_total_mem(const gc_api *a, CUdevice d, size_t *bytes)
{
	return a->cuDeviceTotalMem(bytes, d);
}
CUresult gc_device_attribute(const gc_api *a, CUdevice d, int attr, int *v)
{
	return a->cuDeviceGetAttribute(v, attr, d);
}
CUresult gc_device_pci_bus_id(const gc_api *a, CUdevice d, char *buf, int len)
{
	return a->cuDeviceGetPCIBusId(buf, len, d);
}

CUresult gc_primary_retain(const gc_api *a, CUdevice d, CUcontext *c)
{
	return a->cuDevicePrimaryCtxRetain(c, d);
}
CUresult gc_primary_release(const gc_api *a, CUdevice d) { return a->cuDevicePrimaryCtxRelease(d); }
CUresult gc_primary_reset(const gc_api *a, CUdevice d) { return a->cuDevicePrimaryCtxReset(d); }
CUresult gc_primary_state(const gc_api *a, CUdevice d, unsigned int *flags, int *active)
{
	return a->cuDevicePrimaryCtxGetState(d, flags, active);
}
CUresult gc_primary_set_flags(const gc_api *a, CUdevice d, unsigned int flags)
{
	return a->cuDevicePrimaryCtxSetFlags(d, flags);
}

// gc_ctx_create leaves the new context current; that is harmless because
// every other wrapper names its context explicitly.
CUresult gc_ctx_create(const gc_api *a, CUdevice d, unsigned int flags, CUcontext *c)
{
	if (a->cuCtxCreate != NULL)
		return a->cuCtxCreate(c, flags, d);
	return a->cuCtxCreate_v4(c, NULL, flags, d);
}

// cuCtxDestroy also pops c off this thread's stack when it is current.
CUresult gc_ctx_destroy(const gc_api *a, CUcontext c) { return a->cuCtxDestroy(c); }

CUresult gc_ctx_synchronize(const gc_api *a, CUcontext c)
{
	USE(c);
	return a->cuCtxSynchronize();
}

CUresult gc_mem_alloc(const gc_api *a, CUcontext c, size_t n, CUdeviceptr *p)
{
	USE(c);
	return a->cuMemAlloc(p, n);
}
CUresult gc_mem_free(const gc_api *a, CUcontext c, CUdeviceptr p)
{
	USE(c);
	return a->cuMemFree(p);
}
CUresult gc_mem_info(const gc_api *a, CUcontext c, size_t *free_, size_t *total)
{
	USE(c);
	return a->cuMemGetInfo(free_, total);
}

// Staging buffers are portable pinned memory so that any of the session's
// contexts may copy through them.
CUresult gc_host_alloc(const gc_api *a, CUcontext c, size_t n, void **p)
{
	USE(c);
	return a->cuMemHostAlloc(p, n, 1 /* CU_MEMHOSTALLOC_PORTABLE */);
}
CUresult gc_host_free(const gc_api *a, CUcontext c, void *p)
{
	USE(c);
	return a->cuMemFreeHost(p);
}
CUresult gc_host_register(const gc_api *a, CUcontext c, void *p, size_t n)
{
	if (a->cuMemHostRegister == NULL || a->cuMemHostUnregister == NULL)
		return NOT_SUPPORTED;
	USE(c);
	return a->cuMemHostRegister(p, n, 1 /* CU_MEMHOSTREGISTER_PORTABLE */);
}
CUresult gc_host_unregister(const gc_api *a, CUcontext c, void *p)
{
	if (a->cuMemHostUnregister == NULL)
		return NOT_SUPPORTED;
	USE(c);
	return a->cuMemHostUnregister(p);
}

// gc_htod and gc_dtoh queue one chunk of a staged copy and record done
// after it, in one call.
CUresult gc_htod(const gc_api *a, CUcontext c, CUdeviceptr dst, const void *src, size_t n,
		 CUstream s, CUevent done)
{
	CUresult r;
	USE(c);
	r = a->cuMemcpyHtoDAsync(dst, src, n, s);
	if (r != 0)
		return r;
	return a->cuEventRecord(done, s);
}
CUresult gc_dtoh(const gc_api *a, CUcontext c, void *dst, CUdeviceptr src, size_t n,
		 CUstream s, CUevent done)
{
	CUresult r;
	USE(c);
	r = a->cuMemcpyDtoHAsync(dst, src, n, s);
	if (r != 0)
		return r;
	return a->cuEventRecord(done, s);
}
CUresult gc_dtod(const gc_api *a, CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n,
		 CUstream s)
{
	USE(c);
	return a->cuMemcpyDtoDAsync(dst, src, n, s);
}
CUresult gc_memset(const gc_api *a, CUcontext c, CUdeviceptr dst, unsigned int value,
		   int elem, size_t count, CUstream s)
{
	USE(c);
	switch (elem) {
	case 1:
		return a->cuMemsetD8Async(dst, (unsigned char)value, count, s);
	case 2:
		return a->cuMemsetD16Async(dst, (unsigned short)value, count, s);
	case 4:
		return a->cuMemsetD32Async(dst, value, count, s);
	}
	return INVALID_VALUE;
}

// gc_module_load asks the JIT for its error log so that a PTX that does
// not compile reaches the log with the compiler's reason.
CUresult gc_module_load(const gc_api *a, CUcontext c, const void *image, CUmodule *m,
			char *log, size_t loglen)
{
	int opts[2] = {JIT_ERROR_LOG_BUFFER, JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {log, (void *)(uintptr_t)loglen};
	USE(c);
	if (loglen > 0)
		log[0] = 0;
	return a->cuModuleLoadDataEx(m, image, loglen > 0 ? 2 : 0, opts, vals);
}
CUresult gc_module_unload(const gc_api *a, CUcontext c, CUmodule m)
{
	USE(c);
	return a->cuModuleUnload(m);
}
CUresult gc_module_function(const gc_api *a, CUcontext c, CUmodule m, const char *name,
			    CUfunction *f)
{
	USE(c);
	return a->cuModuleGetFunction(f, m, name);
}
CUresult gc_module_global(const gc_api *a, CUcontext c, CUmodule m, const char *name,
			  CUdeviceptr *p, size_t *n)
{
	USE(c);
	return a->cuModuleGetGlobal(p, n, m, name);
}
CUresult gc_func_param_info(const gc_api *a, CUcontext c, CUfunction f, size_t i,
			    size_t *off, size_t *size)
{
	if (a->cuFuncGetParamInfo == NULL)
		return NOT_SUPPORTED;
	USE(c);
	return a->cuFuncGetParamInfo(f, i, off, size);
}
CUresult gc_func_get_attribute(const gc_api *a, CUcontext c, CUfunction f, int attr, int *v)
{
	USE(c);
	return a->cuFuncGetAttribute(v, attr, f);
}
CUresult gc_func_set_attribute(const gc_api *a, CUcontext c, CUfunction f, int attr, int v)
{
	USE(c);
	return a->cuFuncSetAttribute(f, attr, v);
}

// gc_launch passes the client's packed parameter buffer as is, through
// the CU_LAUNCH_PARAM_BUFFER_POINTER extra; the driver copies it before
// returning.
CUresult gc_launch(const gc_api *a, CUcontext c, CUfunction f, const unsigned int *grid,
		   const unsigned int *block, unsigned int shared, CUstream s,
		   void *params, size_t size)
{
	void *extra[5] = {(void *)(uintptr_t)LAUNCH_PARAM_BUFFER_POINTER, params,
			  (void *)(uintptr_t)LAUNCH_PARAM_BUFFER_SIZE, &size,
			  (void *)(uintptr_t)LAUNCH_PARAM_END};
	USE(c);
	return a->cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2],
				 shared, s, NULL, size > 0 ? extra : NULL);
}

enum { LAUNCH_ATTRIBUTE_COOPERATIVE = 2, LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4 };

CUresult gc_launch_ex(const gc_api *a, CUcontext c, CUfunction f, const unsigned int *grid,
		      const unsigned int *block, unsigned int shared, CUstream s, void *params,
		      size_t size, const unsigned int *cluster, int cooperative)
{
	void *extra[5] = {(void *)(uintptr_t)LAUNCH_PARAM_BUFFER_POINTER, params,
			  (void *)(uintptr_t)LAUNCH_PARAM_BUFFER_SIZE, &size,
			  (void *)(uintptr_t)LAUNCH_PARAM_END};
	CUlaunchAttribute attrs[2];
	CUlaunchConfig cfg = {grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, s, attrs, 0};
	USE(c);
	if (a->cuLaunchKernelEx == NULL)
		return 801; // CUDA_ERROR_NOT_SUPPORTED: a driver older than 11.8
	memset(attrs, 0, sizeof attrs);
	if ((uint64_t)cluster[0] * cluster[1] * cluster[2] > 1) {
		attrs[cfg.numAttrs].id = LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		attrs[cfg.numAttrs].value.clusterDim.x = cluster[0];
		attrs[cfg.numAttrs].value.clusterDim.y = cluster[1];
		attrs[cfg.numAttrs].value.clusterDim.z = cluster[2];
		cfg.numAttrs++;
	}
	if (cooperative) {
		attrs[cfg.numAttrs].id = LAUNCH_ATTRIBUTE_COOPERATIVE;
		attrs[cfg.numAttrs].value.cooperative = 1;
		cfg.numAttrs++;
	}
	return a->cuLaunchKernelEx(&cfg, f, NULL, size > 0 ? extra : NULL);
}

CUresult gc_stream_create(const gc_api *a, CUcontext c, unsigned int flags, int prio,
			  CUstream *s)
{
	USE(c);
	return a->cuStreamCreateWithPriority(s, flags, prio);
}
CUresult gc_stream_destroy(const gc_api *a, CUcontext c, CUstream s)
{
	USE(c);
	return a->cuStreamDestroy(s);
}
CUresult gc_stream_query(const gc_api *a, CUcontext c, CUstream s)
{
	USE(c);
	return a->cuStreamQuery(s);
}
CUresult gc_stream_synchronize(const gc_api *a, CUcontext c, CUstream s)
{
	USE(c);
	return a->cuStreamSynchronize(s);
}
CUresult gc_stream_wait_event(const gc_api *a, CUcontext c, CUstream s, CUevent e,
			      unsigned int flags)
{
	USE(c);
	return a->cuStreamWaitEvent(s, e, flags);
}
CUresult gc_event_create(const gc_api *a, CUcontext c, unsigned int flags, CUevent *e)
{
	USE(c);
	return a->cuEventCreate(e, flags);
}
CUresult gc_event_destroy(const gc_api *a, CUcontext c, CUevent e)
{
	USE(c);
	return a->cuEventDestroy(e);
}
CUresult gc_event_record(const gc_api *a, CUcontext c, CUevent e, CUstream s)
{
	USE(c);
	return a->cuEventRecord(e, s);
}
CUresult gc_event_query(const gc_api *a, CUcontext c, CUevent e)
{
	USE(c);
	return a->cuEventQuery(e);
}
CUresult gc_event_synchronize(const gc_api *a, CUcontext c, CUevent e)
{
	USE(c);
	return a->cuEventSynchronize(e);
}
CUresult gc_event_elapsed(const gc_api *a, CUcontext c, CUevent start, CUevent end, float *ms)
{
	USE(c);
	return a->cuEventElapsedTime(ms, start, end);
}

CUresult gc_ckpt_lock(const gc_api *a, int pid, unsigned int timeout_ms)
{
	CUcheckpointLockArgs args;
	if (a->cuCheckpointProcessLock == NULL)
		return NOT_SUPPORTED;
	memset(&args, 0, sizeof args);
	args.timeoutMs = timeout_ms;
	return a->cuCheckpointProcessLock(pid, &args);
}
CUresult gc_ckpt_checkpoint(const gc_api *a, int pid)
{
	CUcheckpointCheckpointArgs args;
	if (a->cuCheckpointProcessCheckpoint == NULL)
		return NOT_SUPPORTED;
	memset(&args, 0, sizeof args);
	return a->cuCheckpointProcessCheckpoint(pid, &args);
}
CUresult gc_ckpt_restore(const gc_api *a, int pid, const CUuuid *from, const CUuuid *to,
			 unsigned int n)
{
	CUcheckpointRestoreArgs args;
	CUcheckpointGpuPair *pairs = NULL;
	CUresult r;
	if (a->cuCheckpointProcessRestore == NULL)
		return NOT_SUPPORTED;
	memset(&args, 0, sizeof args);
	if (n > 0) {
		pairs = calloc(n, sizeof *pairs);
		if (pairs == NULL)
			return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
		for (unsigned int i = 0; i < n; i++) {
			pairs[i].oldUuid = from[i];
			pairs[i].newUuid = to[i];
		}
		args.gpuPairs = pairs;
		args.gpuPairsCount = n;
	}
	r = a->cuCheckpointProcessRestore(pid, &args);
	free(pairs);
	return r;
}
CUresult gc_ckpt_unlock(const gc_api *a, int pid)
{
	CUcheckpointUnlockArgs args;
	if (a->cuCheckpointProcessUnlock == NULL)
		return NOT_SUPPORTED;
	memset(&args, 0, sizeof args);
	return a->cuCheckpointProcessUnlock(pid, &args);
}
CUresult gc_ckpt_state(const gc_api *a, int pid, int *state)
{
	if (a->cuCheckpointProcessGetState == NULL)
		return NOT_SUPPORTED;
	return a->cuCheckpointProcessGetState(pid, state);
}
