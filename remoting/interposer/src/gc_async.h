/* Asynchronous copies from and to page-locked host memory (gc_async.c):
 * the ranges this process allocated or registered as page-locked, and the
 * copies that use them without waiting. */
#ifndef GPUCTL_GC_ASYNC_H
#define GPUCTL_GC_ASYNC_H

#include <stddef.h>
#include <stdint.h>
#include "cuda.h"

/* gc_pin_add and gc_pin_del keep the table of page-locked ranges that
 * the copy calls read without a lock. The caller serialises them (the
 * host-memory registry's lock). */
void gc_pin_add(const void *p, size_t n);
void gc_pin_del(const void *p);
/* gc_pinned: [p, p+n) lies within one page-locked range. No lock. */
int gc_pinned(const void *p, size_t n);

/* gc_host_fence returns once every copy queued so far from or into
 * page-locked memory is done with the host side (sent, or its data in
 * place): before such memory is freed or unregistered. A round trip when
 * any such copy was queued since the last fence, nothing otherwise. */
CUresult gc_host_fence(void);

/* The asynchronous copies. Each returns 1 with *r set when it queued the
 * copy (the host side is page-locked and, for a device-to-host copy, the
 * server answers deferred requests), 0 when the caller should copy the
 * ordinary way. The host side is packed: 3D ones describe only the device
 * side. */
int gc_async_htod(uint64_t ctx, uint64_t dst, const void *src, size_t n, uint64_t s, CUresult *r);
int gc_async_dtoh(uint64_t ctx, void *dst, uint64_t src, size_t n, uint64_t s, CUresult *r);
int gc_async_htod3d(uint64_t ctx, uint64_t dst, uint64_t pitch, uint64_t height, size_t w, size_t h, size_t d, uint64_t s,
		    const void *src, CUresult *r);
int gc_async_dtoh3d(uint64_t ctx, void *dst, uint64_t src, uint64_t pitch, uint64_t height, size_t w, size_t h, size_t d,
		    uint64_t s, CUresult *r);

#endif
