/* Memory pools and stream-ordered allocation (cuMemAllocAsync), the
 * calls behind PyTorch's cudaMallocAsync allocator, and virtual memory
 * management (cuMemAddressReserve, cuMemCreate, cuMemMap), the calls
 * behind its expandable segments. Pools, physical allocations and
 * reservations live on the server; the client keeps the device ranges
 * they make usable (so cuMemcpy and pointer queries know them) and the
 * properties of each physical allocation it created. */
#define _GNU_SOURCE /* memfd_create */
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "gc_core.h"
#include "gc_ext.h"
#include "../gen/gc_ops.h"
#include "../gen/gc_undef.h"

/* ---- pools ------------------------------------------------------------- */

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	if (pool_out == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t p;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS && (r = gc_rpc_DeviceGetDefaultMemPool(dev, &p)) == CUDA_SUCCESS)
		*pool_out = (CUmemoryPool)(uintptr_t)p;
	return r;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t p;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS && (r = gc_rpc_DeviceGetMemPool(dev, &p)) == CUDA_SUCCESS)
		*pool = (CUmemoryPool)(uintptr_t)p;
	return r;
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_rpc_DeviceSetMemPool(dev, GC_H(pool));
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	if (pool == NULL || poolProps == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t p;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemPoolCreate((uint32_t)poolProps->allocType, (uint32_t)poolProps->handleTypes,
					 (uint32_t)poolProps->location.type, poolProps->location.id, poolProps->maxSize, &p);
	if (r == CUDA_SUCCESS)
		*pool = (CUmemoryPool)(uintptr_t)p;
	return r;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool)
{
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_rpc_MemPoolDestroy(GC_H(pool));
}

/* Pool attributes 1 to 3 are ints, the others cuuint64_t. */
static int pool_attr_is_int(CUmemPool_attribute attr) { return attr < CU_MEMPOOL_ATTR_RELEASE_THRESHOLD; }

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	if (pool == NULL || value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t v = pool_attr_is_int(attr) ? (uint64_t)(uint32_t) * (int *)value : *(cuuint64_t *)value;
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_rpc_MemPoolSetAttribute(GC_H(pool), (int32_t)attr, v);
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	if (pool == NULL || value == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t v;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemPoolGetAttribute(GC_H(pool), (int32_t)attr, &v);
	if (r != CUDA_SUCCESS)
		return r;
	if (pool_attr_is_int(attr))
		*(int *)value = (int)v;
	else
		*(cuuint64_t *)value = v;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_rpc_MemPoolTrimTo(GC_H(pool), minBytesToKeep);
}

/* check_location accepts the session's devices as memory locations. */
static CUresult check_location(const CUmemLocation *loc)
{
	if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	int32_t n;
	CUresult r = gc_dev_count(&n);
	if (r != CUDA_SUCCESS)
		return r;
	return loc->id >= 0 && loc->id < n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Access to a pool's memory: the session's GPU is the pool's own device,
 * which always has read-write access, and has no peers to grant it to. */
CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	if (pool == NULL || (count > 0 && map == NULL))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
		r = check_location(&map[i].location);
		if (r == CUDA_SUCCESS && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			r = CUDA_ERROR_INVALID_DEVICE; /* the owning device's access cannot be lowered */
	}
	return r;
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
	if (flags == NULL || memPool == NULL || location == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = check_location(location);
	if (r == CUDA_SUCCESS)
		*flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	return r;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream s)
{
	if (dptr == NULL || bytesize == 0)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx, p;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	/* Allocation nodes are not recorded: a stream-ordered allocation in
	 * a capturing stream is refused and ends the capture. */
	if (gc_capture_active() && gc_cap_refuse(s, &r))
		return r;
	if ((r = gc_rpc_MemAllocAsync(ctx, bytesize, GC_H(pool), GC_S(s), &p)) != CUDA_SUCCESS)
		return r;
	gc_devr_add(p, bytesize, ctx);
	*dptr = p;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	return alloc_async(dptr, bytesize, NULL, hStream);
}

CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream hStream)
{
	if (pool == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_async(dptr, bytesize, pool, hStream);
}

CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (dptr == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (gc_capture_active() && gc_cap_refuse(hStream, &r))
		return r;
	if ((r = gc_rpc_MemFreeAsync_async(ctx, dptr, GC_S(hStream))) == CUDA_SUCCESS)
		gc_devr_del(dptr);
	return r;
}

/* ---- virtual memory management ------------------------------------------------ */

/* The physical allocations this client created, with their properties
 * (cuMemGetAllocationPropertiesFromHandle) and the references it holds on
 * them; and its mappings, which are device ranges while they last. */
static struct {
	pthread_mutex_t mu;
	struct phys {
		uint64_t h;
		CUmemAllocationProp prop;
		int refs;
	} *p;
	size_t np, capp;
	struct vmap {
		uint64_t base, size;
	} *m;
	size_t nm, capm;
} vm = { .mu = PTHREAD_MUTEX_INITIALIZER };

static int grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? 2 * *cap : 16;
	void *na = realloc(*arr, nc * elem);
	if (na == NULL)
		return -1;
	*arr = na;
	*cap = nc;
	return 0;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option)
{
	if (granularity == NULL || prop == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t g;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemGetAllocationGranularity((uint32_t)prop->type, (uint32_t)prop->requestedHandleTypes,
						       (uint32_t)prop->location.type, prop->location.id, (uint32_t)option, &g);
	if (r == CUDA_SUCCESS)
		*granularity = g;
	return r;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				     unsigned long long flags)
{
	if (ptr == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t p;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS && (r = gc_rpc_MemAddressReserve(size, alignment, addr, flags, &p)) == CUDA_SUCCESS)
		*ptr = p;
	return r;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_rpc_MemAddressFree(ptr, size);
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			     unsigned long long flags)
{
	if (handle == NULL || prop == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t h;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemCreate(size, (uint32_t)prop->type, (uint32_t)prop->requestedHandleTypes,
				     (uint32_t)prop->location.type, prop->location.id, prop->allocFlags.compressionType, flags, &h);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&vm.mu);
	if (grow((void **)&vm.p, &vm.capp, vm.np, sizeof *vm.p) == 0)
		vm.p[vm.np++] = (struct phys){ h, *prop, 1 };
	pthread_mutex_unlock(&vm.mu);
	*handle = h;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemRelease(handle);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&vm.mu);
	for (size_t i = 0; i < vm.np; i++) {
		if (vm.p[i].h == handle) {
			if (--vm.p[i].refs == 0)
				vm.p[i] = vm.p[--vm.np];
			break;
		}
	}
	pthread_mutex_unlock(&vm.mu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
	if (prop == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&vm.mu);
	for (size_t i = 0; i < vm.np; i++) {
		if (vm.p[i].h == handle) {
			*prop = vm.p[i].prop;
			r = CUDA_SUCCESS;
			break;
		}
	}
	pthread_mutex_unlock(&vm.mu);
	return r;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
	if (handle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t h;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemRetainAllocationHandle((uint64_t)(uintptr_t)addr, &h);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&vm.mu);
	for (size_t i = 0; i < vm.np; i++)
		if (vm.p[i].h == h)
			vm.p[i].refs++;
	pthread_mutex_unlock(&vm.mu);
	*handle = h;
	return CUDA_SUCCESS;
}

/* Shareable handles. A POSIX file descriptor exported here is a memfd
 * holding a record that names the server's handle and the exporting
 * process; importing it in the same process takes one more reference to
 * that handle on the server (op MemHandleRetain), which cuMemRelease
 * drops. Another process, which has a session of its own, cannot use it:
 * its import fails with CUDA_ERROR_NOT_SUPPORTED and says why. Other
 * handle types (fabric, Win32) are not supported. */
struct share_rec {
	uint64_t magic;
	uint64_t pid;
	uint64_t handle;
};
#define SHARE_MAGIC 0x67707563746c6d68ull /* "gpuctlmh" */

CUresult CUDAAPI cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
					      CUmemAllocationHandleType handleType, unsigned long long flags)
{
	if (shareableHandle == NULL || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
		gc_log("cuMemExportToShareableHandle: handle type %d is not supported (only POSIX file descriptors, within one process)",
		       (int)handleType);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	/* The allocation must have asked for this handle type, as with
	 * NVIDIA's driver. */
	int known = 0, allowed = 0;
	pthread_mutex_lock(&vm.mu);
	for (size_t i = 0; i < vm.np; i++) {
		if (vm.p[i].h == handle) {
			known = 1;
			allowed = (vm.p[i].prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
			break;
		}
	}
	pthread_mutex_unlock(&vm.mu);
	if (!known || !allowed)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = memfd_create("gpuctl-mem-handle", MFD_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_OPERATING_SYSTEM;
	struct share_rec rec = { SHARE_MAGIC, (uint64_t)getpid(), handle };
	if (pwrite(fd, &rec, sizeof rec, 0) != (ssize_t)sizeof rec) {
		close(fd);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	*(int *)shareableHandle = fd;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
						CUmemAllocationHandleType shHandleType)
{
	if (handle == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
		gc_log("cuMemImportFromShareableHandle: handle type %d is not supported (only POSIX file descriptors, within one process)",
		       (int)shHandleType);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	int fd = (int)(intptr_t)osHandle;
	struct share_rec rec;
	if (fd < 0 || pread(fd, &rec, sizeof rec, 0) != (ssize_t)sizeof rec || rec.magic != SHARE_MAGIC)
		return CUDA_ERROR_INVALID_VALUE;
	if (rec.pid != (uint64_t)getpid()) {
		gc_log("cuMemImportFromShareableHandle: the handle was exported by process %llu; through gpuctl each process has a session of its own, so memory is shared only within one process",
		       (unsigned long long)rec.pid);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if ((r = gc_rpc_MemHandleRetain(rec.handle)) != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&vm.mu);
	for (size_t i = 0; i < vm.np; i++)
		if (vm.p[i].h == rec.handle)
			vm.p[i].refs++;
	pthread_mutex_unlock(&vm.mu);
	*handle = rec.handle;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			  unsigned long long flags)
{
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemMap(ptr, size, offset, handle, flags);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&vm.mu);
	if (grow((void **)&vm.m, &vm.capm, vm.nm, sizeof *vm.m) == 0)
		vm.m[vm.nm++] = (struct vmap){ ptr, size };
	pthread_mutex_unlock(&vm.mu);
	/* Mapped memory belongs to no context. */
	gc_devr_add(ptr, size, 0);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS)
		r = gc_rpc_MemUnmap(ptr, size);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&vm.mu);
	for (size_t i = 0; i < vm.nm;) {
		if (vm.m[i].base >= ptr && vm.m[i].base + vm.m[i].size <= ptr + size) {
			gc_devr_del(vm.m[i].base);
			vm.m[i] = vm.m[--vm.nm];
			continue;
		}
		i++;
	}
	pthread_mutex_unlock(&vm.mu);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	if (desc == NULL || count == 0 || count > 64)
		return CUDA_ERROR_INVALID_VALUE;
	uint8_t buf[64 * 12];
	for (size_t i = 0; i < count; i++) {
		gc_put_u32(buf + 12 * i, (uint32_t)desc[i].location.type);
		gc_put_u32(buf + 12 * i + 4, (uint32_t)desc[i].location.id);
		gc_put_u32(buf + 12 * i + 8, (uint32_t)desc[i].flags);
	}
	CUresult r = gc_ready();
	return r != CUDA_SUCCESS ? r : gc_rpc_MemSetAccess(ptr, size, buf, (uint32_t)(12 * count));
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	if (flags == NULL || location == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t f;
	CUresult r = gc_ready();
	if (r == CUDA_SUCCESS && (r = gc_rpc_MemGetAccess((uint32_t)location->type, location->id, ptr, &f)) == CUDA_SUCCESS)
		*flags = f;
	return r;
}
