/* Internal interface of gpuctl's client library: the transport
 * (gc_core.c) that the generated RPC wrappers and the hand-written entry
 * points (gc_api.c) use. */
#ifndef GPUCTL_GC_CORE_H
#define GPUCTL_GC_CORE_H

#include <stddef.h>
#include <stdint.h>
#include "cuda.h"
#include "gc_wirefmt.h"
#include "gc_proc.h"

#define GC_EXPORT __attribute__((visibility("default")))

/* One request being built. gc_begin reserves its ring slot; gc_sync or
 * gc_async completes it. */
struct gc_call {
	CUresult res;     /* why gc_begin returned NULL */
	uint64_t pos;     /* ring position of the record */
	uint32_t out_len; /* reply payload bytes (after gc_sync) */
};

/* gc_begin reserves a request of alen argument bytes and returns where the
 * arguments go. bulk is streamed after the arguments: by reference for a
 * synchronous request (the caller's buffer must stay valid until gc_sync
 * returns), copied into the ring for an asynchronous one. */
uint8_t *gc_begin(struct gc_call *k, uint16_t op, uint64_t alen, uint16_t flags, const void *bulk, uint64_t bulk_len);
/* gc_sync sends the request and waits for its reply: payload into out (up
 * to out_cap), bulk reply straight into bulk_dst (exactly bulk_len). */
CUresult gc_sync(struct gc_call *k, void *out, size_t out_cap, void *bulk_dst, uint64_t bulk_len);
/* gc_async queues the request; its failure is reported by the next
 * synchronous call of its context. */
CUresult gc_async(struct gc_call *k);

/* GC_BULK_BY_REF in gc_begin's flags (never sent): an asynchronous
 * request whose bulk is sent from the caller's buffer, which must stay
 * valid until the server has executed the request (page-locked memory,
 * which CUDA lets the caller reuse only once the stream reached the copy,
 * and whose free waits for that: gc_host_fence). */
#define GC_BULK_BY_REF 0x8000u
/* gc_deferred queues a request begun with GC_FLAG_DEFERRED without
 * waiting for its reply: the reader thread writes the reply's bulk into
 * bulk_dst (exactly bulk_len) when it arrives, before it handles any
 * later reply. bulk_dst must stay valid until then. */
CUresult gc_deferred(struct gc_call *k, void *bulk_dst, uint64_t bulk_len);
/* gc_deferred_ok: the server takes deferred requests and the reader
 * thread that receives them runs (started on first use). */
int gc_deferred_ok(void);

/* gc_ready: initialised and the session usable. */
CUresult gc_ready(void);
/* gc_current_ctx: the calling thread's current context, or
 * CUDA_ERROR_INVALID_CONTEXT. Implies gc_ready. */
CUresult gc_current_ctx(uint64_t *ctx);
/* gc_ctx_or_current: c when it is not NULL (the CUDA 13 forms that name
 * their context), otherwise the calling thread's current context. Implies
 * gc_ready. */
CUresult gc_ctx_or_current(CUcontext c, uint64_t *ctx);
/* gc_connect: connect at cuInit (once). */
CUresult gc_connect(void);
/* gc_exiting: the process has begun to exit past the handler cuInit
 * registered with atexit, as NVIDIA's driver deinitialises itself then:
 * what it answers with CUDA_ERROR_DEINITIALIZED from that point, the
 * runtime's context-local storage, answers so here too. */
int gc_exiting(void);
/* gc_async_inline_max: largest bulk gc_begin copies into the ring. */
uint64_t gc_async_inline_max(void);

/* gc_epoch changes whenever the connection is replaced (a reconnect, a
 * move to another host): state cached from the server is refreshed then. */
uint64_t gc_epoch(void);

/* gc_stats_note counts one request of op (gc_cache.c), for the per-call
 * round-trip statistics that GPUCTL_STATS prints. */
void gc_stats_note(uint16_t op, int async);

/* gc_goodbye tells gpud that the program is exiting normally, so that it
 * ends the session now instead of keeping it for a reconnect: it sends
 * what is queued, then the one-way Goodbye, and waits until gpud closes
 * the connection, each for at most bound_s seconds. Only the process that
 * opened the session says it, only once and only on a live connection;
 * calls made afterwards fail with CUDA_ERROR_DEINITIALIZED. Returns
 * whether it was sent (gc_bye.c calls it at exit). */
int gc_goodbye(double bound_s);
/* gc_after_goodbye notes (once, on stderr) a call made after the
 * goodbye: something ran later at exit than the library's own teardown. */
void gc_after_goodbye(uint16_t op);

/* gc_rd_check turns a malformed reply into an error. */
CUresult gc_rd_check(struct gc_rd *d, const char *op);

/* gc_log writes one "gpuctl: ..." line to stderr. */
void gc_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int gc_start_thread(void *(*fn)(void *));

/* Function handles are client objects: the server handle plus the
 * parameter layout, which cuLaunchKernel packs kernelParams with, and a
 * cache of the function's attributes. A CUkernel (gc_runtime.c) starts
 * with a different magic; every call that takes a CUfunction accepts one
 * and resolves it to the function of the current context. */
#define GC_FUNC_MAGIC 0x676346u /* "Fcg" */
#define GC_KERN_MAGIC 0x67634bu /* "Kcg" */
#define GC_FUNC_ATTRS 32 /* attributes cached; CUDA 13 has 17, later ones are asked each time */
struct CUfunc_st {
	uint32_t magic;
	uint32_t nparams;
	uint64_t h;
	uint64_t ctx;     /* the context the function was loaded in */
	CUmodule mod;
	char *name;
	uint32_t argbytes;
	_Atomic uint32_t attr_known; /* bit i: attrs[i] holds attribute i */
	int32_t attrs[GC_FUNC_ATTRS];
	/* Counts the attributes set on it, so that answers computed from
	 * them (cluster occupancy) know when to be asked again. */
	_Atomic uint32_t gen;
	/* Its device plus one, learnt by its first launch (0 before): the
	 * launch checks read that device's limits from the attribute cache. */
	_Atomic int32_t launch_dev;
	uint32_t pairs[]; /* offset, size per parameter */
};

/* gc_func_resolve turns a CUfunction or a CUkernel passed as one into the
 * function of context ctx (loading the kernel's library there on first
 * use). The common case, a function or an already-resolved kernel, takes
 * no lock. */
CUresult gc_func_resolve(CUfunction f, uint64_t ctx, struct CUfunc_st **out);

static inline uint64_t gc_stream_handle(CUstream s)
{
	/* The legacy and per-thread default streams are the context's
	 * default stream on the server. */
	if (s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD)
		return 0;
	return (uint64_t)(uintptr_t)s;
}

static inline uint64_t gc_func_handle(CUfunction f) { return f && f->magic == GC_FUNC_MAGIC ? f->h : 0; }

#define GC_H(x) ((uint64_t)(uintptr_t)(x))
#define GC_S(s) gc_stream_handle(s)
#define GC_F(f) gc_func_handle(f)


#endif
