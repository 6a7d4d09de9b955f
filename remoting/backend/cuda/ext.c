// Run-time binding of the driver calls behind backend.Extended (ext.h).
#include "ext.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(CUmemLocation) == 8, "CUmemLocation");
_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp");
_Static_assert(sizeof(CUmemPoolProps) == 88, "CUmemPoolProps");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc");
_Static_assert(sizeof(CUstreamBatchMemOpParams) == 48, "CUstreamBatchMemOpParams");
_Static_assert(sizeof(CUDA_MEMCPY3D) == 200, "CUDA_MEMCPY3D");

enum {
	NOT_SUPPORTED = 801,
	INVALID_VALUE = 1,
	MEMORYTYPE_HOST = 1,
	MEMORYTYPE_DEVICE = 2,
	MEM_OP_WAIT_32 = 1,
	MEM_OP_WRITE_32 = 2,
	MEM_OP_WAIT_64 = 4,
	MEM_OP_WRITE_64 = 5,
	MAX_MEM_OPS = 256,
	POOL_ATTR_RELEASE_THRESHOLD = 4,
};

#define OPT(field, name) (*(void **)(&x->field) = dlsym(a->lib, name))

gc_ext *gc_ext_load(const gc_api *a)
{
	gc_ext *x = calloc(1, sizeof *x);
	if (x == NULL)
		return NULL;
	OPT(cuDeviceGetMemPool, "cuDeviceGetMemPool");
	OPT(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool");
	OPT(cuDeviceSetMemPool, "cuDeviceSetMemPool");
	OPT(cuMemPoolCreate, "cuMemPoolCreate");
	OPT(cuMemPoolDestroy, "cuMemPoolDestroy");
	OPT(cuMemPoolSetAttribute, "cuMemPoolSetAttribute");
	OPT(cuMemPoolGetAttribute, "cuMemPoolGetAttribute");
	OPT(cuMemPoolTrimTo, "cuMemPoolTrimTo");
	OPT(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync");
	OPT(cuMemFreeAsync, "cuMemFreeAsync");
	OPT(cuMemAddressReserve, "cuMemAddressReserve");
	OPT(cuMemAddressFree, "cuMemAddressFree");
	OPT(cuMemCreate, "cuMemCreate");
	OPT(cuMemRelease, "cuMemRelease");
	OPT(cuMemMap, "cuMemMap");
	OPT(cuMemUnmap, "cuMemUnmap");
	OPT(cuMemSetAccess, "cuMemSetAccess");
	OPT(cuMemGetAccess, "cuMemGetAccess");
	OPT(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity");
	OPT(cuMemRetainAllocationHandle, "cuMemRetainAllocationHandle");
	OPT(cuMemExportToShareableHandle, "cuMemExportToShareableHandle");
	OPT(cuMemImportFromShareableHandle, "cuMemImportFromShareableHandle");
	OPT(cuStreamWaitValue32, "cuStreamWaitValue32_v2");
	OPT(cuStreamWaitValue64, "cuStreamWaitValue64_v2");
	OPT(cuStreamWriteValue32, "cuStreamWriteValue32_v2");
	OPT(cuStreamWriteValue64, "cuStreamWriteValue64_v2");
	OPT(cuStreamBatchMemOp, "cuStreamBatchMemOp_v2");
	OPT(cuTensorMapEncodeTiled, "cuTensorMapEncodeTiled");
	OPT(cuTensorMapEncodeIm2col, "cuTensorMapEncodeIm2col");
	OPT(cuMemcpy3DAsync, "cuMemcpy3DAsync_v2");
	OPT(cuMemcpyPeerAsync, "cuMemcpyPeerAsync");
	OPT(cuCtxGetLimit, "cuCtxGetLimit");
	OPT(cuCtxSetLimit, "cuCtxSetLimit");
	OPT(cuOccupancyMaxActiveClusters, "cuOccupancyMaxActiveClusters");
	OPT(cuOccupancyMaxPotentialClusterSize, "cuOccupancyMaxPotentialClusterSize");
	return x;
}

// use makes c current on this thread unless it already is (see api.c).
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

#define NEED(fn)                                                                         \
	do {                                                                             \
		if (x->fn == NULL)                                                       \
			return NOT_SUPPORTED;                                            \
	} while (0)

CUresult gc_pool_get(const gc_ext *x, CUdevice d, int dflt, CUmemoryPool *p)
{
	if (dflt) {
		NEED(cuDeviceGetDefaultMemPool);
		return x->cuDeviceGetDefaultMemPool(p, d);
	}
	NEED(cuDeviceGetMemPool);
	return x->cuDeviceGetMemPool(p, d);
}

CUresult gc_pool_set(const gc_ext *x, CUdevice d, CUmemoryPool p)
{
	NEED(cuDeviceSetMemPool);
	return x->cuDeviceSetMemPool(d, p);
}

CUresult gc_pool_create(const gc_ext *x, int alloc_type, int handle_types, int loc_type, int loc_id,
			size_t max_size, CUmemoryPool *p)
{
	CUmemPoolProps props;
	NEED(cuMemPoolCreate);
	memset(&props, 0, sizeof props);
	props.allocType = alloc_type;
	props.handleTypes = handle_types;
	props.location.type = loc_type;
	props.location.id = loc_id;
	props.maxSize = max_size;
	return x->cuMemPoolCreate(p, &props);
}

CUresult gc_pool_destroy(const gc_ext *x, CUmemoryPool p)
{
	NEED(cuMemPoolDestroy);
	return x->cuMemPoolDestroy(p);
}

// Attributes 1 to 3 are ints, the rest 64-bit sizes.
CUresult gc_pool_set_attr(const gc_ext *x, CUmemoryPool p, int attr, unsigned long long v)
{
	int i = (int)v;
	NEED(cuMemPoolSetAttribute);
	if (attr < POOL_ATTR_RELEASE_THRESHOLD)
		return x->cuMemPoolSetAttribute(p, attr, &i);
	return x->cuMemPoolSetAttribute(p, attr, &v);
}

CUresult gc_pool_get_attr(const gc_ext *x, CUmemoryPool p, int attr, unsigned long long *v)
{
	int i = 0;
	CUresult r;
	NEED(cuMemPoolGetAttribute);
	*v = 0;
	if (attr < POOL_ATTR_RELEASE_THRESHOLD) {
		r = x->cuMemPoolGetAttribute(p, attr, &i);
		*v = (unsigned long long)(unsigned int)i;
		return r;
	}
	return x->cuMemPoolGetAttribute(p, attr, v);
}

CUresult gc_pool_trim(const gc_ext *x, CUmemoryPool p, size_t keep)
{
	NEED(cuMemPoolTrimTo);
	return x->cuMemPoolTrimTo(p, keep);
}

CUresult gc_alloc_async(const gc_api *a, const gc_ext *x, CUcontext c, size_t n, CUmemoryPool p,
			CUstream s, CUdeviceptr *ptr)
{
	NEED(cuMemAllocFromPoolAsync);
	USE(c);
	return x->cuMemAllocFromPoolAsync(ptr, n, p, s);
}

CUresult gc_free_async(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr ptr, CUstream s)
{
	NEED(cuMemFreeAsync);
	USE(c);
	return x->cuMemFreeAsync(ptr, s);
}

CUresult gc_va_reserve(const gc_ext *x, size_t n, size_t align, CUdeviceptr addr,
		       unsigned long long flags, CUdeviceptr *p)
{
	NEED(cuMemAddressReserve);
	return x->cuMemAddressReserve(p, n, align, addr, flags);
}

CUresult gc_va_free(const gc_ext *x, CUdeviceptr p, size_t n)
{
	NEED(cuMemAddressFree);
	return x->cuMemAddressFree(p, n);
}

static void prop_of(CUmemAllocationProp *prop, int alloc_type, int handle_types, int loc_type,
		    int loc_id, int compression)
{
	memset(prop, 0, sizeof *prop);
	prop->type = alloc_type;
	prop->requestedHandleTypes = handle_types;
	prop->location.type = loc_type;
	prop->location.id = loc_id;
	prop->allocFlags.compressionType = (unsigned char)compression;
}

CUresult gc_mem_create(const gc_ext *x, size_t n, int alloc_type, int handle_types, int loc_type,
		       int loc_id, int compression, unsigned long long flags,
		       CUmemGenericAllocationHandle *h)
{
	CUmemAllocationProp prop;
	NEED(cuMemCreate);
	prop_of(&prop, alloc_type, handle_types, loc_type, loc_id, compression);
	return x->cuMemCreate(h, n, &prop, flags);
}

CUresult gc_mem_release(const gc_ext *x, CUmemGenericAllocationHandle h)
{
	NEED(cuMemRelease);
	return x->cuMemRelease(h);
}

CUresult gc_mem_map(const gc_ext *x, CUdeviceptr p, size_t n, size_t off,
		    CUmemGenericAllocationHandle h, unsigned long long flags)
{
	NEED(cuMemMap);
	return x->cuMemMap(p, n, off, h, flags);
}

CUresult gc_mem_unmap(const gc_ext *x, CUdeviceptr p, size_t n)
{
	NEED(cuMemUnmap);
	return x->cuMemUnmap(p, n);
}

// descs: count x (location type, location id, flags).
CUresult gc_mem_set_access(const gc_ext *x, CUdeviceptr p, size_t n, const int *descs, size_t count)
{
	CUmemAccessDesc d[64];
	NEED(cuMemSetAccess);
	if (count > sizeof d / sizeof d[0])
		return INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		d[i].location.type = descs[3 * i];
		d[i].location.id = descs[3 * i + 1];
		d[i].flags = descs[3 * i + 2];
	}
	return x->cuMemSetAccess(p, n, d, count);
}

CUresult gc_mem_get_access(const gc_ext *x, int loc_type, int loc_id, CUdeviceptr p,
			   unsigned long long *flags)
{
	CUmemLocation loc = {loc_type, loc_id};
	NEED(cuMemGetAccess);
	return x->cuMemGetAccess(flags, &loc, p);
}

CUresult gc_mem_granularity(const gc_ext *x, int alloc_type, int handle_types, int loc_type,
			    int loc_id, int option, size_t *g)
{
	CUmemAllocationProp prop;
	NEED(cuMemGetAllocationGranularity);
	prop_of(&prop, alloc_type, handle_types, loc_type, loc_id, 0);
	return x->cuMemGetAllocationGranularity(g, &prop, option);
}

CUresult gc_mem_retain(const gc_ext *x, CUdeviceptr p, CUmemGenericAllocationHandle *h)
{
	NEED(cuMemRetainAllocationHandle);
	return x->cuMemRetainAllocationHandle(h, (void *)(uintptr_t)p);
}

CUresult gc_wait_value(const gc_api *a, const gc_ext *x, CUcontext c, CUstream s, CUdeviceptr p,
		       unsigned long long v, unsigned int flags, int width)
{
	USE(c);
	if (width == 32) {
		NEED(cuStreamWaitValue32);
		return x->cuStreamWaitValue32(s, p, (unsigned int)v, flags);
	}
	NEED(cuStreamWaitValue64);
	return x->cuStreamWaitValue64(s, p, v, flags);
}

CUresult gc_write_value(const gc_api *a, const gc_ext *x, CUcontext c, CUstream s, CUdeviceptr p,
			unsigned long long v, unsigned int flags, int width)
{
	USE(c);
	if (width == 32) {
		NEED(cuStreamWriteValue32);
		return x->cuStreamWriteValue32(s, p, (unsigned int)v, flags);
	}
	NEED(cuStreamWriteValue64);
	return x->cuStreamWriteValue64(s, p, v, flags);
}

CUresult gc_batch_mem_op(const gc_api *a, const gc_ext *x, CUcontext c, CUstream s,
			 unsigned int count, const unsigned long long *ops, unsigned int flags)
{
	CUstreamBatchMemOpParams p[MAX_MEM_OPS];
	NEED(cuStreamBatchMemOp);
	if (count > MAX_MEM_OPS)
		return INVALID_VALUE;
	memset(p, 0, sizeof p[0] * count);
	for (unsigned int i = 0; i < count; i++) {
		const unsigned long long *o = ops + 3 * i;
		p[i].op.operation = (int)(o[0] & 0xffffffffu);
		p[i].op.flags = (unsigned int)(o[0] >> 32);
		p[i].op.address = o[1];
		p[i].op.value = o[2];
		// A 32-bit wait or write reads only the low word of the value.
		if (p[i].op.operation == MEM_OP_WAIT_32 || p[i].op.operation == MEM_OP_WRITE_32)
			p[i].op.value &= 0xffffffffu;
	}
	USE(c);
	return x->cuStreamBatchMemOp(s, count, p, flags);
}

CUresult gc_tensor_map_tiled(const gc_ext *x, void *tm, int type, unsigned int rank, CUdeviceptr addr,
			     const unsigned long long *dims, const unsigned long long *strides,
			     const unsigned int *box, const unsigned int *estrides, int interleave,
			     int swizzle, int l2, int oob)
{
	NEED(cuTensorMapEncodeTiled);
	return x->cuTensorMapEncodeTiled(tm, type, rank, (void *)(uintptr_t)addr, dims, strides, box, estrides, interleave,
					 swizzle, l2, oob);
}

CUresult gc_tensor_map_im2col(const gc_ext *x, void *tm, int type, unsigned int rank, CUdeviceptr addr,
			      const unsigned long long *dims, const unsigned long long *strides,
			      const int *lower, const int *upper, unsigned int channels,
			      unsigned int pixels, const unsigned int *estrides, int interleave,
			      int swizzle, int l2, int oob)
{
	NEED(cuTensorMapEncodeIm2col);
	return x->cuTensorMapEncodeIm2col(tm, type, rank, (void *)(uintptr_t)addr, dims, strides, lower, upper, channels,
					  pixels, estrides, interleave, swizzle, l2, oob);
}

CUresult gc_copy3d(const gc_api *a, const gc_ext *x, CUcontext c, CUstream s,
		   CUdeviceptr dst, size_t dst_pitch, size_t dst_height, void *host_dst,
		   CUdeviceptr src, size_t src_pitch, size_t src_height, const void *host_src,
		   size_t width, size_t height, size_t depth)
{
	CUDA_MEMCPY3D p;
	NEED(cuMemcpy3DAsync);
	memset(&p, 0, sizeof p);
	if (host_src != NULL) {
		p.srcMemoryType = MEMORYTYPE_HOST;
		p.srcHost = host_src;
		p.srcPitch = width;
		p.srcHeight = height;
	} else {
		p.srcMemoryType = MEMORYTYPE_DEVICE;
		p.srcDevice = src;
		p.srcPitch = src_pitch;
		p.srcHeight = src_height;
	}
	if (host_dst != NULL) {
		p.dstMemoryType = MEMORYTYPE_HOST;
		p.dstHost = host_dst;
		p.dstPitch = width;
		p.dstHeight = height;
	} else {
		p.dstMemoryType = MEMORYTYPE_DEVICE;
		p.dstDevice = dst;
		p.dstPitch = dst_pitch;
		p.dstHeight = dst_height;
	}
	p.WidthInBytes = width;
	p.Height = height;
	p.Depth = depth;
	USE(c);
	return x->cuMemcpy3DAsync(&p, s);
}

CUresult gc_copy_peer(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr dst,
		      CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, CUstream s)
{
	NEED(cuMemcpyPeerAsync);
	USE(c);
	return x->cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, n, s);
}

CUresult gc_ctx_get_limit(const gc_api *a, const gc_ext *x, CUcontext c, int limit, size_t *v)
{
	NEED(cuCtxGetLimit);
	USE(c);
	return x->cuCtxGetLimit(v, limit);
}

CUresult gc_ctx_set_limit(const gc_api *a, const gc_ext *x, CUcontext c, int limit, size_t v)
{
	NEED(cuCtxSetLimit);
	USE(c);
	return x->cuCtxSetLimit(limit, v);
}

enum { LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION = 4 };

// The configuration's stream is NULL: the driver then answers for the
// current context, c.
CUresult gc_occupancy_clusters(const gc_api *a, const gc_ext *x, CUcontext c, CUfunction f,
			       const unsigned int *grid, const unsigned int *block, unsigned int shared,
			       const unsigned int *cluster, int query, int *out)
{
	CUlaunchAttribute attr;
	CUlaunchConfig cfg = {grid[0], grid[1], grid[2], block[0], block[1], block[2], shared, NULL, &attr, 0};
	memset(&attr, 0, sizeof attr);
	if (cluster[0] != 0 && cluster[1] != 0 && cluster[2] != 0) {
		attr.id = LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
		attr.value.clusterDim.x = cluster[0];
		attr.value.clusterDim.y = cluster[1];
		attr.value.clusterDim.z = cluster[2];
		cfg.numAttrs = 1;
	}
	if (query == 0)
		NEED(cuOccupancyMaxActiveClusters);
	else
		NEED(cuOccupancyMaxPotentialClusterSize);
	USE(c);
	if (query == 0)
		return x->cuOccupancyMaxActiveClusters(out, f, &cfg);
	return x->cuOccupancyMaxPotentialClusterSize(out, f, &cfg);
}
