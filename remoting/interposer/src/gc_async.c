/* Asynchronous copies from and to page-locked host memory.
 *
 * CUDA lets a program reuse the host buffer of an asynchronous copy only
 * once its stream has reached the copy, and page-locked memory is where
 * programs rely on that (cudaMemcpyAsync from cudaMallocHost buffers,
 * PyTorch's non_blocking copies and pinned data loaders). So:
 *
 * - A host-to-device copy from such memory larger than what the request
 *   ring takes inline is queued with its bulk by reference: the sender
 *   writes it from the caller's buffer, and the request stays in the ring
 *   (for a resend) until the server has executed it, which is before any
 *   later stream or event query can report the copy complete.
 * - A device-to-host copy into such memory is a deferred request: queued
 *   without waiting, answered by the server in order with every other
 *   reply, and its data written into the destination by whichever thread
 *   reads replies (the reader thread gc_core.c starts for them) before it
 *   handles any later reply. A stream or event query, a synchronisation or
 *   a host function is answered after the copy's reply, so none reports the
 *   copy complete before its data is in place.
 *
 * Neither takes a lock or allocates: the page-locked ranges are a fixed
 * table read with atomics, and the request lives in the ring. */
#include <stdatomic.h>
#include <string.h>

#include "gc_async.h"
#include "gc_core.h"
#include "../gen/gc_ops.h"

/* PIN_SLOTS bounds the ranges the copies recognise; ranges beyond it are
 * copied the ordinary way. */
#define PIN_SLOTS 4096

static struct {
	_Atomic uintptr_t base[PIN_SLOTS]; /* 0: free */
	_Atomic size_t size[PIN_SLOTS];
	_Atomic int hi; /* slots below it may be in use */
	/* Copies queued with a page-locked host side, and how many of them
	 * the last fence covered. */
	_Atomic uint64_t issued, fenced;
} pin;

void gc_pin_add(const void *p, size_t n)
{
	int hi = atomic_load(&pin.hi);
	for (int i = 0; i < PIN_SLOTS; i++) {
		if (atomic_load(&pin.base[i]) != 0)
			continue;
		atomic_store(&pin.size[i], n);
		atomic_store_explicit(&pin.base[i], (uintptr_t)p, memory_order_release);
		if (i >= hi)
			atomic_store(&pin.hi, i + 1);
		return;
	}
}

void gc_pin_del(const void *p)
{
	int hi = atomic_load(&pin.hi);
	for (int i = 0; i < hi; i++)
		if (atomic_load(&pin.base[i]) == (uintptr_t)p) {
			atomic_store(&pin.base[i], 0);
			return;
		}
}

int gc_pinned(const void *p, size_t n)
{
	uintptr_t a = (uintptr_t)p;
	int hi = atomic_load_explicit(&pin.hi, memory_order_acquire);
	for (int i = 0; i < hi; i++) {
		uintptr_t b = atomic_load_explicit(&pin.base[i], memory_order_acquire);
		if (b == 0 || a < b)
			continue;
		size_t sz = atomic_load_explicit(&pin.size[i], memory_order_relaxed);
		if (a - b < sz && n <= sz - (a - b))
			return 1;
	}
	return 0;
}

CUresult gc_host_fence(void)
{
	uint64_t want = atomic_load(&pin.issued);
	if (atomic_load(&pin.fenced) >= want)
		return CUDA_SUCCESS;
	/* Any synchronous request will do: the server answers it after it
	 * executed (and read the data of) everything queued before it, and
	 * its reply is read after theirs. */
	int32_t v;
	CUresult r = gc_rpc_DriverVersion(&v);
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t f = atomic_load(&pin.fenced);
	while (f < want && !atomic_compare_exchange_weak(&pin.fenced, &f, want))
		;
	return CUDA_SUCCESS;
}

int gc_async_htod(uint64_t ctx, uint64_t dst, const void *src, size_t n, uint64_t s, CUresult *r)
{
	if (!gc_pinned(src, n))
		return 0;
	struct gc_call k;
	uint8_t *args = gc_begin(&k, GC_OP_MemcpyHtoD, 32, GC_FLAG_ASYNC | GC_BULK_BY_REF, src, n);
	if (args == NULL) {
		*r = k.res;
		return 1;
	}
	gc_enc_MemcpyHtoD(args, ctx, dst, n, s);
	atomic_fetch_add_explicit(&pin.issued, 1, memory_order_relaxed);
	*r = gc_async(&k);
	return 1;
}

int gc_async_dtoh(uint64_t ctx, void *dst, uint64_t src, size_t n, uint64_t s, CUresult *r)
{
	if (!gc_pinned(dst, n) || !gc_deferred_ok())
		return 0;
	struct gc_call k;
	uint8_t *args = gc_begin(&k, GC_OP_MemcpyDtoH, 32, GC_FLAG_DEFERRED, NULL, 0);
	if (args == NULL) {
		*r = k.res;
		return 1;
	}
	gc_enc_MemcpyDtoH(args, ctx, src, n, s);
	atomic_fetch_add_explicit(&pin.issued, 1, memory_order_relaxed);
	*r = gc_deferred(&k, dst, n);
	return 1;
}

int gc_async_htod3d(uint64_t ctx, uint64_t dst, uint64_t pitch, uint64_t height, size_t w, size_t h, size_t d, uint64_t s,
		    const void *src, CUresult *r)
{
	size_t n = w * h * d;
	if (!gc_pinned(src, n))
		return 0;
	struct gc_call k;
	uint8_t *args = gc_begin(&k, GC_OP_MemcpyHtoD3D, 64, GC_FLAG_ASYNC | GC_BULK_BY_REF, src, n);
	if (args == NULL) {
		*r = k.res;
		return 1;
	}
	gc_enc_MemcpyHtoD3D(args, ctx, dst, pitch, height, w, h, d, s);
	atomic_fetch_add_explicit(&pin.issued, 1, memory_order_relaxed);
	*r = gc_async(&k);
	return 1;
}

int gc_async_dtoh3d(uint64_t ctx, void *dst, uint64_t src, uint64_t pitch, uint64_t height, size_t w, size_t h, size_t d,
		    uint64_t s, CUresult *r)
{
	size_t n = w * h * d;
	if (!gc_pinned(dst, n) || !gc_deferred_ok())
		return 0;
	struct gc_call k;
	uint8_t *args = gc_begin(&k, GC_OP_MemcpyDtoH3D, 64, GC_FLAG_DEFERRED, NULL, 0);
	if (args == NULL) {
		*r = k.res;
		return 1;
	}
	gc_enc_MemcpyDtoH3D(args, ctx, src, pitch, height, w, h, d, s);
	atomic_fetch_add_explicit(&pin.issued, 1, memory_order_relaxed);
	*r = gc_deferred(&k, dst, n);
	return 1;
}
