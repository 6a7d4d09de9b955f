/* The driver surface the CUDA runtime uses beyond the core calls:
 * libraries and kernels with lazy loading, function attributes cached in
 * the client, occupancy computed in the client, cuLaunchKernelEx (with
 * thread-block clusters) and cooperative launches, the client's launch
 * configuration checks, a single-input cuLink*, context limits and ids,
 * and the per-thread-default-stream (_ptsz/_ptds) forms; and what
 * NVIDIA's libraries resolve besides (the pre-4.0 context-stack names,
 * profiler control). Entries are listed in remoting/spec/entries_runtime.go
 * and entries_libs.go. The CUDA 13 context-taking forms of
 * cuCtxGetDevice and cuCtxSynchronize live beside their base calls
 * (gc_cache.c, gc_graph.c), as does the primary contexts' bookkeeping. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cuda.h"
#include "gc_core.h"
#include "gc_ext.h"
#include "../gen/gc_ops.h"
#include "../gen/gc_undef.h"

/* ---- context state ------------------------------------------------------ */

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
	if (ctxId == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t c;
	CUresult r = gc_ctx_or_current(ctx, &c);
	if (r != CUDA_SUCCESS)
		return r;
	/* A small number in the order contexts were made, the numbering
	 * profilers show for NVIDIA's driver (its first context is 1); a
	 * context the client's table lost (it could not grow) is numbered by
	 * its handle, which the server never reuses within a session. */
	uint64_t id = gc_ctx_id(c);
	*ctxId = id != 0 ? id : c;
	return CUDA_SUCCESS;
}

/* Limits are the server's driver's: its values are what the session's
 * kernels run with, and libraries size their work from them (cuBLAS reads
 * CU_LIMIT_SHMEM_SIZE, the shared memory kernels may use, which CUDA 12.5
 * added). Each context's limit is asked once and kept, and replaced when
 * the program sets it. The cache preference is a hint the server's devices
 * ignore, kept per process in the client. */
#define LIMIT_CACHE 64
static struct {
	pthread_mutex_t mu;
	struct limit_entry {
		uint64_t ctx, epoch;
		int32_t limit;
		uint64_t value;
	} e[LIMIT_CACHE];
	unsigned next; /* the entry replaced next when none is free */
	int cache;
} limits = { .mu = PTHREAD_MUTEX_INITIALIZER };

static struct limit_entry *limit_find(uint64_t ctx, int32_t limit) /* mu held */
{
	uint64_t ep = gc_epoch();
	for (int i = 0; i < LIMIT_CACHE; i++)
		if (limits.e[i].ctx == ctx && limits.e[i].limit == limit && limits.e[i].epoch == ep)
			return &limits.e[i];
	return NULL;
}

static void limit_store(uint64_t ctx, int32_t limit, uint64_t value)
{
	pthread_mutex_lock(&limits.mu);
	struct limit_entry *e = limit_find(ctx, limit);
	if (e == NULL)
		e = &limits.e[limits.next++ % LIMIT_CACHE];
	*e = (struct limit_entry){ ctx, gc_epoch(), limit, value };
	pthread_mutex_unlock(&limits.mu);
}

CUresult CUDAAPI cuCtxGetLimit(size_t *pvalue, CUlimit limit)
{
	uint64_t c, v;
	CUresult r = gc_current_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	if (pvalue == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!gc_cache_off()) {
		pthread_mutex_lock(&limits.mu);
		struct limit_entry *e = limit_find(c, (int32_t)limit);
		int hit = e != NULL;
		if (hit)
			v = e->value;
		pthread_mutex_unlock(&limits.mu);
		if (hit) {
			*pvalue = (size_t)v;
			return CUDA_SUCCESS;
		}
	}
	r = gc_rpc_CtxGetLimit(c, (int32_t)limit, &v);
	if (r != CUDA_SUCCESS)
		return r;
	limit_store(c, (int32_t)limit, v);
	*pvalue = (size_t)v;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value)
{
	uint64_t c;
	CUresult r = gc_current_ctx(&c);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&limits.mu);
	struct limit_entry *e = limit_find(c, (int32_t)limit);
	if (e != NULL)
		e->ctx = 0; /* the driver may round the value: ask it again */
	pthread_mutex_unlock(&limits.mu);
	return gc_rpc_CtxSetLimit(c, (int32_t)limit, value);
}

CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
	uint64_t c;
	CUresult r = gc_current_ctx(&c);
	if (r == CUDA_SUCCESS && pconfig == NULL)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*pconfig = (CUfunc_cache)__atomic_load_n(&limits.cache, __ATOMIC_RELAXED);
	return r;
}

CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config)
{
	uint64_t c;
	CUresult r = gc_current_ctx(&c);
	if (r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		__atomic_store_n(&limits.cache, (int)config, __ATOMIC_RELAXED);
	return r;
}

/* Shared memory bank size: four bytes on every GPU CUDA 12 and 13 support,
 * where setting another is accepted and changes nothing. NVIDIA's cuda.h
 * declares these (and CUdevprop below); this library's header leaves out
 * what CUDA deprecates. */
enum { SHARED_MEM_CONFIG_DEFAULT = 0, SHARED_MEM_CONFIG_FOUR_BYTE = 1, SHARED_MEM_CONFIG_EIGHT_BYTE = 2 };
CUresult CUDAAPI cuCtxGetSharedMemConfig(int *pConfig);
CUresult CUDAAPI cuCtxSetSharedMemConfig(int config);
CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction hfunc, int config);

CUresult CUDAAPI cuCtxGetSharedMemConfig(int *pConfig)
{
	uint64_t c;
	CUresult r = gc_current_ctx(&c);
	if (r == CUDA_SUCCESS && pConfig == NULL)
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		*pConfig = SHARED_MEM_CONFIG_FOUR_BYTE;
	return r;
}

CUresult CUDAAPI cuCtxSetSharedMemConfig(int config)
{
	uint64_t c;
	CUresult r = gc_current_ctx(&c);
	if (r == CUDA_SUCCESS && (config < SHARED_MEM_CONFIG_DEFAULT || config > SHARED_MEM_CONFIG_EIGHT_BYTE))
		r = CUDA_ERROR_INVALID_VALUE;
	return r;
}

/* The device's properties in the form CUDA 2 defined (CUdevprop): its
 * fields are attributes 1 to 14 in order. */
struct gc_devprop {
	int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3], sharedMemPerBlock, totalConstantMemory, SIMDWidth,
		memPitch, regsPerBlock, clockRate, textureAlign;
};
_Static_assert(sizeof(struct gc_devprop) == 14 * sizeof(int), "CUdevprop is fourteen ints");
CUresult CUDAAPI cuDeviceGetProperties(struct gc_devprop *prop, CUdevice dev);

CUresult CUDAAPI cuDeviceGetProperties(struct gc_devprop *prop, CUdevice dev)
{
	if (prop == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	CUdevice_attribute attrs[14];
	int v[14];
	for (int i = 0; i < 14; i++)
		attrs[i] = (CUdevice_attribute)(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK + i);
	if ((r = gc_dev_attrs(dev, 14, attrs, v)) != CUDA_SUCCESS)
		return r;
	memcpy(prop, v, sizeof v);
	return CUDA_SUCCESS;
}

/* ---- pointers ------------------------------------------------------------ */

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes, void **data,
					CUdeviceptr ptr)
{
	if (numAttributes == 0 || attributes == NULL || data == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	/* Unlike the single query, an attribute that does not apply to ptr
	 * is reported as its "none" value, not as an error. */
	for (unsigned int i = 0; i < numAttributes; i++) {
		if (data[i] == NULL)
			continue;
		CUresult r = cuPointerGetAttribute(data[i], attributes[i], ptr);
		if (r == CUDA_ERROR_NOT_INITIALIZED || r == CUDA_ERROR_DEVICE_UNAVAILABLE)
			return r;
		if (r != CUDA_SUCCESS) {
			switch (attributes[i]) {
			case CU_POINTER_ATTRIBUTE_CONTEXT:
				*(CUcontext *)data[i] = NULL;
				break;
			case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
			case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
				*(CUdeviceptr *)data[i] = 0;
				break;
			case CU_POINTER_ATTRIBUTE_HOST_POINTER:
				*(void **)data[i] = NULL;
				break;
			case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
				*(size_t *)data[i] = 0;
				break;
			case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
				*(int *)data[i] = -2;
				break;
			default:
				*(unsigned int *)data[i] = 0; /* memory type 0: unregistered */
			}
		}
	}
	return CUDA_SUCCESS;
}

/* Host memory is never mapped into the remote device. As with unified
 * addressing on a local GPU, the device address of a host allocation is
 * its host address: the runtime records it, and a kernel that dereferences
 * it fails with an illegal address instead of reading stale data. */
CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	if (pdptr == NULL || p == NULL || Flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned int t;
	CUresult r = cuPointerGetAttribute(&t, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)p);
	if (r != CUDA_SUCCESS || t != CU_MEMORYTYPE_HOST)
		return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* ---- libraries and kernels ----------------------------------------------- */

/* A library keeps its image in the client and is loaded into a context
 * as a module only when something of it is first used there (a kernel
 * resolved, a global looked up): CUDA's lazy loading, and the reason a
 * program that registers many kernels pays only for those it runs. */
#define LIB_MAGIC 0x67634cu /* "Lcg" */
#define LIB_CTXS 8
struct CUlib_st {
	uint32_t magic;
	void *image;
	size_t n;
	pthread_mutex_t mu;
	int nmods;
	struct {
		uint64_t ctx;
		CUmodule mod;
	} mods[LIB_CTXS];
};

struct CUkern_st {
	uint32_t magic;
	struct CUlib_st *lib;
	char *name;
	pthread_mutex_t mu;
	_Atomic(struct CUfunc_st *) fn; /* the function in the last context used */
	/* Attributes set through cuKernelSetAttribute, replayed onto the
	 * function of every context the kernel is resolved in. */
	uint32_t set_mask;
	int32_t set_val[GC_FUNC_ATTRS];
};

size_t gc_image_size(const void **image); /* gc_api.c */

static CUresult lib_module(struct CUlib_st *lib, uint64_t ctx, CUmodule *out)
{
	pthread_mutex_lock(&lib->mu);
	for (int i = 0; i < lib->nmods; i++) {
		if (lib->mods[i].ctx == ctx) {
			*out = lib->mods[i].mod;
			pthread_mutex_unlock(&lib->mu);
			return CUDA_SUCCESS;
		}
	}
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	if (lib->nmods < LIB_CTXS) {
		/* Loaded in ctx, which may differ from the current context
		 * when a kernel is resolved for another, and like every module
		 * image by its hash: a host that has the image (from this
		 * library in another context or process, or a plain module
		 * load) is not sent it again. */
		uint64_t m;
		r = gc_module_upload(ctx, lib->image, lib->n, &m);
		if (r == CUDA_SUCCESS) {
			*out = (CUmodule)(uintptr_t)m;
			lib->mods[lib->nmods].ctx = ctx;
			lib->mods[lib->nmods].mod = *out;
			lib->nmods++;
		}
	} else {
		gc_log("a library was used in more than %d contexts", LIB_CTXS);
	}
	pthread_mutex_unlock(&lib->mu);
	return r;
}

static CUresult library_load(CUlibrary *library, const void *code, size_t n)
{
	if (n == 0 || n > GC_MAX_IMAGE)
		return CUDA_ERROR_INVALID_IMAGE;
	struct CUlib_st *lib = calloc(1, sizeof *lib);
	void *img = malloc(n + 1);
	if (lib == NULL || img == NULL) {
		free(lib);
		free(img);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(img, code, n);
	((char *)img)[n] = 0; /* PTX text stays NUL-terminated */
	lib->magic = LIB_MAGIC;
	lib->image = img;
	lib->n = n;
	pthread_mutex_init(&lib->mu, NULL);
	*library = lib;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions, void **jitOptionsValues,
				   unsigned int numJitOptions, CUlibraryOption *libraryOptions, void **libraryOptionValues,
				   unsigned int numLibraryOptions)
{
	/* JIT options tune the server's compiler and library options say
	 * whether the caller keeps its copy of the image; a copy is kept
	 * here either way, so both are accepted and not forwarded. */
	(void)jitOptions, (void)jitOptionsValues, (void)libraryOptions, (void)libraryOptionValues;
	if (library == NULL || code == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if ((numJitOptions > 0 && jitOptions == NULL) || (numLibraryOptions > 0 && libraryOptions == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	size_t n = gc_image_size(&code);
	if (n == 0) {
		gc_log("cuLibraryLoadData: the image is neither a fatbin, an ELF cubin nor PTX text");
		return CUDA_ERROR_INVALID_IMAGE;
	}
	return library_load(library, code, n);
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
				       void **jitOptionsValues, unsigned int numJitOptions, CUlibraryOption *libraryOptions,
				       void **libraryOptionValues, unsigned int numLibraryOptions)
{
	(void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
	(void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
	if (library == NULL || fileName == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	int fd = open(fileName, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_FILE_NOT_FOUND;
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || (uint64_t)st.st_size > GC_MAX_IMAGE) {
		close(fd);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	size_t n = (size_t)st.st_size, got = 0;
	uint8_t *buf = malloc(n);
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
	r = got == n ? library_load(library, buf, n) : CUDA_ERROR_FILE_NOT_FOUND;
	free(buf);
	return r;
}

static struct CUlib_st *lib_of(CUlibrary l) { return l != NULL && l->magic == LIB_MAGIC ? l : NULL; }
static struct CUkern_st *kern_of(CUkernel k) { return k != NULL && k->magic == GC_KERN_MAGIC ? k : NULL; }

CUresult CUDAAPI cuLibraryUnload(CUlibrary library)
{
	struct CUlib_st *lib = lib_of(library);
	if (lib == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = gc_ready();
	for (int i = 0; r == CUDA_SUCCESS && i < lib->nmods; i++) {
		CUresult u = cuModuleUnload(lib->mods[i].mod);
		/* A context destroyed before its library was unloaded took the
		 * module with it. */
		if (u != CUDA_SUCCESS && u != CUDA_ERROR_INVALID_CONTEXT && u != CUDA_ERROR_INVALID_HANDLE)
			r = u;
	}
	/* Kernel handles stay allocated: CUDA leaves using one after its
	 * library is gone undefined, and failing cleanly beats a crash. */
	lib->magic = 0;
	free(lib->image);
	lib->image = NULL;
	return r;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	struct CUlib_st *lib = lib_of(library);
	if (pKernel == NULL || name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (lib == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	struct CUkern_st *k = calloc(1, sizeof *k);
	char *nm = strdup(name);
	if (k == NULL || nm == NULL) {
		free(k);
		free(nm);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	k->magic = GC_KERN_MAGIC;
	k->lib = lib;
	k->name = nm;
	pthread_mutex_init(&k->mu, NULL);
	*pKernel = k;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetModule(CUmodule *pMod, CUlibrary library)
{
	struct CUlib_st *lib = lib_of(library);
	if (pMod == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (lib == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	return r != CUDA_SUCCESS ? r : lib_module(lib, ctx, pMod);
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary library, const char *name)
{
	CUmodule m;
	CUresult r = cuLibraryGetModule(&m, library);
	return r != CUDA_SUCCESS ? r : cuModuleGetGlobal_v2(dptr, bytes, m, name);
}

static CUresult func_set_attr(struct CUfunc_st *f, CUfunction_attribute attrib, int value);

CUresult gc_func_resolve(CUfunction fn, uint64_t ctx, struct CUfunc_st **out)
{
	if (fn == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (fn->magic == GC_FUNC_MAGIC) {
		*out = fn;
		return CUDA_SUCCESS;
	}
	struct CUkern_st *k = kern_of((CUkernel)(void *)fn);
	if (k == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	struct CUfunc_st *f = atomic_load_explicit(&k->fn, memory_order_acquire);
	if (f != NULL && f->ctx == ctx) {
		*out = f;
		return CUDA_SUCCESS;
	}
	pthread_mutex_lock(&k->mu);
	f = atomic_load_explicit(&k->fn, memory_order_acquire);
	CUresult r = CUDA_SUCCESS;
	if (f == NULL || f->ctx != ctx) {
		CUmodule m;
		if (k->lib->magic != LIB_MAGIC)
			r = CUDA_ERROR_INVALID_HANDLE; /* its library was unloaded */
		if (r == CUDA_SUCCESS)
			r = lib_module(k->lib, ctx, &m);
		CUfunction nf = NULL;
		if (r == CUDA_SUCCESS) {
			CUcontext cur;
			r = cuCtxGetCurrent(&cur);
			int push = r == CUDA_SUCCESS && GC_H(cur) != ctx;
			if (push)
				r = cuCtxPushCurrent_v2((CUcontext)(uintptr_t)ctx);
			if (r == CUDA_SUCCESS)
				r = cuModuleGetFunction(&nf, m, k->name);
			if (push)
				cuCtxPopCurrent_v2(NULL);
		}
		for (int i = 0; r == CUDA_SUCCESS && i < GC_FUNC_ATTRS; i++)
			if (k->set_mask & (1u << i))
				r = func_set_attr(nf, (CUfunction_attribute)i, k->set_val[i]);
		if (r == CUDA_SUCCESS) {
			/* The previous context's function stays allocated: a
			 * launch on another thread may still hold it. */
			atomic_store_explicit(&k->fn, nf, memory_order_release);
			f = nf;
		}
	}
	pthread_mutex_unlock(&k->mu);
	if (r == CUDA_SUCCESS)
		*out = f;
	return r;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	if (pFunc == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx;
	struct CUfunc_st *f;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS)
		r = kern_of(kernel) ? gc_func_resolve((CUfunction)(void *)kernel, ctx, &f) : CUDA_ERROR_INVALID_HANDLE;
	if (r == CUDA_SUCCESS)
		*pFunc = f;
	return r;
}

CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc)
{
	struct CUkern_st *k = kern_of(hfunc);
	if (name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (k == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = k->name;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
	struct CUkern_st *k = kern_of(kernel);
	if (pLib == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (k == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	*pLib = k->lib;
	return CUDA_SUCCESS;
}

/* ---- function attributes (cached) ------------------------------------------- */

/* Attributes fixed at load time are asked of the server once per
 * function; those a program may set are cached when set. Attributes past
 * the cache (newer than CUDA 13's) are asked each time, and a number the
 * server's driver does not know is its error to report. */
static CUresult func_get_attr(struct CUfunc_st *f, CUfunction_attribute attrib, int *pi)
{
	if ((int)attrib < 0)
		return CUDA_ERROR_INVALID_VALUE;
	int cached = (unsigned)attrib < GC_FUNC_ATTRS;
	uint32_t bit = cached ? 1u << attrib : 0;
	if (cached && (atomic_load_explicit(&f->attr_known, memory_order_acquire) & bit)) {
		*pi = __atomic_load_n(&f->attrs[attrib], __ATOMIC_RELAXED);
		return CUDA_SUCCESS;
	}
	int32_t v;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_FuncGetAttribute(f->ctx, f->h, (int32_t)attrib, &v);
	if (r != CUDA_SUCCESS)
		return r;
	if (cached) {
		__atomic_store_n(&f->attrs[attrib], v, __ATOMIC_RELAXED);
		atomic_fetch_or_explicit(&f->attr_known, bit, memory_order_release);
	}
	*pi = v;
	return CUDA_SUCCESS;
}

static CUresult func_set_attr(struct CUfunc_st *f, CUfunction_attribute attrib, int value)
{
	if ((int)attrib < 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_FuncSetAttribute(f->ctx, f->h, (int32_t)attrib, value);
	if (r != CUDA_SUCCESS)
		return r;
	if ((unsigned)attrib < GC_FUNC_ATTRS) {
		__atomic_store_n(&f->attrs[attrib], value, __ATOMIC_RELAXED);
		atomic_fetch_or_explicit(&f->attr_known, 1u << attrib, memory_order_release);
	}
	atomic_fetch_add_explicit(&f->gen, 1, memory_order_release);
	return CUDA_SUCCESS;
}

/* resolve_current: the function fn names in the calling thread's context. */
static CUresult resolve_current(CUfunction fn, struct CUfunc_st **f)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	return r != CUDA_SUCCESS ? r : gc_func_resolve(fn, ctx, f);
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction hfunc)
{
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUfunc_st *f;
	CUresult r = resolve_current(hfunc, &f);
	return r != CUDA_SUCCESS ? r : func_get_attr(f, attrib, pi);
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	struct CUfunc_st *f;
	CUresult r = resolve_current(hfunc, &f);
	return r != CUDA_SUCCESS ? r : func_set_attr(f, attrib, value);
}

CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	/* A preference the hardware may ignore; the server's devices do. */
	struct CUfunc_st *f;
	CUresult r = resolve_current(hfunc, &f);
	if (r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		r = CUDA_ERROR_INVALID_VALUE;
	return r;
}

CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction hfunc, int config)
{
	struct CUfunc_st *f;
	CUresult r = resolve_current(hfunc, &f);
	if (r == CUDA_SUCCESS && (config < SHARED_MEM_CONFIG_DEFAULT || config > SHARED_MEM_CONFIG_EIGHT_BYTE))
		r = CUDA_ERROR_INVALID_VALUE;
	return r;
}

CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
	if (name == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (hfunc != NULL && hfunc->magic == GC_KERN_MAGIC)
		return cuKernelGetName(name, (CUkernel)(void *)hfunc);
	if (hfunc == NULL || hfunc->magic != GC_FUNC_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = hfunc->name;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
	if (hmod == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUfunc_st *f;
	CUresult r = resolve_current(hfunc, &f);
	if (r == CUDA_SUCCESS)
		*hmod = f->mod;
	return r;
}

/* Kernel attributes are per device and asked with or without a current
 * context: the kernel is resolved in the calling thread's context when that
 * context is on dev, or else in dev's primary context while this process
 * holds it (a library's worker thread may ask before it has made any
 * context current). */
static CUresult kernel_func(CUkernel kernel, CUdevice dev, struct CUfunc_st **f)
{
	if (kern_of(kernel) == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	uint64_t ctx;
	int cur = -1;
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS)
		r = gc_ctx_dev(ctx, &cur);
	if (r == CUDA_SUCCESS && cur == dev)
		return gc_func_resolve((CUfunction)(void *)kernel, ctx, f);
	uint64_t primary = gc_primary_ctx_held(dev);
	if (primary != 0)
		return gc_func_resolve((CUfunction)(void *)kernel, primary, f);
	return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
	if (pi == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	struct CUfunc_st *f;
	CUresult r = kernel_func(kernel, dev, &f);
	return r != CUDA_SUCCESS ? r : func_get_attr(f, attrib, pi);
}

CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev)
{
	struct CUkern_st *k = kern_of(kernel);
	struct CUfunc_st *f;
	CUresult r = kernel_func(kernel, dev, &f);
	if (r == CUDA_SUCCESS)
		r = func_set_attr(f, attrib, val);
	if (r == CUDA_SUCCESS && (unsigned)attrib < GC_FUNC_ATTRS) {
		pthread_mutex_lock(&k->mu);
		k->set_mask |= 1u << attrib;
		k->set_val[attrib] = val;
		pthread_mutex_unlock(&k->mu);
	}
	return r;
}

CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
	struct CUfunc_st *f;
	CUresult r = kernel_func(kernel, dev, &f);
	if (r == CUDA_SUCCESS && (unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		r = CUDA_ERROR_INVALID_VALUE;
	return r;
}

CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	if (mode == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*mode = CU_MODULE_LAZY_LOADING; /* libraries load on first use (above) */
	return CUDA_SUCCESS;
}

/* ---- linking ----------------------------------------------------------------- */

/* cuLink* as cuBLASLt and cuDNN use it: one image in, the same image out,
 * which the server then JIT-compiles or loads. Linking several objects
 * together needs nvJitLink on the server and is refused with a logged
 * line. */
struct CUlinkState_st {
	uint32_t magic;
	void *image;
	size_t n;
	int inputs;
};
#define LINK_MAGIC 0x67634cffu

CUresult CUDAAPI cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *stateOut)
{
	if (stateOut == NULL || (numOptions > 0 && (options == NULL || optionValues == NULL)))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	struct CUlinkState_st *s = calloc(1, sizeof *s);
	if (s == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	s->magic = LINK_MAGIC;
	*stateOut = s;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
				  unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	(void)name, (void)numOptions, (void)options, (void)optionValues;
	if (state == NULL || state->magic != LINK_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	if (data == NULL || size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_JIT_INPUT_CUBIN && type != CU_JIT_INPUT_PTX && type != CU_JIT_INPUT_FATBINARY) {
		gc_log("cuLinkAddData: input type %d needs the server's linker, which gpuctl does not drive", (int)type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (state->inputs > 0) {
		gc_log("cuLinkAddData: linking more than one input needs the server's linker, which gpuctl does not drive");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (size > GC_MAX_IMAGE)
		return CUDA_ERROR_INVALID_IMAGE;
	state->image = malloc(size + 1);
	if (state->image == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(state->image, data, size);
	((char *)state->image)[size] = 0;
	state->n = size;
	state->inputs++;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
				  CUjit_option *options, void **optionValues)
{
	if (state == NULL || state->magic != LINK_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	if (path == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUlibrary lib;
	CUresult r = cuLibraryLoadFromFile(&lib, path, NULL, NULL, 0, NULL, NULL, 0);
	if (r != CUDA_SUCCESS)
		return r;
	r = cuLinkAddData_v2(state, type, lib->image, lib->n, path, numOptions, options, optionValues);
	free(lib->image);
	free(lib);
	return r;
}

CUresult CUDAAPI cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	if (state == NULL || state->magic != LINK_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	if (cubinOut == NULL || sizeOut == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	if (state->inputs == 0)
		return CUDA_ERROR_INVALID_VALUE;
	*cubinOut = state->image; /* owned by the state until cuLinkDestroy */
	*sizeOut = state->n;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkDestroy(CUlinkState state)
{
	if (state == NULL || state->magic != LINK_MAGIC)
		return CUDA_ERROR_INVALID_HANDLE;
	state->magic = 0;
	free(state->image);
	free(state);
	return CUDA_SUCCESS;
}

/* ---- cuLaunchKernelEx ---------------------------------------------------------- */

static void log_once(int *once, const char *what)
{
	if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED))
		gc_log("%s", what);
}

/* launch_ex queues a launch with thread-block clusters or a cooperative
 * one, which the server makes with cuLaunchKernelEx (the LaunchEx op), or
 * records it into a capture. As cuLaunchKernel: no lock and no
 * allocation once the function has been launched. */
static CUresult launch_ex(const CUlaunchConfig *c, CUfunction fn, const unsigned int cluster[3], uint32_t flags,
			  void **kernelParams, void **extra)
{
	static int no_clusters, no_coop;
	static const CUdevice_attribute support[2] = { CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH,
						       CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH };
	if (fn == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	const unsigned int grid[3] = { c->gridDimX, c->gridDimY, c->gridDimZ };
	const unsigned int block[3] = { c->blockDimX, c->blockDimY, c->blockDimZ };
	uint64_t ctx;
	struct CUfunc_st *f;
	int can[2];
	CUresult r = gc_current_ctx(&ctx);
	if (r == CUDA_SUCCESS)
		r = gc_func_resolve(fn, ctx, &f);
	if (r == CUDA_SUCCESS)
		r = gc_launch_check(f, grid, block, c->sharedMemBytes);
	/* The check has learnt the function's device. */
	if (r == CUDA_SUCCESS)
		r = gc_dev_attrs(atomic_load_explicit(&f->launch_dev, memory_order_acquire) - 1, 2, support, can);
	if (r != CUDA_SUCCESS)
		return r;
	if ((uint64_t)cluster[0] * cluster[1] * cluster[2] > 1 && !can[0]) {
		log_once(&no_clusters, "cuLaunchKernelEx: the device does not support thread-block clusters "
				       "(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH is 0); returning CUDA_ERROR_NOT_SUPPORTED");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if ((flags & GC_LAUNCH_COOPERATIVE) && !can[1]) {
		log_once(&no_coop, "cooperative launch: the device does not support it "
				   "(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH is 0); returning CUDA_ERROR_NOT_SUPPORTED");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	/* The grid must be made of whole clusters; the server's driver
	 * checks the cluster's size against the kernel and the device. */
	if (grid[0] % cluster[0] != 0 || grid[1] % cluster[1] != 0 || grid[2] % cluster[2] != 0)
		return CUDA_ERROR_INVALID_CLUSTER_SIZE;
	if (gc_capture_active() &&
	    gc_cap_launch(f, grid, block, c->sharedMemBytes, cluster, flags, c->hStream, kernelParams, extra, &r))
		return r;
	return gc_launch_queue(ctx, f, grid, block, c->sharedMemBytes, cluster, flags, c->hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	if (config == NULL || (config->numAttrs > 0 && config->attrs == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	unsigned int cluster[3] = { 1, 1, 1 };
	uint32_t flags = 0;
	for (unsigned int i = 0; i < config->numAttrs; i++) {
		const CUlaunchAttribute *a = &config->attrs[i];
		switch (a->id) {
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
			if (a->value.cooperative != 0)
				flags |= GC_LAUNCH_COOPERATIVE;
			break;
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
			if (a->value.clusterDim.x == 0 || a->value.clusterDim.y == 0 || a->value.clusterDim.z == 0)
				return CUDA_ERROR_INVALID_CLUSTER_SIZE;
			cluster[0] = a->value.clusterDim.x;
			cluster[1] = a->value.clusterDim.y;
			cluster[2] = a->value.clusterDim.z;
			break;
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
		case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
		case CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE:
			gc_log("cuLaunchKernelEx: launch attribute %d is not supported", (int)a->id);
			return CUDA_ERROR_NOT_SUPPORTED;
		default:
			/* Hints that never change a result: priority, cache and
			 * memory-sync policies, preferred cluster shapes and
			 * carveouts, the cluster scheduling policy, and
			 * programmatic serialization (which only relaxes the
			 * stream order the server keeps anyway). */
			break;
		}
	}
	if (gc_launch_ex(cluster, flags))
		return launch_ex(config, f, cluster, flags, kernelParams, extra);
	return cuLaunchKernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
			      config->blockDimZ, config->sharedMemBytes, config->hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
					   unsigned int by, unsigned int bz, unsigned int shared, CUstream s,
					   void **kernelParams)
{
	static const unsigned int one[3] = { 1, 1, 1 };
	CUlaunchConfig c = { gx, gy, gz, bx, by, bz, shared, s, NULL, 0 };
	return launch_ex(&c, f, one, GC_LAUNCH_COOPERATIVE, kernelParams, NULL);
}

/* ---- occupancy ------------------------------------------------------------------ */

/* The per-SM limits of a device, from the client's cache of device
 * attributes (gc_cache.c), which fetches them all with one round trip. */
struct smlimits {
	int sms, warp, threads_sm, blocks_sm, regs_sm, regs_block, smem_sm, smem_optin, smem_reserved, cc_major;
};

static CUresult sm_limits(CUdevice dev, struct smlimits *out)
{
	static const CUdevice_attribute attrs[] = {
		CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,          CU_DEVICE_ATTRIBUTE_WARP_SIZE,
		CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR,
		CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK,
		CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
		CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
	};
	int v[sizeof attrs / sizeof attrs[0]];
	for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
		CUresult r = gc_dev_attr((int32_t)attrs[i], dev, &v[i]);
		if (r != CUDA_SUCCESS)
			return r;
	}
	struct smlimits l = { v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9] };
	if (l.warp <= 0 || l.threads_sm <= 0 || l.blocks_sm <= 0 || l.sms <= 0)
		return CUDA_ERROR_UNKNOWN;
	*out = l;
	return CUDA_SUCCESS;
}

/* What a function needs per block, from its (cached) attributes. */
struct fneeds {
	int max_threads, regs, smem_static, max_dyn;
};

/* What an occupancy answer is computed from: the function (in the calling
 * thread's context), what it needs per block and its device's per-SM
 * limits. */
struct occ {
	struct CUfunc_st *f;
	struct fneeds n;
	struct smlimits l;
	int refreshed; /* the dynamic shared memory limit was asked again */
};

static int64_t func_attr_checked(struct CUfunc_st *f, CUfunction_attribute attrib, uint64_t need);

static CUresult occ_inputs(CUfunction fn, struct occ *o)
{
	struct CUfunc_st *f;
	CUresult r = resolve_current(fn, &f);
	if (r != CUDA_SUCCESS)
		return r;
	struct fneeds *need = &o->n;
	o->f = f;
	o->refreshed = 0;
	if ((r = func_get_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &need->max_threads)) != CUDA_SUCCESS ||
	    (r = func_get_attr(f, CU_FUNC_ATTRIBUTE_NUM_REGS, &need->regs)) != CUDA_SUCCESS ||
	    (r = func_get_attr(f, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &need->smem_static)) != CUDA_SUCCESS ||
	    (r = func_get_attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &need->max_dyn)) != CUDA_SUCCESS) {
		const char *d = getenv("GPUCTL_DEBUG");
		if (d != NULL && d[0] == '2')
			gc_log("occupancy attributes of %s: error %d", f->name ? f->name : "?", (int)r);
		return r;
	}
	CUdevice dev;
	r = cuCtxGetDevice_v2(&dev, (CUcontext)(uintptr_t)f->ctx);
	if (r == CUDA_SUCCESS)
		r = sm_limits(dev, &o->l);
	const char *d = getenv("GPUCTL_DEBUG");
	if (r != CUDA_SUCCESS && d != NULL && d[0] == '2')
		gc_log("occupancy inputs of %s: error %d", f->name ? f->name : "?", (int)r);
	return r;
}

static int ceil_to(int v, int g) { return g > 0 ? (v + g - 1) / g * g : v; }

/* active_blocks is the occupancy calculator's answer: the blocks of
 * block_size threads and dyn bytes of dynamic shared memory that fit on
 * one SM at once, limited by warps, blocks, registers and shared memory.
 * Registers are allocated per warp in units of 256, shared memory per
 * block in units of 128 bytes plus the driver's reserve. */
static int active_blocks_calc(const struct fneeds *n, const struct smlimits *l, int block_size, size_t dyn);

/* GPUCTL_DEBUG=2 logs every occupancy answer with what it was computed
 * from, to compare against the driver's. */
static int active_blocks(const struct fneeds *n, const struct smlimits *l, int block_size, size_t dyn)
{
	int v = active_blocks_calc(n, l, block_size, dyn);
	const char *d = getenv("GPUCTL_DEBUG");
	if (d != NULL && d[0] == '2')
		gc_log("occupancy: block %d dyn %zu -> %d (fn: maxthr %d regs %d static %d maxdyn %d; sm: warp %d blocks %d threads %d regs %d/%d smem %d optin %d reserved %d sms %d cc %d)",
		       block_size, dyn, v, n->max_threads, n->regs, n->smem_static, n->max_dyn, l->warp, l->blocks_sm,
		       l->threads_sm, l->regs_sm, l->regs_block, (int)l->smem_sm, (int)l->smem_optin, (int)l->smem_reserved,
		       l->sms, l->cc_major);
	return v;
}

static int active_blocks_calc(const struct fneeds *n, const struct smlimits *l, int block_size, size_t dyn)
{
	if (block_size <= 0 || block_size > n->max_threads)
		return 0;
	if ((int64_t)dyn > n->max_dyn || (int64_t)dyn + n->smem_static > l->smem_optin)
		return 0;
	int warps = (block_size + l->warp - 1) / l->warp;
	int lim = l->blocks_sm;
	int by_warps = (l->threads_sm / l->warp) / warps;
	if (by_warps < lim)
		lim = by_warps;
	if (n->regs > 0) {
		int per_warp = ceil_to(n->regs * l->warp, 256);
		if ((int64_t)n->regs * block_size > l->regs_block)
			return 0;
		int by_regs = (l->regs_sm / per_warp) / warps;
		if (by_regs < lim)
			lim = by_regs;
	}
	int64_t smem = (int64_t)n->smem_static + (int64_t)dyn;
	if (smem > 0) {
		int64_t per_block = ceil_to((int)smem, 128) + l->smem_reserved;
		int by_smem = (int)((l->smem_sm) / per_block);
		if (by_smem < lim)
			lim = by_smem;
	}
	return lim < 0 ? 0 : lim;
}

/* occ_blocks is active_blocks for o's function. A request for more
 * dynamic shared memory than the function's cached limit asks the server
 * for the limit again first (once per call), as a launch does: it may have
 * been raised through another handle of the kernel. */
static int occ_blocks(struct occ *o, int block_size, size_t dyn)
{
	if ((int64_t)dyn > o->n.max_dyn && !o->refreshed) {
		o->refreshed = 1;
		o->n.max_dyn = (int)func_attr_checked(o->f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, dyn);
	}
	return active_blocks(&o->n, &o->l, block_size, dyn);
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *numBlocks, CUfunction func, int blockSize,
								      size_t dynamicSMemSize, unsigned int flags)
{
	if (numBlocks == NULL || (flags & ~1u) != 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct occ o;
	CUresult r = occ_inputs(func, &o);
	if (r == CUDA_SUCCESS)
		*numBlocks = occ_blocks(&o, blockSize, dynamicSMemSize);
	return r;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks, CUfunction func, int blockSize,
							     size_t dynamicSMemSize)
{
	return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

/* The block size with the most resident threads per SM, the largest
 * such when several tie, and the grid that fills the device with it. The
 * callback, when given, says how much dynamic shared memory a block of
 * each size needs. */
CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize, CUfunction func,
							   CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
							   int blockSizeLimit, unsigned int flags)
{
	if (minGridSize == NULL || blockSize == NULL || (flags & ~1u) != 0 || blockSizeLimit < 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct occ o;
	CUresult r = occ_inputs(func, &o);
	if (r != CUDA_SUCCESS)
		return r;
	int top = o.n.max_threads;
	if (blockSizeLimit > 0 && blockSizeLimit < top)
		top = blockSizeLimit;
	int best = 0, best_blocks = 0, best_threads = 0;
	for (int bs = ceil_to(top, o.l.warp); bs > 0; bs -= o.l.warp) {
		int size = bs > top ? top : bs;
		size_t dyn = blockSizeToDynamicSMemSize ? blockSizeToDynamicSMemSize(size) : dynamicSMemSize;
		int blocks = occ_blocks(&o, size, dyn);
		if (blocks * size > best_threads) {
			best = size;
			best_blocks = blocks;
			best_threads = blocks * size;
		}
		if (best_threads == o.l.threads_sm)
			break; /* the SM is full; smaller blocks cannot beat it */
	}
	*blockSize = best;
	*minGridSize = best_blocks * o.l.sms;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
						  CUoccupancyB2DSize blockSizeToDynamicSMemSize, size_t dynamicSMemSize,
						  int blockSizeLimit)
{
	return cuOccupancyMaxPotentialBlockSizeWithFlags(minGridSize, blockSize, func, blockSizeToDynamicSMemSize,
							 dynamicSMemSize, blockSizeLimit, 0);
}

CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize, CUfunction func, int numBlocks, int blockSize)
{
	if (dynamicSmemSize == NULL || numBlocks <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	struct occ o;
	CUresult r = occ_inputs(func, &o);
	if (r != CUDA_SUCCESS)
		return r;
	const struct fneeds *n = &o.n;
	const struct smlimits *l = &o.l;
	if (active_blocks(n, l, blockSize, 0) < numBlocks) {
		*dynamicSmemSize = 0;
		return CUDA_SUCCESS;
	}
	int64_t per_block = l->smem_sm / numBlocks - l->smem_reserved;
	per_block = per_block / 128 * 128 - n->smem_static;
	if (per_block > l->smem_optin - n->smem_static)
		per_block = l->smem_optin - n->smem_static;
	*dynamicSmemSize = per_block > 0 ? (size_t)per_block : 0;
	return CUDA_SUCCESS;
}

/* ---- thread-block cluster occupancy ----------------------------------------------- */

/* How many clusters fit on a device depends on how its SMs are grouped
 * (a cluster runs within one GPC, and GPCs differ in SM count), which the
 * driver knows and device attributes do not say. The server's driver
 * answers, once per function, launch shape and question; the answer is
 * kept until an attribute of the function is set (its dynamic shared
 * memory, its cluster sizes). A server without a driver of its own (the
 * emulated device) says so, and the client computes an upper bound: every
 * SM's blocks grouped freely. */
enum { CLUSTER_MAX_ACTIVE = 0, CLUSTER_MAX_SIZE = 1 }; /* backend.ClusterQuery */
#define CLUSTER_CACHE 256
static struct {
	pthread_mutex_t mu;
	struct cluster_answer {
		struct CUfunc_st *f;
		uint32_t gen, query;
		uint64_t epoch;
		uint32_t shape[10]; /* grid, block, shared bytes, cluster (0: unspecified) */
		CUresult r;
		int value;
	} e[CLUSTER_CACHE];
	uint64_t local; /* 1 + the connection epoch in which the server left clusters to the client */
} clusters = { .mu = PTHREAD_MUTEX_INITIALIZER };

static unsigned cluster_slot(const struct CUfunc_st *f, uint32_t query, const uint32_t shape[10])
{
	uint64_t h = (uint64_t)(uintptr_t)f * 0x9e3779b97f4a7c15ull ^ query;
	for (int i = 0; i < 10; i++)
		h = (h ^ shape[i]) * 0x100000001b3ull;
	return (unsigned)(h >> 32) % CLUSTER_CACHE;
}

/* cluster_local: the client's answer, from the function's attributes and
 * the device's per-SM limits. A launch names its cluster shape or the
 * function was compiled with one; a shape past 8 blocks needs the
 * function's permission for non-portable sizes, and none past 16 exists. */
static CUresult cluster_local(struct occ *o, const uint32_t shape[10], uint32_t query, int *out)
{
	int req[3];
	for (int i = 0; i < 3; i++)
		if (func_get_attr(o->f, (CUfunction_attribute)(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH + i), &req[i]) != CUDA_SUCCESS)
			req[i] = 0;
	int required = req[0] > 0 && req[1] > 0 && req[2] > 0;
	int64_t dims[3] = { shape[7], shape[8], shape[9] };
	int given = dims[0] > 0;
	if (given && required && (dims[0] != req[0] || dims[1] != req[1] || dims[2] != req[2]))
		return CUDA_ERROR_INVALID_CLUSTER_SIZE;
	if (!given && required)
		dims[0] = req[0], dims[1] = req[1], dims[2] = req[2];
	int non_portable = 0;
	if (func_get_attr(o->f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, &non_portable) != CUDA_SUCCESS)
		non_portable = 0;
	int largest = o->l.cc_major < 9 ? 1 : non_portable ? 16 : 8;
	int block = (int)((uint64_t)shape[3] * shape[4] * shape[5]);
	int per_sm = occ_blocks(o, block, shape[6]);
	if (query == CLUSTER_MAX_SIZE) {
		/* The shape a launch would use, or the largest one allowed. */
		int64_t cs = given || required ? dims[0] * dims[1] * dims[2] : largest;
		*out = per_sm == 0 || cs > largest ? 0 : (int)cs;
		return CUDA_SUCCESS;
	}
	if (!given && !required)
		return CUDA_ERROR_INVALID_CLUSTER_SIZE; /* the size must come from somewhere */
	int64_t cs = dims[0] * dims[1] * dims[2];
	if (cs <= 0 || cs > largest)
		return CUDA_ERROR_INVALID_CLUSTER_SIZE;
	*out = (int)((int64_t)per_sm * o->l.sms / cs);
	return CUDA_SUCCESS;
}

static CUresult cluster_query(CUfunction func, const CUlaunchConfig *config, uint32_t query, int *out)
{
	if (out == NULL || config == NULL || (config->numAttrs > 0 && config->attrs == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	uint32_t shape[10] = { config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX, config->blockDimY,
			       config->blockDimZ, config->sharedMemBytes, 0, 0, 0 };
	for (unsigned int i = 0; i < config->numAttrs; i++) {
		const CUlaunchAttribute *a = &config->attrs[i];
		if (a->id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION)
			continue;
		if (a->value.clusterDim.x == 0 || a->value.clusterDim.y == 0 || a->value.clusterDim.z == 0)
			return CUDA_ERROR_INVALID_CLUSTER_SIZE;
		shape[7] = a->value.clusterDim.x, shape[8] = a->value.clusterDim.y, shape[9] = a->value.clusterDim.z;
	}
	struct CUfunc_st *f;
	CUresult r = resolve_current(func, &f);
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t ep = gc_epoch();
	uint32_t gen = atomic_load_explicit(&f->gen, memory_order_acquire);
	unsigned k = cluster_slot(f, query, shape);
	int cache = !gc_cache_off();
	pthread_mutex_lock(&clusters.mu);
	const struct cluster_answer *e = &clusters.e[k];
	int hit = cache && e->f == f && e->gen == gen && e->epoch == ep && e->query == query &&
		  memcmp(e->shape, shape, sizeof shape) == 0;
	int local = clusters.local == ep + 1;
	struct cluster_answer found = *e;
	pthread_mutex_unlock(&clusters.mu);
	if (hit) {
		if (found.r == CUDA_SUCCESS)
			*out = found.value;
		return found.r;
	}
	if (!local) {
		int32_t v = 0;
		r = gc_rpc_OccupancyClusters(f->ctx, f->h, shape[0], shape[1], shape[2], shape[3], shape[4], shape[5],
					     shape[6], shape[7], shape[8], shape[9], query, &v);
		if (r != CUDA_ERROR_NOT_SUPPORTED) {
			/* Kept: answers, not an error of earlier asynchronous work
			 * that the call happened to report. */
			if (r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_CLUSTER_SIZE) {
				pthread_mutex_lock(&clusters.mu);
				struct cluster_answer *w = &clusters.e[k];
				w->f = f, w->gen = gen, w->query = query, w->epoch = ep, w->r = r, w->value = v;
				memcpy(w->shape, shape, sizeof shape);
				pthread_mutex_unlock(&clusters.mu);
			}
			if (r == CUDA_SUCCESS)
				*out = v;
			return r;
		}
		pthread_mutex_lock(&clusters.mu);
		clusters.local = ep + 1;
		pthread_mutex_unlock(&clusters.mu);
	}
	struct occ o;
	if ((r = occ_inputs(func, &o)) != CUDA_SUCCESS)
		return r;
	return cluster_local(&o, shape, query, out);
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config)
{
	return cluster_query(func, config, CLUSTER_MAX_ACTIVE, numClusters);
}

CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func, const CUlaunchConfig *config)
{
	return cluster_query(func, config, CLUSTER_MAX_SIZE, clusterSize);
}

/* ---- launch configuration checks ----------------------------------------------- */

/* NVIDIA's driver refuses a bad configuration when the launch is made
 * (CUDA 13's cudart leaves the checks to it and reports
 * cudaErrorInvalidValue). A launch here is queued without waiting, so the
 * server's own checks would surface only at the next synchronising call:
 * the client checks first, against its device's limits (from the one
 * attribute cache, gc_cache.c) and the function's cached attributes. */
static const CUdevice_attribute launch_limits[7] = {
	CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
	CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,       CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
	CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,        CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
	CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
};

/* launch_first fetches what the checks need on a function's first
 * launch: its maximum block size and maximum dynamic shared memory (both
 * cached in the function from then on, the latter updated by
 * cuFuncSetAttribute), and its device, from the contexts this process
 * knows when it can. */
static CUresult launch_first(struct CUfunc_st *f, int *dev)
{
	int v;
	CUresult r = func_get_attr(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &v);
	if (r == CUDA_SUCCESS)
		r = func_get_attr(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &v);
	if (r == CUDA_SUCCESS)
		r = gc_ctx_dev(f->ctx, dev);
	/* An error here may also be one of earlier asynchronous work, which
	 * a synchronous call reports once: the launch returns it, as CUDA
	 * calls may, and the next launch asks again. */
	if (r != CUDA_SUCCESS)
		return r;
	atomic_store_explicit(&f->launch_dev, *dev + 1, memory_order_release);
	return CUDA_SUCCESS;
}

/* func_attr_checked is the function's cached limit attrib, asked of the
 * server again before a launch that needs more is refused: the limit may
 * have been raised through another handle of the same kernel (cudart and
 * the math libraries set it on a CUkernel or on a CUfunction they got from
 * one, then launch through a third), which this cache does not see. Only
 * the refusal path pays the round trip. */
static int64_t func_attr_checked(struct CUfunc_st *f, CUfunction_attribute attrib, uint64_t need)
{
	int64_t have = __atomic_load_n(&f->attrs[attrib], __ATOMIC_RELAXED);
	if ((uint64_t)have >= need)
		return have;
	atomic_fetch_and_explicit(&f->attr_known, ~(1u << attrib), memory_order_acq_rel);
	int v;
	if (func_get_attr(f, attrib, &v) != CUDA_SUCCESS)
		return have;
	return v;
}

static CUresult launch_refused(struct CUfunc_st *f, CUresult r, const char *why, const unsigned int grid[3],
			       const unsigned int block[3], unsigned int shared)
{
	/* Logged under GPUCTL_DEBUG only, and at most a few times: a program
	 * probing configurations may be refused on purpose. */
	static atomic_int logged;
	if (getenv("GPUCTL_DEBUG") != NULL && atomic_fetch_add(&logged, 1) < 16)
		gc_log("launch of %s refused (%s): grid %ux%ux%u block %ux%ux%u shared %u", f->name && f->name[0] ? f->name : "?", why,
		       grid[0], grid[1], grid[2], block[0], block[1], block[2], shared);
	return r;
}

CUresult gc_launch_check(struct CUfunc_st *f, const unsigned int grid[3], const unsigned int block[3], unsigned int shared)
{
	int dev = atomic_load_explicit(&f->launch_dev, memory_order_acquire) - 1, lim[7];
	CUresult r = dev < 0 ? launch_first(f, &dev) : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS)
		r = gc_dev_attrs(dev, 7, launch_limits, lim);
	if (r != CUDA_SUCCESS)
		return r;
	for (int i = 0; i < 3; i++) {
		if (grid[i] == 0 || block[i] == 0)
			return launch_refused(f, CUDA_ERROR_INVALID_VALUE, "zero dimension", grid, block, shared);
		if (grid[i] > (unsigned)lim[4 + i] || block[i] > (unsigned)lim[1 + i])
			return launch_refused(f, CUDA_ERROR_INVALID_VALUE, "past the device's grid or block limit", grid, block, shared);
	}
	uint64_t threads = (uint64_t)block[0] * block[1] * block[2];
	if (threads > (uint64_t)(unsigned)lim[0])
		return launch_refused(f, CUDA_ERROR_INVALID_VALUE, "past the device's threads per block", grid, block, shared);
	/* The function's own limits: dynamic shared memory beyond what it
	 * allows (48 KiB less its static memory unless raised with
	 * cuFuncSetAttribute) is an invalid value; more threads than its
	 * registers or launch bounds allow is "too many resources requested". */
	if ((int64_t)shared > (int64_t)func_attr_checked(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared))
		return launch_refused(f, CUDA_ERROR_INVALID_VALUE, "past the function's dynamic shared memory", grid, block, shared);
	if (threads > (uint64_t)func_attr_checked(f, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, threads))
		return launch_refused(f, CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "past the function's threads per block", grid, block, shared);
	return CUDA_SUCCESS;
}

/* ---- per-thread default stream forms ---------------------------------------------- */

/* The _ptsz/_ptds forms read a NULL stream as the calling thread's
 * default stream. The server runs the legacy and per-thread default
 * streams of a context as one stream, which orders more strictly than
 * CUDA does and so keeps every program correct. */
#define PT(s) ((s) == NULL ? CU_STREAM_PER_THREAD : (s))

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
				     unsigned int by, unsigned int bz, unsigned int shared, CUstream s, void **kernelParams,
				     void **extra)
{
	return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared, PT(s), kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams, void **extra)
{
	if (config == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUlaunchConfig c = *config;
	c.hStream = PT(c.hStream);
	return cuLaunchKernelEx(&c, f, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
						unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, CUstream s,
						void **kernelParams)
{
	return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared, PT(s), kernelParams);
}

CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) { return cuMemcpy(dst, src, n); }
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return cuMemcpyAsync(dst, src, n, PT(s));
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *h, size_t n) { return cuMemcpyHtoD_v2(d, h, n); }
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *h, CUdeviceptr d, size_t n) { return cuMemcpyDtoH_v2(h, d, n); }
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return cuMemcpyDtoD_v2(d, s, n); }
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
	return cuMemcpyHtoDAsync_v2(d, h, n, PT(s));
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *h, CUdeviceptr d, size_t n, CUstream s)
{
	return cuMemcpyDtoHAsync_v2(h, d, n, PT(s));
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr src, size_t n, CUstream s)
{
	return cuMemcpyDtoDAsync_v2(d, src, n, PT(s));
}
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return cuMemsetD8_v2(d, v, n); }
CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) { return cuMemsetD16_v2(d, v, n); }
CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return cuMemsetD32_v2(d, v, n); }
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s)
{
	return cuMemsetD8Async(d, v, n, PT(s));
}
CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s)
{
	return cuMemsetD16Async(d, v, n, PT(s));
}
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s)
{
	return cuMemsetD32Async(d, v, n, PT(s));
}
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream s) { return cuStreamQuery(PT(s)); }
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s) { return cuStreamSynchronize(PT(s)); }
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags) { return cuStreamWaitEvent(PT(s), e, flags); }
CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream s) { return cuEventRecord(e, PT(s)); }
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{
	return cuEventRecordWithFlags(e, PT(s), flags);
}

/* ---- names older libraries resolve ------------------------------------------------- */

/* cuBLAS and cuBLASLt dlsym the pre-CUDA 4.0 names of the context stack
 * calls; their arguments are those of the _v2 forms. */
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return cuCtxPushCurrent_v2(ctx); }
/* The CUDA 5.0 linker calls, which cuGetProcAddress hands out for
 * versions before 6.5: NVIDIA's driver exports them with the same
 * arguments as the _v2 forms. */
CUresult CUDAAPI cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *stateOut)
{
	return cuLinkCreate_v2(numOptions, options, optionValues, stateOut);
}
CUresult CUDAAPI cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
			       unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	return cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues);
}
CUresult CUDAAPI cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
			       CUjit_option *options, void **optionValues)
{
	return cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues);
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx) { return cuCtxPopCurrent_v2(pctx); }

/* ---- profiler control ----------------------------------------------------------------- */

/* NVIDIA declares these in cudaProfiler.h, not cuda.h. No profiler can
 * attach to the remote GPU through gpuctl; with none attached NVIDIA's
 * driver accepts them and does nothing, which cudaProfilerStart/Stop
 * (NVIDIA's matrixMul sample) rely on. */
CUresult CUDAAPI cuProfilerInitialize(const char *configFile, const char *outputFile, int outputMode);
CUresult CUDAAPI cuProfilerStart(void);
CUresult CUDAAPI cuProfilerStop(void);

CUresult CUDAAPI cuProfilerInitialize(const char *configFile, const char *outputFile, int outputMode)
{
	(void)configFile, (void)outputFile, (void)outputMode;
	uint64_t c;
	return gc_current_ctx(&c);
}

CUresult CUDAAPI cuProfilerStart(void)
{
	uint64_t c;
	return gc_current_ctx(&c);
}

CUresult CUDAAPI cuProfilerStop(void)
{
	uint64_t c;
	return gc_current_ctx(&c);
}
