/* Pitched copies (cuMemcpy2D/3D), peer copies, stream memory operations
 * and tensor maps; and the launch helpers that graph replay shares with
 * cuLaunchKernel. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "gc_async.h"
#include "gc_core.h"
#include "gc_ext.h"
#include "../gen/gc_ops.h"
#include "../gen/gc_undef.h"

/* ---- pitched copies ------------------------------------------------------ */

/* side is one end of a copy: a host or device address of the first byte,
 * the pitch (bytes between rows) and the rows per slice. */
struct side {
	int dev;
	uint64_t addr;
	size_t pitch, height;
};

static CUresult side_of(CUmemorytype type, const void *host, CUdeviceptr devp, CUarray arr, size_t x, size_t y,
			size_t z, size_t pitch, size_t height, struct side *s)
{
	uint64_t off = (uint64_t)z * pitch * height + (uint64_t)y * pitch + x;
	s->pitch = pitch;
	s->height = height;
	switch (type) {
	case CU_MEMORYTYPE_HOST:
		if (host == NULL)
			return CUDA_ERROR_INVALID_VALUE;
		s->dev = 0;
		s->addr = (uint64_t)(uintptr_t)host + off;
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_DEVICE:
		s->dev = 1;
		s->addr = devp + off;
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_UNIFIED:
		/* A unified address is device memory if this client knows it
		 * as such, else memory of this process. */
		s->addr = devp + off;
		s->dev = gc_is_dev(s->addr);
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_ARRAY:
		(void)arr;
		return CUDA_ERROR_NOT_SUPPORTED; /* CUDA arrays are not served */
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* packed: the rows of a side follow each other without gaps. */
static int packed(const struct side *s, size_t w, size_t h, size_t d)
{
	return (h <= 1 || s->pitch == w) && (d <= 1 || (s->pitch == w && s->height == h));
}

/* host rows: copy between packed data and a pitched host place. */
static void host_rows(uint8_t *packed_buf, const struct side *s, size_t w, size_t h, size_t d, int to_side)
{
	for (size_t z = 0; z < d; z++)
		for (size_t y = 0; y < h; y++) {
			uint8_t *p = (uint8_t *)(uintptr_t)(s->addr + z * s->pitch * s->height + y * s->pitch);
			uint8_t *q = packed_buf + (z * h + y) * w;
			if (to_side)
				memmove(p, q, w);
			else
				memmove(q, p, w);
		}
}

CUresult gc_copy3d(uint64_t ctx, const CUDA_MEMCPY3D *p, CUstream st, int async)
{
	struct side src, dst;
	CUresult r = side_of(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY, p->srcZ,
			     p->srcPitch, p->srcHeight, &src);
	if (r == CUDA_SUCCESS)
		r = side_of(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY, p->dstZ,
			    p->dstPitch, p->dstHeight, &dst);
	if (r != CUDA_SUCCESS)
		return r;
	size_t w = p->WidthInBytes, h = p->Height, d = p->Depth;
	if (w == 0 || h == 0 || d == 0)
		return CUDA_SUCCESS;
	if ((h > 1 && (src.pitch < w || dst.pitch < w)) || (d > 1 && (src.height < h || dst.height < h)))
		return CUDA_ERROR_INVALID_VALUE;
	size_t n = w * h * d;
	if (n / d / h != w)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t s = GC_S(st);
	if (!src.dev && !dst.dev) {
		uint8_t *tmp = malloc(n);
		if (tmp == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		host_rows(tmp, &src, w, h, d, 0);
		host_rows(tmp, &dst, w, h, d, 1);
		free(tmp);
		return CUDA_SUCCESS;
	}
	if (src.dev && dst.dev) {
		if (packed(&src, w, h, d) && packed(&dst, w, h, d))
			return async ? gc_rpc_MemcpyDtoD_async(ctx, dst.addr, src.addr, n, s)
				     : gc_rpc_MemcpyDtoD(ctx, dst.addr, src.addr, n, s);
		if (async)
			return gc_rpc_MemcpyDtoD3D_async(ctx, dst.addr, dst.pitch, dst.height, src.addr, src.pitch, src.height, w,
							 h, d, s);
		return gc_rpc_MemcpyDtoD3D(ctx, dst.addr, dst.pitch, dst.height, src.addr, src.pitch, src.height, w, h, d, s);
	}
	/* Between host and device the host side travels packed. An
	 * asynchronous copy small enough is queued in the request ring (the
	 * caller may reuse its buffer at once); anything else is sent before
	 * the call returns, which CUDA allows for pageable memory. */
	uint8_t *tmp = NULL;
	if (!dst.dev && async && packed(&dst, w, h, d)) {
		/* Into packed page-locked memory: queued, data in place when
		 * its reply arrives (gc_async.c). */
		void *into = (void *)(uintptr_t)dst.addr;
		if (packed(&src, w, h, d) ? gc_async_dtoh(ctx, into, src.addr, n, s, &r)
					  : gc_async_dtoh3d(ctx, into, src.addr, src.pitch, src.height, w, h, d, s, &r))
			return r;
	}
	if (!src.dev && async && n > gc_async_inline_max() && packed(&src, w, h, d)) {
		/* From packed page-locked memory: queued with its data by
		 * reference. */
		const void *from = (const void *)(uintptr_t)src.addr;
		if (packed(&dst, w, h, d) ? gc_async_htod(ctx, dst.addr, from, n, s, &r)
					  : gc_async_htod3d(ctx, dst.addr, dst.pitch, dst.height, w, h, d, s, from, &r))
			return r;
	}
	if (!dst.dev) {
		uint8_t *into = packed(&dst, w, h, d) ? (uint8_t *)(uintptr_t)dst.addr : (tmp = malloc(n));
		if (into == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (packed(&src, w, h, d))
			r = gc_rpc_MemcpyDtoH(ctx, src.addr, n, s, into, n);
		else
			r = gc_rpc_MemcpyDtoH3D(ctx, src.addr, src.pitch, src.height, w, h, d, s, into, n);
		if (r == CUDA_SUCCESS && tmp != NULL)
			host_rows(tmp, &dst, w, h, d, 1);
		free(tmp);
		return r;
	}
	const uint8_t *from = (const uint8_t *)(uintptr_t)src.addr;
	if (!packed(&src, w, h, d)) {
		if ((tmp = malloc(n)) == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		host_rows(tmp, &src, w, h, d, 0);
		from = tmp;
	}
	int inline_ok = async && n <= gc_async_inline_max();
	if (packed(&dst, w, h, d))
		r = inline_ok ? gc_rpc_MemcpyHtoD_async(ctx, dst.addr, n, s, from, n) : gc_rpc_MemcpyHtoD(ctx, dst.addr, n, s, from, n);
	else if (inline_ok)
		r = gc_rpc_MemcpyHtoD3D_async(ctx, dst.addr, dst.pitch, dst.height, w, h, d, s, from, n);
	else
		r = gc_rpc_MemcpyHtoD3D(ctx, dst.addr, dst.pitch, dst.height, w, h, d, s, from, n);
	free(tmp);
	return r;
}

static void to3d(const CUDA_MEMCPY2D *p, CUDA_MEMCPY3D *q)
{
	memset(q, 0, sizeof *q);
	q->srcXInBytes = p->srcXInBytes;
	q->srcY = p->srcY;
	q->srcMemoryType = p->srcMemoryType;
	q->srcHost = p->srcHost;
	q->srcDevice = p->srcDevice;
	q->srcArray = p->srcArray;
	q->srcPitch = p->srcPitch;
	q->srcHeight = p->Height;
	q->dstXInBytes = p->dstXInBytes;
	q->dstY = p->dstY;
	q->dstMemoryType = p->dstMemoryType;
	q->dstHost = p->dstHost;
	q->dstDevice = p->dstDevice;
	q->dstArray = p->dstArray;
	q->dstPitch = p->dstPitch;
	q->dstHeight = p->Height;
	q->WidthInBytes = p->WidthInBytes;
	q->Height = p->Height;
	q->Depth = 1;
}

static CUresult copy3d(const CUDA_MEMCPY3D *p, CUstream s, int async)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (gc_capture_active()) {
		if (async && gc_cap_copy(p, s, &r))
			return r;
		if (!async && (r = gc_cap_unsafe(1)) != CUDA_SUCCESS)
			return r;
	}
	return gc_copy3d(ctx, p, s, async);
}

static CUresult copy2d(const CUDA_MEMCPY2D *p, CUstream s, int async)
{
	if (p == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_MEMCPY3D q;
	to3d(p, &q);
	return copy3d(&q, s, async);
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, 0); }
CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy) { return copy2d(pCopy, NULL, 0); }
CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream) { return copy2d(pCopy, hStream, 1); }
CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy) { return copy3d(pCopy, NULL, 0); }
CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream) { return copy3d(pCopy, hStream, 1); }

static CUresult copy_peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx, size_t n, CUstream s, int async)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (dctx == NULL || sctx == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (n == 0)
		return CUDA_SUCCESS;
	if (async)
		return gc_rpc_MemcpyPeer_async(ctx, dst, GC_H(dctx), src, GC_H(sctx), n, GC_S(s));
	return gc_rpc_MemcpyPeer(ctx, dst, GC_H(dctx), src, GC_H(sctx), n, GC_S(s));
}

CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice, CUcontext srcContext,
			      size_t ByteCount)
{
	return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, NULL, 0);
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
				   CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
	return copy_peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, 1);
}

/* ---- stream memory operations ---------------------------------------------- */

static CUresult memop(CUstream s, int wait, CUdeviceptr addr, uint64_t value, unsigned int flags, int width)
{
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (gc_capture_active() && gc_cap_memop(s, wait, addr, value, flags, width, &r))
		return r;
	if (wait)
		return gc_rpc_StreamWaitValue_async(ctx, GC_S(s), addr, value, flags, (uint32_t)width);
	return gc_rpc_StreamWriteValue_async(ctx, GC_S(s), addr, value, flags, (uint32_t)width);
}

CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	return memop(stream, 1, addr, value, flags, 32);
}
CUresult CUDAAPI cuStreamWaitValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	return memop(stream, 1, addr, value, flags, 64);
}
CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	return memop(stream, 0, addr, value, flags, 32);
}
CUresult CUDAAPI cuStreamWriteValue64_v2(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	return memop(stream, 0, addr, value, flags, 64);
}
/* The unversioned names are the same calls (the _v2 forms of CUDA 11.7
 * only dropped the need to enable stream memory operations first). */
CUresult CUDAAPI cuStreamWaitValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	return memop(stream, 1, addr, value, flags, 32);
}
CUresult CUDAAPI cuStreamWaitValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	return memop(stream, 1, addr, value, flags, 64);
}
CUresult CUDAAPI cuStreamWriteValue32(CUstream stream, CUdeviceptr addr, cuuint32_t value, unsigned int flags)
{
	return memop(stream, 0, addr, value, flags, 32);
}
CUresult CUDAAPI cuStreamWriteValue64(CUstream stream, CUdeviceptr addr, cuuint64_t value, unsigned int flags)
{
	return memop(stream, 0, addr, value, flags, 64);
}

#define MAX_BATCH 256

CUresult CUDAAPI cuStreamBatchMemOp_v2(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,
				       unsigned int flags)
{
	if (count == 0 || count > MAX_BATCH || paramArray == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t ctx;
	CUresult r = gc_current_ctx(&ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if (gc_capture_active()) {
		/* Captured as the operations one by one, in order. */
		int captured = 0;
		for (unsigned int i = 0; i < count; i++) {
			const CUstreamBatchMemOpParams *o = &paramArray[i];
			int wait = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_32 || o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
			int width = o->operation == CU_STREAM_MEM_OP_WAIT_VALUE_64 || o->operation == CU_STREAM_MEM_OP_WRITE_VALUE_64 ? 64 : 32;
			if (o->operation == CU_STREAM_MEM_OP_BARRIER || o->operation == CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES)
				continue;
			uint64_t v = width == 64 ? o->waitValue.value64 : o->waitValue.value;
			if (gc_cap_memop(stream, wait, o->waitValue.address, v, o->waitValue.flags, width, &r)) {
				captured = 1;
				if (r != CUDA_SUCCESS)
					return r;
			}
		}
		if (captured)
			return CUDA_SUCCESS;
	}
	uint8_t buf[MAX_BATCH * 24];
	for (unsigned int i = 0; i < count; i++) {
		const CUstreamBatchMemOpParams *o = &paramArray[i];
		uint8_t *b = buf + 24 * i;
		uint32_t fl = 0;
		uint64_t addr = 0, v = 0;
		switch (o->operation) {
		case CU_STREAM_MEM_OP_WAIT_VALUE_32:
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
			addr = o->waitValue.address;
			v = o->waitValue.value;
			fl = o->waitValue.flags;
			break;
		case CU_STREAM_MEM_OP_WAIT_VALUE_64:
		case CU_STREAM_MEM_OP_WRITE_VALUE_64:
			addr = o->waitValue.address;
			v = o->waitValue.value64;
			fl = o->waitValue.flags;
			break;
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
		case CU_STREAM_MEM_OP_BARRIER:
			fl = o->flushRemoteWrites.flags;
			break;
		default:
			return CUDA_ERROR_INVALID_VALUE;
		}
		gc_put_u32(b, (uint32_t)o->operation);
		gc_put_u32(b + 4, fl);
		gc_put_u64(b + 8, addr);
		gc_put_u64(b + 16, v);
	}
	return gc_rpc_StreamBatchMemOp_async(ctx, GC_S(stream), flags, buf, 24 * count);
}

CUresult CUDAAPI cuStreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,
				    unsigned int flags)
{
	return cuStreamBatchMemOp_v2(stream, count, paramArray, flags);
}

/* ---- tensor maps ------------------------------------------------------------- */

/* Encodings are a function of their arguments on a given device, and
 * libraries encode the same maps again and again: the client remembers
 * the latest ones (per connection epoch) and asks the server only for new
 * ones. */
#define TMAP_SLOTS 64
#define TMAP_MAX_PARAMS 160

static struct {
	pthread_mutex_t mu;
	struct tmap_slot {
		uint64_t epoch;
		uint32_t kind, len;
		uint8_t params[TMAP_MAX_PARAMS];
		uint8_t tmap[128];
	} s[TMAP_SLOTS];
	unsigned next;
} tmc = { .mu = PTHREAD_MUTEX_INITIALIZER };

static CUresult tensor_map(CUtensorMap *tm, uint32_t kind, const uint8_t *params, uint32_t len)
{
	CUresult r = gc_ready();
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t ep = gc_epoch();
	pthread_mutex_lock(&tmc.mu);
	for (int i = 0; i < TMAP_SLOTS; i++) {
		struct tmap_slot *sl = &tmc.s[i];
		if (sl->len == len && sl->kind == kind && sl->epoch == ep && memcmp(sl->params, params, len) == 0) {
			memcpy(tm, sl->tmap, 128);
			pthread_mutex_unlock(&tmc.mu);
			return CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&tmc.mu);
	uint8_t out[128];
	uint32_t n = 0;
	if ((r = gc_rpc_TensorMapEncode(kind, params, len, out, sizeof out, &n)) != CUDA_SUCCESS)
		return r;
	if (n != sizeof out) {
		gc_log("the server encoded a tensor map of %u bytes", n);
		return CUDA_ERROR_UNKNOWN;
	}
	memcpy(tm, out, 128);
	if (!gc_cache_off()) {
		pthread_mutex_lock(&tmc.mu);
		struct tmap_slot *sl = &tmc.s[tmc.next++ % TMAP_SLOTS];
		sl->epoch = ep;
		sl->kind = kind;
		sl->len = len;
		memcpy(sl->params, params, len);
		memcpy(sl->tmap, out, 128);
		pthread_mutex_unlock(&tmc.mu);
	}
	return CUDA_SUCCESS;
}

/* tmap_head writes the fields both kinds share (see docs/protocol.md). */
static uint8_t *tmap_head(uint8_t *b, CUtensorMapDataType type, cuuint32_t rank, void *addr, const cuuint64_t *dims,
			  const cuuint64_t *strides, const cuuint32_t *estrides, CUtensorMapInterleave il,
			  CUtensorMapSwizzle sw, CUtensorMapL2promotion l2, CUtensorMapFloatOOBfill oob)
{
	b = gc_put_u32(b, (uint32_t)type);
	b = gc_put_u32(b, rank);
	b = gc_put_u64(b, (uint64_t)(uintptr_t)addr);
	b = gc_put_u32(b, (uint32_t)il);
	b = gc_put_u32(b, (uint32_t)sw);
	b = gc_put_u32(b, (uint32_t)l2);
	b = gc_put_u32(b, (uint32_t)oob);
	for (cuuint32_t i = 0; i < rank; i++)
		b = gc_put_u64(b, dims[i]);
	for (cuuint32_t i = 0; i + 1 < rank; i++)
		b = gc_put_u64(b, strides[i]);
	for (cuuint32_t i = 0; i < rank; i++)
		b = gc_put_u32(b, estrides[i]);
	return b;
}

CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
					void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
					const cuuint32_t *boxDim, const cuuint32_t *elementStrides,
					CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
					CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	if (tensorMap == NULL || ((uintptr_t)tensorMap & 63) != 0 || tensorRank == 0 || tensorRank > 5 || globalDim == NULL ||
	    (tensorRank > 1 && globalStrides == NULL) || boxDim == NULL || elementStrides == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint8_t buf[TMAP_MAX_PARAMS];
	uint8_t *b = tmap_head(buf, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
			       interleave, swizzle, l2Promotion, oobFill);
	for (cuuint32_t i = 0; i < tensorRank; i++)
		b = gc_put_u32(b, boxDim[i]);
	return tensor_map(tensorMap, 0, buf, (uint32_t)(b - buf));
}

CUresult CUDAAPI cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType, cuuint32_t tensorRank,
					 void *globalAddress, const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
					 const int *pixelBoxLowerCorner, const int *pixelBoxUpperCorner,
					 cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
					 const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
					 CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
					 CUtensorMapFloatOOBfill oobFill)
{
	if (tensorMap == NULL || ((uintptr_t)tensorMap & 63) != 0 || tensorRank < 3 || tensorRank > 5 || globalDim == NULL ||
	    globalStrides == NULL || pixelBoxLowerCorner == NULL || pixelBoxUpperCorner == NULL || elementStrides == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	uint8_t buf[TMAP_MAX_PARAMS];
	uint8_t *b = tmap_head(buf, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
			       interleave, swizzle, l2Promotion, oobFill);
	for (cuuint32_t i = 0; i + 2 < tensorRank; i++)
		b = gc_put_u32(b, (uint32_t)pixelBoxLowerCorner[i]);
	for (cuuint32_t i = 0; i + 2 < tensorRank; i++)
		b = gc_put_u32(b, (uint32_t)pixelBoxUpperCorner[i]);
	b = gc_put_u32(b, channelsPerPixel);
	b = gc_put_u32(b, pixelsPerColumn);
	return tensor_map(tensorMap, 1, buf, (uint32_t)(b - buf));
}

/* ---- launches ------------------------------------------------------------------ */

#define MAX_PARAM_BYTES 32764

CUresult gc_pack_params(CUfunction f, void **kernelParams, void **extra, uint8_t **buf, size_t *n)
{
	*buf = NULL;
	*n = 0;
	if (f == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (kernelParams != NULL) {
		size_t m = f->argbytes;
		uint8_t *b = calloc(1, m ? m : 1);
		if (b == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		for (uint32_t i = 0; i < f->nparams; i++)
			memcpy(b + f->pairs[2 * i], kernelParams[i], f->pairs[2 * i + 1]);
		*buf = b;
		*n = m;
		return CUDA_SUCCESS;
	}
	if (extra != NULL) {
		const void *src = NULL;
		size_t *np = NULL;
		for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
			if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				src = extra[i + 1];
			else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
				np = extra[i + 1];
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if (src == NULL || np == NULL || *np < f->argbytes || *np > MAX_PARAM_BYTES)
			return CUDA_ERROR_INVALID_VALUE;
		uint8_t *b = malloc(*np ? *np : 1);
		if (b == NULL)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(b, src, *np);
		*buf = b;
		*n = *np;
		return CUDA_SUCCESS;
	}
	return f->nparams > 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult gc_launch_packed(uint64_t ctx, CUfunction f, const unsigned int grid[3], const unsigned int block[3],
			  unsigned int shared, const unsigned int cluster[3], uint32_t flags, CUstream s,
			  const uint8_t *params, size_t n)
{
	void *extra[5] = { CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)params, CU_LAUNCH_PARAM_BUFFER_SIZE, &n,
			   CU_LAUNCH_PARAM_END };
	return gc_launch_queue(ctx, f, grid, block, shared, cluster, flags, s, NULL, n > 0 ? extra : NULL);
}
