/* Hand-written entry points: those served locally (errors, lookup, the
 * per-thread context stack, host memory) and those that need more than
 * argument forwarding (copies, modules, launches, context creation).
 * The rest is generated from remoting/spec into gen/gc_entries.c. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda.h"
#include "gc_async.h"
#include "gc_core.h"
#include "gc_ext.h"
#include "../gen/gc_ops.h"
#include "../gen/gc_results.h"
#include "../gen/gc_undef.h"

/* ---- errors ------------------------------------------------------------ */

/* Names and texts come from the results table of remoting/spec (gen/gc_results.h). */

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = gc_result_name(error);
	return *pStr != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
	if (pStr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = gc_result_text(error);
	return *pStr != NULL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- lookup -------------------------------------------------------------- */

/* proc_lookup finds symbol's newest form allowed at cudaVersion. With
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM it prefers the _ptsz/_ptds
 * form where one exists; otherwise (and for calls that take no stream)
 * the ordinary form. */
static CUresult proc_lookup(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			    CUdriverProcAddressQueryResult *st, int v2)
{
	if (symbol == NULL || pfn == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	/* Flags other than the two documented ones are refused, as
	 * NVIDIA's driver does. */
	if ((flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	int want_pt = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
	int found = 0, best_pt = -1;
	for (size_t i = 0; i < gc_nprocs; i++) {
		if (strcmp(gc_procs[i].name, symbol) != 0)
			continue;
		found = 1;
		if (gc_procs[i].version > cudaVersion)
			continue;
		int pt = gc_procs[i].per_thread;
		if (pt && !want_pt)
			continue;
		/* Rows are sorted by version: a later row is newer. A
		 * per-thread form, when asked for, beats any ordinary one. */
		if (best_pt == 1 && !pt)
			continue;
		*pfn = gc_procs[i].fn;
		best_pt = pt;
	}
	if (st != NULL)
		*st = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS
			   : found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (*pfn == NULL && getenv("GPUCTL_DEBUG") != NULL)
		gc_log("cuGetProcAddress(%s, %d, %llu): %s", symbol, cudaVersion, (unsigned long long)flags,
		       found ? "no form that old" : "unknown name");
	/* The v2 ABI reports a failed look-up in its status and succeeds
	 * with a NULL function, as NVIDIA's driver does (an empty name
	 * included); the v1 ABI has only its result to say it. */
	return *pfn || v2 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

/* The v1 ABI (CUDA 11.3) has no status out-parameter; v2 (CUDA 12.0)
 * reports whether the name or only the version failed. */
CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return proc_lookup(symbol, pfn, cudaVersion, flags, NULL, 0);
}

CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
				     CUdriverProcAddressQueryResult *symbolStatus)
{
	return proc_lookup(symbol, pfn, cudaVersion, flags, symbolStatus, 1);
}

/* ---- init and devices ------------------------------------------------------ */

CUresult CUDAAPI cuInit(unsigned int Flags)
{
	if (Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	return gc_connect();
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
	if (driverVersion == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	/* Answerable before cuInit, as with NVIDIA's driver: the version
	 * this library implements until a server is connected. */
	int32_t v;
	if (gc_ready() == CUDA_SUCCESS && gc_driver_version(&v) == CUDA_SUCCESS && v < CUDA_VERSION)
		*driverVersion = v;
	else
		*driverVersion = CUDA_VERSION;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	if (device == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int32_t n;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_dev_count(&n);
	if (r != CUDA_SUCCESS)
		return r;
	if (ordinal < 0 || ordinal >= n)
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
	if (name == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_dev_name(dev, name, (size_t)len);
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	if (uuid == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_dev_uuid(dev, (uint8_t *)uuid->bytes);
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev) { return cuDeviceGetUuid_v2(uuid, dev); }

CUresult CUDAAPI cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	if (major == NULL || minor == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_dev_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev, major);
	if (r == CUDA_SUCCESS)
		r = gc_dev_attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev, minor);
	return r;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	if (pciBusId == NULL || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_dev_busid(dev, pciBusId, (size_t)len);
}

CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	if (dev == NULL || pciBusId == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	int32_t n;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_dev_count(&n);
	for (int32_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
		char id[64];
		r = gc_dev_busid(i, id, sizeof id);
		/* Accept the id with or without its domain. */
		size_t a = strlen(id), b = strlen(pciBusId);
		if (r == CUDA_SUCCESS &&
		    (strcasecmp(id, pciBusId) == 0 || (a > b && id[a - b - 1] == ':' && strcasecmp(id + a - b, pciBusId) == 0))) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_DEVICE;
}

/* ---- contexts ---------------------------------------------------------------- */

/* The calling thread's context stack. The server has no notion of a
 * current context: every call names its context. */
#define CTX_STACK_MAX 64
static __thread CUcontext ctx_stack[CTX_STACK_MAX];
static __thread int ctx_depth;

CUresult gc_current_ctx(uint64_t *ctx)
{
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	if (ctx_depth == 0 || ctx_stack[ctx_depth - 1] == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	*ctx = GC_H(ctx_stack[ctx_depth - 1]);
	return CUDA_SUCCESS;
}

CUresult gc_ctx_or_current(CUcontext c, uint64_t *ctx)
{
	if (c == NULL)
		return gc_current_ctx(ctx);
	*ctx = GC_H(c);
	return gc_ready();
}

static CUresult ctx_push(CUcontext c)
{
	if (ctx_depth == CTX_STACK_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = c;
	return CUDA_SUCCESS;
}

static CUresult ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	uint64_t c;
	if (r == CUDA_SUCCESS)
		r = gc_rpc_CtxCreate(dev, flags, &c);
	if (r != CUDA_SUCCESS)
		return r;
	gc_ctx_created(c, dev, flags, 0);
	*pctx = (CUcontext)(uintptr_t)c;
	return ctx_push(*pctx);
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev) { return ctx_create(pctx, flags, dev); }

CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams, unsigned int flags, CUdevice dev)
{
	(void)paramsArray;
	if (numParams > 0)
		return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
	return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int flags, CUdevice dev)
{
	if (p != NULL && p->numExecAffinityParams > 0)
		return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
	if (p != NULL && p->cigParams != NULL)
		return CUDA_ERROR_NOT_SUPPORTED;
	return ctx_create(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_CtxDestroy(GC_H(ctx));
	if (r != CUDA_SUCCESS)
		return r;
	gc_ctx_gone(GC_H(ctx));
	/* Other threads find out from the server's INVALID_CONTEXT. */
	int j = 0;
	for (int i = 0; i < ctx_depth; i++)
		if (ctx_stack[i] != ctx)
			ctx_stack[j++] = ctx_stack[i];
	ctx_depth = j;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	return ctx_push(ctx);
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
	if (ctx_depth == 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUcontext c = ctx_stack[--ctx_depth];
	if (pctx != NULL)
		*pctx = c;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	if (ctx == NULL) {
		if (ctx_depth > 0)
			ctx_depth--;
		return CUDA_SUCCESS;
	}
	if (ctx_depth == 0)
		return ctx_push(ctx);
	ctx_stack[ctx_depth - 1] = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	if (pctx == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	*pctx = ctx_depth > 0 ? ctx_stack[ctx_depth - 1] : NULL;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	(void)ctx;
	if (version == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 3020; /* contexts are created through the _v2 API */
	return gc_ready();
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	/* The range the backends accept (that of current NVIDIA GPUs). */
	if (leastPriority != NULL)
		*leastPriority = 0;
	if (greatestPriority != NULL)
		*greatestPriority = -5;
	return gc_ready();
}

/* ---- device ranges --------------------------------------------------------- */

/* Device allocations and module globals known to this client, so that
 * cuMemcpy can tell device from host pointers. */
struct range {
	uint64_t base, size, ctx;
};
static struct {
	pthread_rwlock_t mu;
	struct range *r;
	size_t n, cap;
} devr = { .mu = PTHREAD_RWLOCK_INITIALIZER };

void gc_devr_add(uint64_t base, uint64_t size, uint64_t ctx)
{
	pthread_rwlock_wrlock(&devr.mu);
	if (devr.n == devr.cap) {
		size_t nc = devr.cap ? 2 * devr.cap : 64;
		struct range *nr = realloc(devr.r, nc * sizeof *nr);
		if (nr == NULL) {
			pthread_rwlock_unlock(&devr.mu);
			return; /* cuMemcpy then treats the range as host memory */
		}
		devr.r = nr;
		devr.cap = nc;
	}
	devr.r[devr.n++] = (struct range){ base, size ? size : 1, ctx };
	pthread_rwlock_unlock(&devr.mu);
}

void gc_devr_del(uint64_t base)
{
	pthread_rwlock_wrlock(&devr.mu);
	for (size_t i = 0; i < devr.n; i++) {
		if (devr.r[i].base == base) {
			devr.r[i] = devr.r[--devr.n];
			break;
		}
	}
	pthread_rwlock_unlock(&devr.mu);
}

/* devr_find copies the range holding p into *out; 0 if there is none. */
static int devr_find(uint64_t p, struct range *out)
{
	int hit = 0;
	pthread_rwlock_rdlock(&devr.mu);
	for (size_t i = 0; i < devr.n && !hit; i++) {
		if (p - devr.r[i].base < devr.r[i].size) {
			*out = devr.r[i];
			hit = 1;
		}
	}
	pthread_rwlock_unlock(&devr.mu);
	return hit;
}

int gc_is_dev(uint64_t p)
{
	struct range r;
	return devr_find(p, &r);
}

/* ---- memory ------------------------------------------------------------------- */

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	if (dptr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx, p;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS)
		r = gc_cap_unsafe(0);
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemAlloc(ctx, bytesize, &p);
	if (r != CUDA_SUCCESS)
		return r;
	gc_devr_add(p, bytesize, ctx);
	*dptr = p;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	/* Freeing 0 does nothing, as in CUDA: cudart's cudaFree(0), which
	 * cuBLAS and others call to create the context, ends here (and, doing
	 * nothing, cannot disturb a capture). */
	if (r != CUDA_SUCCESS || dptr == 0)
		return r;
	r = gc_cap_unsafe(0);
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemFree(ctx, dptr);
	if (r == CUDA_SUCCESS)
		gc_devr_del(dptr);
	return r;
}

/* Host memory is plain memory on the client: page-locking it would buy
 * nothing, because data goes to the GPU over the network. The ranges are
 * remembered so that flag queries and unregistration behave, and so that
 * asynchronous copies from and to them do not wait (gc_async.c). */
struct hostr {
	void *p;
	size_t size;
	unsigned int flags;
	int owned; /* allocated here, as opposed to registered */
};
static struct {
	pthread_mutex_t mu;
	struct hostr *r;
	size_t n, cap;
} hostm = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int hostm_find(const void *p) /* mu held */
{
	for (size_t i = 0; i < hostm.n; i++)
		if ((uintptr_t)p - (uintptr_t)hostm.r[i].p < hostm.r[i].size)
			return (int)i;
	return -1;
}

static CUresult hostm_add(void *p, size_t size, unsigned int flags, int owned)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&hostm.mu);
	if (hostm_find(p) >= 0 || hostm_find((char *)p + size - 1) >= 0) {
		r = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	} else {
		if (hostm.n == hostm.cap) {
			size_t nc = hostm.cap ? 2 * hostm.cap : 32;
			struct hostr *nr = realloc(hostm.r, nc * sizeof *nr);
			if (nr == NULL) {
				pthread_mutex_unlock(&hostm.mu);
				return CUDA_ERROR_OUT_OF_MEMORY;
			}
			hostm.r = nr;
			hostm.cap = nc;
		}
		hostm.r[hostm.n++] = (struct hostr){ p, size, flags, owned };
		gc_pin_add(p, size);
	}
	pthread_mutex_unlock(&hostm.mu);
	return r;
}

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	if (pp == NULL || bytesize == 0 || (Flags & ~7u) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	void *p;
	if (posix_memalign(&p, 4096, bytesize) != 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((r = hostm_add(p, bytesize, Flags, 1)) != CUDA_SUCCESS) {
		free(p);
		return r;
	}
	*pp = p;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize) { return cuMemHostAlloc(pp, bytesize, 0); }

/* host_release: copies in flight from or into a page-locked range must be
 * done with it before it goes (CUDA's free synchronises too). */
static void host_release(void *p)
{
	if (gc_ready() == CUDA_SUCCESS)
		gc_host_fence();
	gc_pin_del(p);
}

CUresult CUDAAPI cuMemFreeHost(void *p)
{
	pthread_mutex_lock(&hostm.mu);
	int i = hostm_find(p);
	if (i < 0 || !hostm.r[i].owned || hostm.r[i].p != p) {
		pthread_mutex_unlock(&hostm.mu);
		return CUDA_ERROR_INVALID_VALUE;
	}
	host_release(p);
	hostm.r[i] = hostm.r[--hostm.n];
	pthread_mutex_unlock(&hostm.mu);
	free(p);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	if (pFlags == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&hostm.mu);
	int i = hostm_find(p);
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	if (i >= 0 && hostm.r[i].owned) {
		*pFlags = hostm.r[i].flags;
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&hostm.mu);
	return r;
}

CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	if (p == NULL || bytesize == 0 || (Flags & ~0xfu) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : hostm_add(p, bytesize, Flags, 0);
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	pthread_mutex_lock(&hostm.mu);
	int i = hostm_find(p);
	CUresult r = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	if (i >= 0 && !hostm.r[i].owned && hostm.r[i].p == p) {
		host_release(p);
		hostm.r[i] = hostm.r[--hostm.n];
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&hostm.mu);
	return r;
}

/* cuPointerGetAttribute answers from what this client knows: its device
 * allocations and module globals, and its host allocations and
 * registrations. */
CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	if (data == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	struct range dr;
	if (devr_find(ptr, &dr)) {
		switch (attribute) {
		case CU_POINTER_ATTRIBUTE_CONTEXT:
			*(CUcontext *)data = (CUcontext)(uintptr_t)dr.ctx;
			return CUDA_SUCCESS;
		case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
			*(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
			return CUDA_SUCCESS;
		case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
			*(CUdeviceptr *)data = ptr;
			return CUDA_SUCCESS;
		case CU_POINTER_ATTRIBUTE_IS_MANAGED:
			*(unsigned int *)data = 0;
			return CUDA_SUCCESS;
		case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
			*(CUdeviceptr *)data = dr.base;
			return CUDA_SUCCESS;
		case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
			*(size_t *)data = dr.size;
			return CUDA_SUCCESS;
		case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
			int dev;
			r = gc_ctx_dev(dr.ctx, &dev);
			if (r == CUDA_SUCCESS)
				*(int *)data = dev;
			return r;
		}
		case CU_POINTER_ATTRIBUTE_HOST_POINTER:
			return CUDA_ERROR_INVALID_VALUE; /* device memory is not mapped here */
		default:
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	pthread_mutex_lock(&hostm.mu);
	int i = hostm_find((const void *)(uintptr_t)ptr);
	struct hostr hr = i >= 0 ? hostm.r[i] : (struct hostr){ 0 };
	pthread_mutex_unlock(&hostm.mu);
	if (i < 0)
		return CUDA_ERROR_INVALID_VALUE; /* memory CUDA does not know */
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned int *)data = CU_MEMORYTYPE_HOST;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		*(void **)data = (void *)(uintptr_t)ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(unsigned int *)data = 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = (CUdeviceptr)(uintptr_t)hr.p;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = hr.size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		return CUDA_ERROR_INVALID_VALUE; /* host memory is not mapped into the device */
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

/* ---- copies and fills ---------------------------------------------------------- */

/* capture_copy is the capture hook of the 1D copies: an asynchronous copy
 * on a capturing stream becomes a graph node; a synchronous one while a
 * capture forbids it fails. Returns 1 when the copy is handled. */
static int capture_copy(CUmemorytype dt, uint64_t dst, CUmemorytype st, uint64_t src, size_t n, CUstream s, int async,
			CUresult *r)
{
	if (!gc_capture_active())
		return 0;
	if (!async) {
		*r = gc_cap_unsafe(1);
		return *r != CUDA_SUCCESS;
	}
	CUDA_MEMCPY3D p = { .srcMemoryType = st, .dstMemoryType = dt, .WidthInBytes = n, .Height = 1, .Depth = 1 };
	if (st == CU_MEMORYTYPE_HOST)
		p.srcHost = (const void *)(uintptr_t)src;
	else
		p.srcDevice = src;
	if (dt == CU_MEMORYTYPE_HOST)
		p.dstHost = (void *)(uintptr_t)dst;
	else
		p.dstDevice = dst;
	return gc_cap_copy(&p, s, r);
}

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s, int async)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (n == 0)
		return CUDA_SUCCESS;
	if (src == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (capture_copy(CU_MEMORYTYPE_DEVICE, dst, CU_MEMORYTYPE_HOST, (uint64_t)(uintptr_t)src, n, s, async, &r))
		return r;
	/* A small asynchronous copy is copied into the request ring, so the
	 * caller may reuse its buffer at once (as with pageable memory); a
	 * large one from page-locked memory is queued with its data by
	 * reference; any other is sent from the caller's buffer before
	 * returning. */
	if (async && n <= gc_async_inline_max())
		return gc_rpc_MemcpyHtoD_async(ctx, dst, n, GC_S(s), src, n);
	if (async && gc_async_htod(ctx, dst, src, n, GC_S(s), &r))
		return r;
	return gc_rpc_MemcpyHtoD(ctx, dst, n, GC_S(s), src, n);
}

/* Device-to-host copies wait for their data, unless asynchronous into
 * page-locked memory (gc_async.c): CUDA allows an asynchronous copy to
 * pageable memory to be synchronous. */
static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (n == 0)
		return CUDA_SUCCESS;
	if (dst == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (capture_copy(CU_MEMORYTYPE_HOST, (uint64_t)(uintptr_t)dst, CU_MEMORYTYPE_DEVICE, src, n, s, async, &r))
		return r;
	if (async && gc_async_dtoh(ctx, dst, src, n, GC_S(s), &r))
		return r;
	return gc_rpc_MemcpyDtoH(ctx, src, n, GC_S(s), dst, n);
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (capture_copy(CU_MEMORYTYPE_DEVICE, dst, CU_MEMORYTYPE_DEVICE, src, n, s, async, &r))
		return r;
	if (async)
		return gc_rpc_MemcpyDtoD_async(ctx, dst, src, n, GC_S(s));
	return gc_rpc_MemcpyDtoD(ctx, dst, src, n, GC_S(s));
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr d, const void *h, size_t n) { return htod(d, h, n, NULL, 0); }
CUresult CUDAAPI cuMemcpyDtoH_v2(void *h, CUdeviceptr d, size_t n) { return dtoh(h, d, n, NULL, 0); }
CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return dtod(d, s, n, NULL, 0); }
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *h, size_t n, CUstream s) { return htod(d, h, n, s, 1); }
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *h, CUdeviceptr d, size_t n, CUstream s) { return dtoh(h, d, n, s, 1); }
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream st) { return dtod(d, s, n, st, 1); }

/* cuMemcpy with unified addressing: the client knows which addresses are
 * device memory; anything else is host memory of this process. */
static CUresult memcpy_any(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	int dd = gc_is_dev(dst), sd = gc_is_dev(src);
	if (dd && sd)
		return dtod(dst, src, n, s, async);
	if (dd)
		return htod(dst, (const void *)(uintptr_t)src, n, s, async);
	if (sd)
		return dtoh((void *)(uintptr_t)dst, src, n, s, async);
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	if (n > 0 && (dst == 0 || src == 0))
		return CUDA_ERROR_INVALID_VALUE;
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) { return memcpy_any(dst, src, n, NULL, 0); }
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) { return memcpy_any(dst, src, n, s, 1); }

static CUresult memset_any(CUdeviceptr dst, uint32_t v, int elem, size_t n, CUstream s, int async)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (gc_capture_active()) {
		if (async && gc_cap_memset(dst, v, (unsigned int)elem, n, s, &r))
			return r;
		if (!async && (r = gc_cap_unsafe(1)) != CUDA_SUCCESS)
			return r;
	}
	if (async)
		return gc_rpc_Memset_async(ctx, dst, v, elem, n, GC_S(s));
	return gc_rpc_Memset(ctx, dst, v, elem, n, GC_S(s));
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) { return memset_any(d, v, 1, n, NULL, 0); }
CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) { return memset_any(d, v, 2, n, NULL, 0); }
CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) { return memset_any(d, v, 4, n, NULL, 0); }
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) { return memset_any(d, v, 1, n, s, 1); }
CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) { return memset_any(d, v, 2, n, s, 1); }
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) { return memset_any(d, v, 4, n, s, 1); }

/* ---- modules ---------------------------------------------------------------------- */

#define FATBIN_WRAPPER_MAGIC 0x466243b1u
#define FATBIN_MAGIC 0xBA55ED50u

/* gc_image_size finds the length of an in-memory module image, which the
 * API passes without one: a fatbin states its size in its header, an ELF
 * cubin's extent follows from its headers, PTX is NUL-terminated text. */
size_t gc_image_size(const void **image)
{
	const uint8_t *p = *image;
	uint32_t magic = gc_ld_u32(p);
	if (magic == FATBIN_WRAPPER_MAGIC) {
		/* The wrapper nvcc emits: magic, version, then a pointer to
		 * the fatbin. */
		const void *data;
		memcpy(&data, p + 8, sizeof data);
		if (data == NULL)
			return 0;
		*image = data;
		p = data;
		magic = gc_ld_u32(p);
	}
	if (magic == FATBIN_MAGIC)
		return gc_ld_u16(p + 6) + gc_ld_u64(p + 8);
	if (memcmp(p, "\x7f" "ELF", 4) == 0 && p[4] == 2 /* 64-bit */) {
		uint64_t end = gc_ld_u64(p + 0x28) + (uint64_t)gc_ld_u16(p + 0x3a) * gc_ld_u16(p + 0x3c);
		uint64_t phend = gc_ld_u64(p + 0x20) + (uint64_t)gc_ld_u16(p + 0x36) * gc_ld_u16(p + 0x38);
		if (phend > end)
			end = phend;
		uint64_t shoff = gc_ld_u64(p + 0x28);
		uint16_t shentsize = gc_ld_u16(p + 0x3a), shnum = gc_ld_u16(p + 0x3c);
		for (uint16_t i = 0; i < shnum && shentsize >= 0x40; i++) {
			const uint8_t *sh = p + shoff + (uint64_t)i * shentsize;
			if (gc_ld_u32(sh + 4) == 8 /* SHT_NOBITS */)
				continue;
			uint64_t e = gc_ld_u64(sh + 0x18) + gc_ld_u64(sh + 0x20);
			if (e > end)
				end = e;
		}
		return end;
	}
	return strlen((const char *)p);
}

static CUresult module_load(CUmodule *module, const void *image, size_t n)
{
	uint64_t ctx, m;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (n == 0 || n > GC_MAX_IMAGE)
		return CUDA_ERROR_INVALID_IMAGE;
	r = gc_module_upload(ctx, image, n, &m);
	if (r == CUDA_SUCCESS)
		*module = (CUmodule)(uintptr_t)m;
	return r;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
	if (module == NULL || image == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	size_t n = gc_image_size(&image);
	return module_load(module, image, n);
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int numOptions, CUjit_option *options,
				    void **optionValues)
{
	/* JIT options tune the server's compiler; they are accepted and not
	 * forwarded. Log buffers are reported empty. */
	if (numOptions > 0 && (options == NULL || optionValues == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < numOptions; i++) {
		if (options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES || options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			optionValues[i] = (void *)(uintptr_t)0;
		else if (options[i] == CU_JIT_WALL_TIME)
			memset(&optionValues[i], 0, sizeof(float));
	}
	return cuModuleLoadData(module, image);
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin) { return cuModuleLoadData(module, fatCubin); }

CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
	if (module == NULL || fname == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	int fd = open(fname, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_FILE_NOT_FOUND;
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || (uint64_t)st.st_size > GC_MAX_IMAGE) {
		close(fd);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	size_t n = (size_t)st.st_size;
	uint8_t *buf = malloc(n);
	size_t got = 0;
	while (buf != NULL && got < n) {
		ssize_t m = read(fd, buf + got, n - got);
		if (m < 0 && errno == EINTR)
			continue;
		if (m <= 0)
			break;
		got += (size_t)m;
	}
	close(fd);
	if (buf == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = got == n ? module_load(module, buf, n) : CUDA_ERROR_FILE_NOT_FOUND;
	free(buf);
	return r;
}

#define MAX_PARAMS 4096

/* Every function handle this client made, by context and server handle.
 * A server that names the same kernel with the same handle each time it is
 * looked up (NVIDIA's driver returns one CUfunction per kernel and module)
 * gets one client object for it too, so that an attribute set through one
 * lookup (cuBLASLt raises a kernel's dynamic shared memory) is what every
 * other lookup's cached attributes and occupancy answers see, as with
 * NVIDIA's driver. */
static struct {
	pthread_mutex_t mu;
	struct CUfunc_st **t;
	size_t n, cap;
} funcs = { .mu = PTHREAD_MUTEX_INITIALIZER };

static size_t func_slot(struct CUfunc_st **t, size_t cap, uint64_t ctx, uint64_t h)
{
	size_t i = (size_t)((ctx * 0x9e3779b97f4a7c15ull) ^ (h * 0xc2b2ae3d27d4eb4full)) & (cap - 1);
	while (t[i] != NULL && (t[i]->ctx != ctx || t[i]->h != h))
		i = (i + 1) & (cap - 1);
	return i;
}

/* func_intern returns the function already made for f's context and
 * server handle, freeing f, or keeps f as that function. */
static struct CUfunc_st *func_intern(struct CUfunc_st *f)
{
	pthread_mutex_lock(&funcs.mu);
	if (2 * (funcs.n + 1) > funcs.cap) {
		size_t nc = funcs.cap ? 2 * funcs.cap : 256;
		struct CUfunc_st **nt = calloc(nc, sizeof *nt);
		if (nt == NULL) {
			pthread_mutex_unlock(&funcs.mu);
			return f; /* not shared, still correct for its own handle */
		}
		for (size_t i = 0; i < funcs.cap; i++)
			if (funcs.t[i] != NULL)
				nt[func_slot(nt, nc, funcs.t[i]->ctx, funcs.t[i]->h)] = funcs.t[i];
		free(funcs.t);
		funcs.t = nt;
		funcs.cap = nc;
	}
	size_t i = func_slot(funcs.t, funcs.cap, f->ctx, f->h);
	struct CUfunc_st *have = funcs.t[i];
	if (have == NULL) {
		funcs.t[i] = f;
		funcs.n++;
	}
	pthread_mutex_unlock(&funcs.mu);
	if (have == NULL)
		return f;
	free(f->name);
	free(f);
	return have;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	if (hfunc == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx, fh;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	uint32_t *pairs = malloc(2 * sizeof(uint32_t) * MAX_PARAMS), count = 0;
	if (pairs == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = gc_rpc_ModuleGetFunction(ctx, GC_H(hmod), name, &fh, &count, pairs, MAX_PARAMS);
	if (r != CUDA_SUCCESS) {
		free(pairs);
		return r;
	}
	struct CUfunc_st *f = calloc(1, sizeof *f + 2 * sizeof(uint32_t) * count);
	char *fname = strdup(name);
	if (f == NULL || fname == NULL) {
		free(pairs);
		free(f);
		free(fname);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	f->magic = GC_FUNC_MAGIC;
	f->h = fh;
	f->ctx = ctx;
	f->mod = hmod;
	f->name = fname;
	f->nparams = count;
	f->argbytes = 0;
	for (uint32_t i = 0; i < count; i++) {
		f->pairs[2 * i] = pairs[2 * i];
		f->pairs[2 * i + 1] = pairs[2 * i + 1];
		uint64_t end = (uint64_t)pairs[2 * i] + pairs[2 * i + 1];
		if (end > 32764) {
			free(pairs);
			free(f);
			free(fname);
			gc_log("kernel %s: parameter layout from the server is out of range", name);
			return CUDA_ERROR_UNKNOWN;
		}
		if (end > f->argbytes)
			f->argbytes = (uint32_t)end;
	}
	free(pairs);
	/* The handle stays valid for the process's life: CUDA programs may
	 * keep using a function handle until its module is unloaded, and the
	 * server reports a stale one as an invalid handle. */
	*hfunc = func_intern(f);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name)
{
	if (name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx, p, size;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS)
		r = gc_rpc_ModuleGetGlobal(ctx, GC_H(hmod), name, &p, &size);
	if (r != CUDA_SUCCESS)
		return r;
	if (!gc_is_dev(p))
		gc_devr_add(p, size, ctx);
	if (dptr != NULL)
		*dptr = p;
	if (bytes != NULL)
		*bytes = size;
	return CUDA_SUCCESS;
}

/* ---- launch --------------------------------------------------------------------------- */

/* cuLaunchKernel queues the launch without waiting: no lock and no
 * allocation once the function has been launched. */
CUresult CUDAAPI cuLaunchKernel(CUfunction fn, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **kernelParams,
				void **extra)
{
	if (fn == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	const unsigned int grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
	uint64_t ctx;
	struct CUfunc_st *f;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS)
		r = gc_func_resolve(fn, ctx, &f);
	if (r == CUDA_SUCCESS)
		r = gc_launch_check(f, grid, block, shared);
	if (r != CUDA_SUCCESS)
		return r;
	if (gc_capture_active() && gc_cap_launch(f, grid, block, shared, NULL, 0, s, kernelParams, extra, &r))
		return r;
	return gc_launch_queue(ctx, f, grid, block, shared, NULL, 0, s, kernelParams, extra);
}

CUresult gc_launch_queue(uint64_t ctx, struct CUfunc_st *f, const unsigned int grid[3], const unsigned int block[3],
			 unsigned int shared, const unsigned int cluster[3], uint32_t flags, CUstream s,
			 void **kernelParams, void **extra)
{
	const void *buf = NULL;
	size_t n = 0;
	if (kernelParams != NULL) {
		n = f->argbytes;
	} else if (extra != NULL) {
		size_t *np = NULL;
		for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
			if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				buf = extra[i + 1];
			else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
				np = extra[i + 1];
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if (buf == NULL || np == NULL)
			return CUDA_ERROR_INVALID_VALUE;
		n = *np;
		if (n < f->argbytes)
			return CUDA_ERROR_INVALID_VALUE;
	} else if (f->nparams > 0) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (n > 32764)
		return CUDA_ERROR_INVALID_VALUE;
	int ex = gc_launch_ex(cluster, flags);
	struct gc_call k;
	uint8_t *a = gc_begin(&k, ex ? GC_OP_LaunchEx : GC_OP_Launch, 8 + 8 + 7 * 4 + 8 + (ex ? 4 * 4 : 0) + 4 + n,
			      GC_FLAG_ASYNC, NULL, 0);
	if (a == NULL)
		return k.res;
	/* No cluster (NULL, or a graph node's zeros) is clusters of one block. */
	unsigned int c[3] = { 1, 1, 1 };
	for (int i = 0; i < 3 && cluster != NULL; i++)
		c[i] = cluster[i] ? cluster[i] : 1;
	uint8_t *end = ex ? gc_enc_LaunchEx(a, ctx, f->h, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
					    GC_S(s), c[0], c[1], c[2], flags, buf, (uint32_t)n) :
			    gc_enc_Launch(a, ctx, f->h, grid[0], grid[1], grid[2], block[0], block[1], block[2], shared,
					  GC_S(s), buf, (uint32_t)n);
	if (kernelParams != NULL) {
		uint8_t *pb = end - n;
		memset(pb, 0, n);
		for (uint32_t i = 0; i < f->nparams; i++)
			memcpy(pb + f->pairs[2 * i], kernelParams[i], f->pairs[2 * i + 1]);
	}
	return gc_async(&k);
}

/* ---- streams and events ---------------------------------------------------------------- */

CUresult CUDAAPI cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS && gc_capture_active() && gc_cap_wait_event(hStream, hEvent, Flags, &r))
		return r;
	return r != CUDA_SUCCESS ? r : gc_rpc_StreamWaitEvent_async(ctx, GC_S(hStream), GC_H(hEvent), Flags);
}

static CUresult event_record(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	if (hEvent == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS && gc_capture_active() && gc_cap_event_record(hEvent, hStream, flags, &r))
		return r;
	return r != CUDA_SUCCESS ? r : gc_rpc_EventRecord_async(ctx, GC_H(hEvent), GC_S(hStream));
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) { return event_record(hEvent, hStream, 0); }

CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
		return CUDA_ERROR_INVALID_VALUE;
	return event_record(hEvent, hStream, flags);
}
