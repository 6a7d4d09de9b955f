// The slice of the CUDA driver API this package calls, declared here rather
// than taken from NVIDIA's cuda.h so that the package builds on machines
// without CUDA. Every entry point is resolved at run time with dlsym; the
// types below are ABI-identical to cuda.h's (CUDA 12.8 to 13.x), and
// api.c checks the struct sizes at compile time.
#ifndef GPUCTL_CUDA_API_H
#define GPUCTL_CUDA_API_H

#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct { char bytes[16]; } CUuuid;

// Driver checkpoint API (CUDA 12.8+; GPU pairs since 12.9).
typedef struct {
	unsigned int timeoutMs;
	unsigned int reserved0;
	uint64_t reserved1[7];
} CUcheckpointLockArgs;
typedef struct { uint64_t reserved[8]; } CUcheckpointCheckpointArgs;
typedef struct { uint64_t reserved[8]; } CUcheckpointUnlockArgs;
typedef struct {
	CUuuid oldUuid;
	CUuuid newUuid;
} CUcheckpointGpuPair;
typedef struct {
	CUcheckpointGpuPair *gpuPairs;
	unsigned int gpuPairsCount;
	char reserved[44];
	uint64_t reserved1;
} CUcheckpointRestoreArgs;

// cuLaunchKernelEx's configuration (CUDA 11.8+), with the two attribute
// values gpuctl passes on.
typedef struct {
	int id;
	char pad[4];
	union {
		char pad[64];
		int cooperative;
		struct {
			unsigned int x, y, z;
		} clusterDim;
	} value;
} CUlaunchAttribute;
typedef struct {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	CUlaunchAttribute *attrs;
	unsigned int numAttrs;
} CUlaunchConfig;

// gc_api holds the resolved entry points. Optional ones may be NULL; the
// wrappers then return CUDA_ERROR_NOT_SUPPORTED (801).
typedef struct {
	void *lib;
	CUresult (*cuInit)(unsigned int);
	CUresult (*cuDriverGetVersion)(int *);
	CUresult (*cuGetErrorString)(CUresult, const char **);
	CUresult (*cuDeviceGetCount)(int *);
	CUresult (*cuDeviceGet)(CUdevice *, int);
	CUresult (*cuDeviceGetName)(char *, int, CUdevice);
	CUresult (*cuDeviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*cuDeviceTotalMem)(size_t *, CUdevice);
	CUresult (*cuDeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*cuDeviceGetPCIBusId)(char *, int, CUdevice);
	CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
	CUresult (*cuDevicePrimaryCtxReset)(CUdevice);
	CUresult (*cuDevicePrimaryCtxGetState)(CUdevice, unsigned int *, int *);
	CUresult (*cuDevicePrimaryCtxSetFlags)(CUdevice, unsigned int);
	CUresult (*cuCtxCreate)(CUcontext *, unsigned int, CUdevice);
	CUresult (*cuCtxCreate_v4)(CUcontext *, void *, unsigned int, CUdevice);
	CUresult (*cuCtxDestroy)(CUcontext);
	CUresult (*cuCtxGetCurrent)(CUcontext *);
	CUresult (*cuCtxSetCurrent)(CUcontext);
	CUresult (*cuCtxSynchronize)(void);
	CUresult (*cuMemAlloc)(CUdeviceptr *, size_t);
	CUresult (*cuMemFree)(CUdeviceptr);
	CUresult (*cuMemGetInfo)(size_t *, size_t *);
	CUresult (*cuMemHostAlloc)(void **, size_t, unsigned int);
	CUresult (*cuMemFreeHost)(void *);
	CUresult (*cuMemHostRegister)(void *, size_t, unsigned int);   // optional
	CUresult (*cuMemHostUnregister)(void *);                       // optional
	CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
	CUresult (*cuMemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
	CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
	CUresult (*cuMemsetD16Async)(CUdeviceptr, unsigned short, size_t, CUstream);
	CUresult (*cuMemsetD32Async)(CUdeviceptr, unsigned int, size_t, CUstream);
	CUresult (*cuModuleLoadDataEx)(CUmodule *, const void *, unsigned int, int *, void **);
	CUresult (*cuModuleUnload)(CUmodule);
	CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*cuModuleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
	CUresult (*cuFuncGetAttribute)(int *, int, CUfunction);
	CUresult (*cuFuncSetAttribute)(CUfunction, int, int);
	CUresult (*cuFuncGetParamInfo)(CUfunction, size_t, size_t *, size_t *);
	CUresult (*cuLaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
				   unsigned int, unsigned int, unsigned int, unsigned int,
				   CUstream, void **, void **);
	CUresult (*cuLaunchKernelEx)(const CUlaunchConfig *, CUfunction, void **, void **);
	CUresult (*cuStreamCreateWithPriority)(CUstream *, unsigned int, int);
	CUresult (*cuStreamDestroy)(CUstream);
	CUresult (*cuStreamQuery)(CUstream);
	CUresult (*cuStreamSynchronize)(CUstream);
	CUresult (*cuStreamWaitEvent)(CUstream, CUevent, unsigned int);
	CUresult (*cuEventCreate)(CUevent *, unsigned int);
	CUresult (*cuEventDestroy)(CUevent);
	CUresult (*cuEventRecord)(CUevent, CUstream);
	CUresult (*cuEventQuery)(CUevent);
	CUresult (*cuEventSynchronize)(CUevent);
	CUresult (*cuEventElapsedTime)(float *, CUevent, CUevent);
	CUresult (*cuCheckpointProcessLock)(int, CUcheckpointLockArgs *);
	CUresult (*cuCheckpointProcessCheckpoint)(int, CUcheckpointCheckpointArgs *);
	CUresult (*cuCheckpointProcessRestore)(int, CUcheckpointRestoreArgs *);
	CUresult (*cuCheckpointProcessUnlock)(int, CUcheckpointUnlockArgs *);
	CUresult (*cuCheckpointProcessGetState)(int, int *);
} gc_api;

// gc_special_stream turns CU_STREAM_LEGACY (1) or CU_STREAM_PER_THREAD (2)
// into the handle value the driver expects.
static inline CUstream gc_special_stream(uintptr_t v) { return (CUstream)v; }

// gc_load opens path (a soname or a file) and resolves every entry point.
// It returns NULL and fills err on failure; the result is never freed,
// because unloading the driver library is not safe.
gc_api *gc_load(const char *path, char *err, size_t errlen);

// gc_is_interposer reports whether the loaded library is gpuctl's own
// client library rather than NVIDIA's driver.
int gc_is_interposer(const gc_api *a);

const char *gc_error_string(const gc_api *a, CUresult r);

// Wrappers. Those taking a CUcontext first make it current on the calling
// thread when it is not already, in the same C call, so a goroutine that
// moved between threads can never run a call in the wrong context.
CUresult gc_init(const gc_api *a);
CUresult gc_driver_version(const gc_api *a, int *v);
CUresult gc_device_count(const gc_api *a, int *n);
CUresult gc_device_get(const gc_api *a, int ordinal, CUdevice *d);
CUresult gc_device_name(const gc_api *a, CUdevice d, char *buf, int len);
CUresult gc_device_uuid(const gc_api *a, CUdevice d, CUuuid *u);
CUresult gc_device_total_mem(const gc_api *a, CUdevice d, size_t *bytes);
CUresult gc_device_attribute(const gc_api *a, CUdevice d, int attr, int *v);
CUresult gc_device_pci_bus_id(const gc_api *a, CUdevice d, char *buf, int len);

CUresult gc_primary_retain(const gc_api *a, CUdevice d, CUcontext *c);
CUresult gc_primary_release(const gc_api *a, CUdevice d);
CUresult gc_primary_reset(const gc_api *a, CUdevice d);
CUresult gc_primary_state(const gc_api *a, CUdevice d, unsigned int *flags, int *active);
CUresult gc_primary_set_flags(const gc_api *a, CUdevice d, unsigned int flags);
CUresult gc_ctx_create(const gc_api *a, CUdevice d, unsigned int flags, CUcontext *c);
CUresult gc_ctx_destroy(const gc_api *a, CUcontext c);
CUresult gc_ctx_synchronize(const gc_api *a, CUcontext c);

CUresult gc_mem_alloc(const gc_api *a, CUcontext c, size_t n, CUdeviceptr *p);
CUresult gc_mem_free(const gc_api *a, CUcontext c, CUdeviceptr p);
CUresult gc_mem_info(const gc_api *a, CUcontext c, size_t *free_, size_t *total);
CUresult gc_host_alloc(const gc_api *a, CUcontext c, size_t n, void **p);
CUresult gc_host_free(const gc_api *a, CUcontext c, void *p);
// gc_host_register pins n bytes of host memory at p for every context
// (CU_MEMHOSTREGISTER_PORTABLE), so that copies to and from it are direct;
// gc_host_unregister undoes it.
CUresult gc_host_register(const gc_api *a, CUcontext c, void *p, size_t n);
CUresult gc_host_unregister(const gc_api *a, CUcontext c, void *p);
CUresult gc_htod(const gc_api *a, CUcontext c, CUdeviceptr dst, const void *src, size_t n,
		 CUstream s, CUevent done);
CUresult gc_dtoh(const gc_api *a, CUcontext c, void *dst, CUdeviceptr src, size_t n,
		 CUstream s, CUevent done);
CUresult gc_dtod(const gc_api *a, CUcontext c, CUdeviceptr dst, CUdeviceptr src, size_t n,
		 CUstream s);
CUresult gc_memset(const gc_api *a, CUcontext c, CUdeviceptr dst, unsigned int value,
		   int elem, size_t count, CUstream s);

CUresult gc_module_load(const gc_api *a, CUcontext c, const void *image, CUmodule *m,
			char *log, size_t loglen);
CUresult gc_module_unload(const gc_api *a, CUcontext c, CUmodule m);
CUresult gc_module_function(const gc_api *a, CUcontext c, CUmodule m, const char *name,
			    CUfunction *f);
CUresult gc_module_global(const gc_api *a, CUcontext c, CUmodule m, const char *name,
			  CUdeviceptr *p, size_t *n);
CUresult gc_func_param_info(const gc_api *a, CUcontext c, CUfunction f, size_t i,
			    size_t *off, size_t *size);
CUresult gc_func_get_attribute(const gc_api *a, CUcontext c, CUfunction f, int attr, int *v);
CUresult gc_func_set_attribute(const gc_api *a, CUcontext c, CUfunction f, int attr, int v);
CUresult gc_launch(const gc_api *a, CUcontext c, CUfunction f, const unsigned int *grid,
		   const unsigned int *block, unsigned int shared, CUstream s,
		   void *params, size_t size);

// gc_launch_ex launches with thread-block clusters (cluster[] all 1 for
// none) and/or as a cooperative launch, through cuLaunchKernelEx.
CUresult gc_launch_ex(const gc_api *a, CUcontext c, CUfunction f, const unsigned int *grid,
		      const unsigned int *block, unsigned int shared, CUstream s, void *params,
		      size_t size, const unsigned int *cluster, int cooperative);

CUresult gc_stream_create(const gc_api *a, CUcontext c, unsigned int flags, int prio,
			  CUstream *s);
CUresult gc_stream_destroy(const gc_api *a, CUcontext c, CUstream s);
CUresult gc_stream_query(const gc_api *a, CUcontext c, CUstream s);
CUresult gc_stream_synchronize(const gc_api *a, CUcontext c, CUstream s);
CUresult gc_stream_wait_event(const gc_api *a, CUcontext c, CUstream s, CUevent e,
			      unsigned int flags);
CUresult gc_event_create(const gc_api *a, CUcontext c, unsigned int flags, CUevent *e);
CUresult gc_event_destroy(const gc_api *a, CUcontext c, CUevent e);
CUresult gc_event_record(const gc_api *a, CUcontext c, CUevent e, CUstream s);
CUresult gc_event_query(const gc_api *a, CUcontext c, CUevent e);
CUresult gc_event_synchronize(const gc_api *a, CUcontext c, CUevent e);
CUresult gc_event_elapsed(const gc_api *a, CUcontext c, CUevent start, CUevent end, float *ms);

CUresult gc_ckpt_lock(const gc_api *a, int pid, unsigned int timeout_ms);
CUresult gc_ckpt_checkpoint(const gc_api *a, int pid);
CUresult gc_ckpt_restore(const gc_api *a, int pid, const CUuuid *from, const CUuuid *to,
			 unsigned int n);
CUresult gc_ckpt_unlock(const gc_api *a, int pid);
CUresult gc_ckpt_state(const gc_api *a, int pid, int *state);

#endif
