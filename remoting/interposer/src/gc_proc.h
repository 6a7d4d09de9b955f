/* cuGetProcAddress's table and the unsupported-call hook. Kept apart
 * from cuda.h: the generated files that use it declare every symbol
 * without its prototype. */
#ifndef GPUCTL_GC_PROC_H
#define GPUCTL_GC_PROC_H

#include <stddef.h>

struct gc_proc {
	const char *name; /* base name, as cuGetProcAddress is asked for it */
	int version;      /* CUDA version from which this symbol is handed out */
	int per_thread;   /* the _ptsz/_ptds form: handed out for the per-thread default stream flag */
	void *fn;
};
extern const struct gc_proc gc_procs[];
extern const size_t gc_nprocs;

/* gc_unsupported logs name once (per *once) and returns
 * CUDA_ERROR_NOT_SUPPORTED. */
int gc_unsupported(const char *name, int *once);

#endif
