/* What the export tables (gc_export.c) offer the rest of the library:
 * the context-local storage's end, which the one table of contexts
 * (gc_cache.c) triggers, and INTEGRITY_CHECK's hash. */
#ifndef GPUCTL_GC_RUNTIME_H
#define GPUCTL_GC_RUNTIME_H

#include <stdint.h>
#include "cuda.h"

/* gc_cls_context_gone runs and drops the context-local storage of c
 * (called by gc_ctx_gone, gc_cache.c). */
void gc_cls_context_gone(CUcontext c);
/* gc_integrity_hash is INTEGRITY_CHECK's keyed hash with explicit inputs;
 * devs points at ndev records of a 16-byte UUID and three int32 PCI
 * numbers (domain, bus, device). */
void gc_integrity_hash(uint32_t driver_version, uint32_t version, uint32_t pid, uint32_t tid, const void *cudart_table,
		       const void *integrity_table, const void *fn, uint64_t unix_seconds, const void *devs, int ndev,
		       uint64_t out[2]);

#endif
