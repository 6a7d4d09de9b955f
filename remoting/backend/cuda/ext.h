// The driver calls behind backend.Extended: memory pools and
// stream-ordered allocation, virtual memory management, stream memory
// operations, tensor maps and pitched copies. Like api.h, the types are
// ABI copies of cuda.h's (CUDA 12.2 to 13.x), checked for size in ext.c,
// and every entry point is resolved at run time; one the driver lacks
// makes its wrapper return CUDA_ERROR_NOT_SUPPORTED.
#ifndef GPUCTL_CUDA_EXT_H
#define GPUCTL_CUDA_EXT_H

#include "api.h"

typedef struct CUmemPoolHandle_st *CUmemoryPool;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct {
	int type; // CUmemLocationType
	int id;
} CUmemLocation;

typedef struct {
	int type;                 // CUmemAllocationType
	int requestedHandleTypes; // CUmemAllocationHandleType
	CUmemLocation location;
	void *win32HandleMetaData;
	struct {
		unsigned char compressionType;
		unsigned char gpuDirectRDMACapable;
		unsigned short usage;
		unsigned char reserved[4];
	} allocFlags;
} CUmemAllocationProp;

typedef struct {
	int allocType;
	int handleTypes;
	CUmemLocation location;
	void *win32SecurityAttributes;
	size_t maxSize;
	unsigned short usage;
	unsigned char reserved[54];
} CUmemPoolProps;

typedef struct {
	CUmemLocation location;
	int flags; // CUmemAccess_flags
} CUmemAccessDesc;

// CUstreamBatchMemOpParams: a 48-byte union; every member this package
// fills starts with the operation and has the address at 8, the value at
// 16 and the flags at 24.
typedef union {
	int operation;
	struct {
		int operation;
		CUdeviceptr address;
		unsigned long long value;
		unsigned int flags;
		CUdeviceptr alias;
	} op;
	unsigned long long pad[6];
} CUstreamBatchMemOpParams;

typedef struct {
	size_t srcXInBytes, srcY, srcZ, srcLOD;
	int srcMemoryType;
	const void *srcHost;
	CUdeviceptr srcDevice;
	void *srcArray;
	void *reserved0;
	size_t srcPitch, srcHeight;
	size_t dstXInBytes, dstY, dstZ, dstLOD;
	int dstMemoryType;
	void *dstHost;
	CUdeviceptr dstDevice;
	void *dstArray;
	void *reserved1;
	size_t dstPitch, dstHeight;
	size_t WidthInBytes, Height, Depth;
} CUDA_MEMCPY3D;

// gc_ext holds the resolved entry points; any may be NULL.
typedef struct {
	CUresult (*cuDeviceGetMemPool)(CUmemoryPool *, CUdevice);
	CUresult (*cuDeviceGetDefaultMemPool)(CUmemoryPool *, CUdevice);
	CUresult (*cuDeviceSetMemPool)(CUdevice, CUmemoryPool);
	CUresult (*cuMemPoolCreate)(CUmemoryPool *, const CUmemPoolProps *);
	CUresult (*cuMemPoolDestroy)(CUmemoryPool);
	CUresult (*cuMemPoolSetAttribute)(CUmemoryPool, int, void *);
	CUresult (*cuMemPoolGetAttribute)(CUmemoryPool, int, void *);
	CUresult (*cuMemPoolTrimTo)(CUmemoryPool, size_t);
	CUresult (*cuMemAllocFromPoolAsync)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
	CUresult (*cuMemFreeAsync)(CUdeviceptr, CUstream);
	CUresult (*cuMemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*cuMemAddressFree)(CUdeviceptr, size_t);
	CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
	CUresult (*cuMemRelease)(CUmemGenericAllocationHandle);
	CUresult (*cuMemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*cuMemUnmap)(CUdeviceptr, size_t);
	CUresult (*cuMemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*cuMemGetAccess)(unsigned long long *, const CUmemLocation *, CUdeviceptr);
	CUresult (*cuMemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
	CUresult (*cuMemRetainAllocationHandle)(CUmemGenericAllocationHandle *, void *);
	CUresult (*cuMemExportToShareableHandle)(void *, CUmemGenericAllocationHandle, int, unsigned long long);
	CUresult (*cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *, void *, int);
	CUresult (*cuStreamWaitValue32)(CUstream, CUdeviceptr, unsigned int, unsigned int);
	CUresult (*cuStreamWaitValue64)(CUstream, CUdeviceptr, unsigned long long, unsigned int);
	CUresult (*cuStreamWriteValue32)(CUstream, CUdeviceptr, unsigned int, unsigned int);
	CUresult (*cuStreamWriteValue64)(CUstream, CUdeviceptr, unsigned long long, unsigned int);
	CUresult (*cuStreamBatchMemOp)(CUstream, unsigned int, CUstreamBatchMemOpParams *, unsigned int);
	CUresult (*cuTensorMapEncodeTiled)(void *, int, unsigned int, void *, const unsigned long long *,
					   const unsigned long long *, const unsigned int *, const unsigned int *,
					   int, int, int, int);
	CUresult (*cuTensorMapEncodeIm2col)(void *, int, unsigned int, void *, const unsigned long long *,
					    const unsigned long long *, const int *, const int *, unsigned int,
					    unsigned int, const unsigned int *, int, int, int, int);
	CUresult (*cuMemcpy3DAsync)(const CUDA_MEMCPY3D *, CUstream);
	CUresult (*cuMemcpyPeerAsync)(CUdeviceptr, CUcontext, CUdeviceptr, CUcontext, size_t, CUstream);
	CUresult (*cuCtxGetLimit)(size_t *, int);
	CUresult (*cuCtxSetLimit)(int, size_t);
	CUresult (*cuOccupancyMaxActiveClusters)(int *, CUfunction, const CUlaunchConfig *);
	CUresult (*cuOccupancyMaxPotentialClusterSize)(int *, CUfunction, const CUlaunchConfig *);
} gc_ext;

// gc_ext_load resolves the entry points from the driver a was loaded from.
gc_ext *gc_ext_load(const gc_api *a);

CUresult gc_pool_get(const gc_ext *x, CUdevice d, int dflt, CUmemoryPool *p);
CUresult gc_pool_set(const gc_ext *x, CUdevice d, CUmemoryPool p);
CUresult gc_pool_create(const gc_ext *x, int alloc_type, int handle_types, int loc_type, int loc_id,
			size_t max_size, CUmemoryPool *p);
CUresult gc_pool_destroy(const gc_ext *x, CUmemoryPool p);
CUresult gc_pool_set_attr(const gc_ext *x, CUmemoryPool p, int attr, unsigned long long v);
CUresult gc_pool_get_attr(const gc_ext *x, CUmemoryPool p, int attr, unsigned long long *v);
CUresult gc_pool_trim(const gc_ext *x, CUmemoryPool p, size_t keep);
CUresult gc_alloc_async(const gc_api *a, const gc_ext *x, CUcontext c, size_t n, CUmemoryPool p,
			CUstream s, CUdeviceptr *ptr);
CUresult gc_free_async(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr ptr, CUstream s);

CUresult gc_va_reserve(const gc_ext *x, size_t n, size_t align, CUdeviceptr addr,
		       unsigned long long flags, CUdeviceptr *p);
CUresult gc_va_free(const gc_ext *x, CUdeviceptr p, size_t n);
CUresult gc_mem_create(const gc_ext *x, size_t n, int alloc_type, int handle_types, int loc_type,
		       int loc_id, int compression, unsigned long long flags,
		       CUmemGenericAllocationHandle *h);
CUresult gc_mem_release(const gc_ext *x, CUmemGenericAllocationHandle h);
CUresult gc_mem_map(const gc_ext *x, CUdeviceptr p, size_t n, size_t off,
		    CUmemGenericAllocationHandle h, unsigned long long flags);
CUresult gc_mem_unmap(const gc_ext *x, CUdeviceptr p, size_t n);
CUresult gc_mem_set_access(const gc_ext *x, CUdeviceptr p, size_t n, const int *descs, size_t count);
CUresult gc_mem_get_access(const gc_ext *x, int loc_type, int loc_id, CUdeviceptr p,
			   unsigned long long *flags);
CUresult gc_mem_granularity(const gc_ext *x, int alloc_type, int handle_types, int loc_type,
			    int loc_id, int option, size_t *g);
CUresult gc_mem_retain(const gc_ext *x, CUdeviceptr p, CUmemGenericAllocationHandle *h);

CUresult gc_wait_value(const gc_api *a, const gc_ext *x, CUcontext c, CUstream s, CUdeviceptr p,
		       unsigned long long v, unsigned int flags, int width);
CUresult gc_write_value(const gc_api *a, const gc_ext *x, CUcontext c, CUstream s, CUdeviceptr p,
			unsigned long long v, unsigned int flags, int width);
// ops: count x (type, flags, address, value), as the wire carries them.
CUresult gc_batch_mem_op(const gc_api *a, const gc_ext *x, CUcontext c, CUstream s,
			 unsigned int count, const unsigned long long *ops, unsigned int flags);

CUresult gc_tensor_map_tiled(const gc_ext *x, void *tm, int type, unsigned int rank, CUdeviceptr addr,
			     const unsigned long long *dims, const unsigned long long *strides,
			     const unsigned int *box, const unsigned int *estrides, int interleave,
			     int swizzle, int l2, int oob);
CUresult gc_tensor_map_im2col(const gc_ext *x, void *tm, int type, unsigned int rank, CUdeviceptr addr,
			      const unsigned long long *dims, const unsigned long long *strides,
			      const int *lower, const int *upper, unsigned int channels,
			      unsigned int pixels, const unsigned int *estrides, int interleave,
			      int swizzle, int l2, int oob);

// gc_copy3d copies Width x Height x Depth between two pitched places;
// host_src/host_dst, when not NULL, are packed host memory (pinned
// staging) on that side.
CUresult gc_copy3d(const gc_api *a, const gc_ext *x, CUcontext c, CUstream s,
		   CUdeviceptr dst, size_t dst_pitch, size_t dst_height, void *host_dst,
		   CUdeviceptr src, size_t src_pitch, size_t src_height, const void *host_src,
		   size_t width, size_t height, size_t depth);
CUresult gc_copy_peer(const gc_api *a, const gc_ext *x, CUcontext c, CUdeviceptr dst,
		      CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, CUstream s);

// gc_ctx_get_limit and gc_ctx_set_limit read and set one of c's CUlimit
// values.
CUresult gc_ctx_get_limit(const gc_api *a, const gc_ext *x, CUcontext c, int limit, size_t *v);
CUresult gc_ctx_set_limit(const gc_api *a, const gc_ext *x, CUcontext c, int limit, size_t v);

// gc_occupancy_clusters answers cuOccupancyMaxActiveClusters (query 0) or
// cuOccupancyMaxPotentialClusterSize (query 1) for f in c, for a launch
// of grid, block and shared bytes in clusters of cluster (all zero: the
// function's own cluster shape).
CUresult gc_occupancy_clusters(const gc_api *a, const gc_ext *x, CUcontext c, CUfunction f,
			       const unsigned int *grid, const unsigned int *block, unsigned int shared,
			       const unsigned int *cluster, int query, int *out);

#endif
