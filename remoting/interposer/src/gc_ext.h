/* Internal interface between the hand-written parts of the client
 * library: the caches (gc_cache.c), module upload by hash
 * (gc_modcache.c), stream capture and graphs (gc_graph.c), pitched copies
 * (gc_memops.c), and the hooks gc_api.c calls into them. */
#ifndef GPUCTL_GC_EXT_H
#define GPUCTL_GC_EXT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include "cuda.h"

/* ---- caches (gc_cache.c) ---------------------------------------------- */

/* gc_dev_count returns the number of devices, asking the server once per
 * connection epoch. */
CUresult gc_dev_count(int32_t *n);
/* gc_driver_version: the server's driver version, cached likewise. */
CUresult gc_driver_version(int32_t *v);
/* gc_dev_name, gc_dev_uuid and gc_dev_busid answer from a per-epoch
 * cache of each device's name, UUID and PCI bus id. */
CUresult gc_dev_name(CUdevice dev, char *name, size_t len);
CUresult gc_dev_uuid(CUdevice dev, uint8_t *uuid);
CUresult gc_dev_busid(CUdevice dev, char *bus, size_t len);
/* gc_dev_attr answers cuDeviceGetAttribute from the attribute cache. */
CUresult gc_dev_attr(int32_t attr, CUdevice dev, int *v);
/* gc_dev_attrs reads n attributes of dev from the same cache at once,
 * filling it if needed, with no lock once it is filled. It serves the
 * client's own launch checks, not a program's questions, so it reads the
 * cache under GPUCTL_NO_CACHE too: a check must not cost a round trip per
 * launch. */
CUresult gc_dev_attrs(CUdevice dev, int n, const CUdevice_attribute *attrs, int *v);
/* gc_ctx_created records a context this client created (or the primary
 * context it retained), with its device and flags, or updates its record.
 * gc_ctx_gone is called when a context goes away (destroyed, a primary
 * context's last release or its reset): it runs the context-local-storage
 * destructors the runtime registered for it (gc_export.c) and forgets it. */
void gc_ctx_created(uint64_t ctx, int dev, unsigned int flags, int primary);
void gc_ctx_gone(uint64_t ctx);
/* gc_primary_ctx_peek: the device's primary context as this process knows
 * it, retained if it was not yet (see docs/export-tables.md,
 * CUDART_INTERFACE slot 2). */
CUresult gc_primary_ctx_peek(CUdevice dev, CUcontext *pctx);
/* gc_primary_ctx_held: the device's primary context while this process
 * holds a reference to it (0 when it holds none); never retains it. */
uint64_t gc_primary_ctx_held(CUdevice dev);
/* gc_ctx_id is a context's unique number, 1, 2, ... in the order this
 * client made or retained contexts; 0 for one it does not know. */
uint64_t gc_ctx_id(uint64_t ctx);
/* gc_ctx_dev answers the device of a context, from the table when it can. */
CUresult gc_ctx_dev(uint64_t ctx, int *dev);
/* gc_cache_off: GPUCTL_NO_CACHE is set; every question goes to the server
 * (to measure what the caches save). */
int gc_cache_off(void);

/* ---- device ranges (gc_api.c) ----------------------------------------- */

/* gc_devr_add and gc_devr_del maintain the client's table of device
 * ranges, which tells device from host addresses (cuMemcpy,
 * cuPointerGetAttribute). */
void gc_devr_add(uint64_t base, uint64_t size, uint64_t ctx);
void gc_devr_del(uint64_t base);
int gc_is_dev(uint64_t p);

/* ---- modules (gc_modcache.c) ------------------------------------------ */

/* gc_module_upload loads an image of n bytes: by its SHA-256 when the
 * host has it, otherwise by sending it. */
CUresult gc_module_upload(uint64_t ctx, const void *image, size_t n, uint64_t *m);
/* gc_sha256 hashes n bytes (FIPS 180-4). */
void gc_sha256(const void *data, size_t n, uint8_t out[32]);

/* ---- capture (gc_graph.c) --------------------------------------------- */

/* gc_captures counts the capture sequences in progress. The asynchronous
 * calls of gc_api.c ask the capture code about their stream only while it
 * is not zero, so a launch outside capture costs one relaxed load. */
extern _Atomic int gc_captures;

static inline int gc_capture_active(void)
{
	return atomic_load_explicit(&gc_captures, memory_order_relaxed) != 0;
}

/* Each gc_cap_* hook is called by an asynchronous call on stream s while
 * a capture is active. It returns 0 when s is not capturing (the call
 * proceeds as usual) and 1 when it recorded the operation into the
 * capture or refused it, with the call's result in *res. */
int gc_cap_launch(CUfunction f, const unsigned int grid[3], const unsigned int block[3], unsigned int shared,
		  const unsigned int cluster[3], uint32_t flags, CUstream s, void **kernelParams, void **extra,
		  CUresult *res);
int gc_cap_copy(const CUDA_MEMCPY3D *p, CUstream s, CUresult *res);
int gc_cap_memset(CUdeviceptr dst, unsigned int value, unsigned int elem, size_t count, CUstream s, CUresult *res);
int gc_cap_event_record(CUevent e, CUstream s, unsigned int flags, CUresult *res);
int gc_cap_wait_event(CUstream s, CUevent e, unsigned int flags, CUresult *res);
int gc_cap_memop(CUstream s, int wait, CUdeviceptr addr, uint64_t value, unsigned int flags, int width, CUresult *res);
/* gc_cap_refuse fails an operation that cannot be captured (a
 * stream-ordered allocation) when s is capturing: it invalidates the
 * capture and returns 1 with the error in *res. */
int gc_cap_refuse(CUstream s, CUresult *res);
/* gc_cap_unsafe reports whether a potentially unsafe call (a synchronous
 * copy or allocation, a device-wide synchronisation) is forbidden on this
 * thread now; it then invalidates the captures concerned and returns the
 * error to fail the call with. legacy: the call uses the legacy stream,
 * which would synchronise with capturing streams. */
CUresult gc_cap_unsafe(int legacy);

/* ---- copies (gc_memops.c) --------------------------------------------- */

/* gc_copy3d runs a cuMemcpy3D-shaped copy between any of host, device and
 * unified memory, asynchronously when async is set (as far as the
 * transport allows). ctx is the context it runs in. */
CUresult gc_copy3d(uint64_t ctx, const CUDA_MEMCPY3D *p, CUstream s, int async);

/* gc_pack_params packs a launch's kernelParams (or extra buffer) into the
 * flat parameter buffer the server expects; it returns the buffer's size
 * in *n and the buffer in *buf (malloc'd; the caller frees it). */
CUresult gc_pack_params(CUfunction f, void **kernelParams, void **extra, uint8_t **buf, size_t *n);

/* gc_launch_packed queues a launch whose parameters are already packed;
 * cluster and flags as for gc_launch_queue. */
CUresult gc_launch_packed(uint64_t ctx, CUfunction f, const unsigned int grid[3], const unsigned int block[3],
			  unsigned int shared, const unsigned int cluster[3], uint32_t flags, CUstream s,
			  const uint8_t *params, size_t n);

/* ---- launches (gc_api.c, gc_runtime.c) -------------------------------- */

/* GC_LAUNCH_COOPERATIVE is bit 0 of a launch's flags (LaunchEx's flags,
 * dispatch.LaunchExCooperative): all its blocks resident at once. */
#define GC_LAUNCH_COOPERATIVE 1u

/* gc_launch_ex reports whether a launch needs the LaunchEx op: thread-block
 * clusters of more than one block (cluster NULL: none) or flags. */
static inline int gc_launch_ex(const unsigned int cluster[3], uint32_t flags)
{
	return flags != 0 || (cluster != NULL && (uint64_t)cluster[0] * cluster[1] * cluster[2] > 1);
}

/* gc_launch_check refuses a launch configuration that NVIDIA's driver
 * refuses before queuing it, with the driver's error (gc_runtime.c). The
 * first launch of a function asks the server for its limits and learns
 * its device; after that the check reads the device's limits from the
 * attribute cache and the function's from the function, with no round
 * trip and no lock. */
CUresult gc_launch_check(struct CUfunc_st *f, const unsigned int grid[3], const unsigned int block[3],
			 unsigned int shared);

/* gc_launch_queue queues a checked launch of f in ctx (gc_api.c): Launch,
 * or LaunchEx when it has clusters (cluster NULL: none) or flags. The
 * parameters are packed straight into the ring: no lock, no allocation. */
CUresult gc_launch_queue(uint64_t ctx, struct CUfunc_st *f, const unsigned int grid[3], const unsigned int block[3],
			 unsigned int shared, const unsigned int cluster[3], uint32_t flags, CUstream s,
			 void **kernelParams, void **extra);

#endif
