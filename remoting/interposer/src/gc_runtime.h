/* What the runtime-API surface (gc_runtime.c, gc_export.c) shares with
 * the core entry points (gc_api.c). */
#ifndef GPUCTL_GC_RUNTIME_H
#define GPUCTL_GC_RUNTIME_H

#include <stdint.h>
#include "cuda.h"

/* gc_ctx_created records a context and its flags when it is created or
 * retained as a device's primary context; gc_ctx_gone runs the
 * context-local-storage destructors of a context being destroyed or
 * reset and forgets it. */
void gc_ctx_created(CUcontext c, CUdevice dev, unsigned int flags, int primary);
void gc_ctx_gone(CUcontext c);
/* gc_primary_ctx_peek: the device's primary context as this process knows
 * it (see docs/export-tables.md, CUDART_INTERFACE slot 2). */
CUresult gc_primary_ctx_peek(CUdevice dev, CUcontext *pctx);
/* gc_cls_context_gone runs and drops the context-local storage of c. */
void gc_cls_context_gone(CUcontext c);
/* gc_integrity_hash is INTEGRITY_CHECK's keyed hash with explicit inputs;
 * devs points at ndev records of a 16-byte UUID and three int32 PCI
 * numbers (domain, bus, device). */
void gc_integrity_hash(uint32_t driver_version, uint32_t version, uint32_t pid, uint32_t tid, const void *cudart_table,
		       const void *integrity_table, const void *fn, uint64_t unix_seconds, const void *devs, int ndev,
		       uint64_t out[2]);

/* gc_launch_check refuses a launch configuration that NVIDIA's driver
 * refuses before queuing it, with the driver's error. The first launch of
 * a function asks the server for its limits; after that the check makes
 * no round trip and takes no lock. */
struct CUfunc_st;
CUresult gc_launch_check(struct CUfunc_st *f, unsigned int gx, unsigned int gy, unsigned int gz, unsigned int bx,
			 unsigned int by, unsigned int bz, unsigned int shared);

#endif
