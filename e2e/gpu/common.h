// Shared by the suite's C helpers: error checks, clocks, file reading.
// They compile against NVIDIA's cuda.h (native) and gpuctl's (remote).
#ifndef GPUSUITE_COMMON_H
#define GPUSUITE_COMMON_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(call)                                                                          \
	do {                                                                              \
		CUresult r_ = (call);                                                     \
		if (r_ != CUDA_SUCCESS) {                                                 \
			const char *n_ = "?";                                             \
			cuGetErrorName(r_, &n_);                                          \
			fprintf(stderr, "%s:%d: %s failed: %d %s\n", __FILE__, __LINE__, #call, \
				(int)r_, n_);                                             \
			exit(2);                                                          \
		}                                                                         \
	} while (0)

static inline double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// read_file returns the file's bytes with a NUL after them (PTX is text).
static inline char *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		perror(path);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(n + 1);
	if (b == NULL || fread(b, 1, n, f) != (size_t)n) {
		fprintf(stderr, "%s: read failed\n", path);
		exit(2);
	}
	b[n] = 0;
	fclose(f);
	return b;
}

// open_device makes device 0's primary context current and loads the
// suite's kernels.
static inline CUmodule open_device(const char *ptx_path, CUdevice *dev)
{
	CUcontext ctx;
	CUmodule mod;
	char *ptx = read_file(ptx_path);
	CK(cuInit(0));
	CK(cuDeviceGet(dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, *dev));
	CK(cuCtxSetCurrent(ctx));
	CK(cuModuleLoadData(&mod, ptx));
	free(ptx);
	return mod;
}

#endif
