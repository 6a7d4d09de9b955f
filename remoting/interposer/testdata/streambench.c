/* streambench: the shape of NVIDIA's simpleStreams sample through
 * libcuda.so.1. An array is uploaded, touched by a kernel and downloaded:
 * whole with synchronous copies (the sample's non-streamed reference),
 * and in four chunks on four streams with asynchronous copies (uploads on
 * every stream, then kernels, then downloads, as the sample orders them)
 * from pageable and from page-locked memory. Prints a table of the wall
 * time per pass and of how long the calls held the calling thread before
 * the final synchronisation (medians of REPS passes after one warm-up),
 * and checks the data of each pass.
 * Usage: streambench [MIB [REPS]] */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

#define NSTREAMS 4
/* The kernel touches the first TOUCH words of each chunk: enough to show
 * that the data went through the device, little enough that the emulated
 * device's interpreter does not hide the copies. */
#define TOUCH 4096

static const char *ptx = ADD_PTX;

static void die(CUresult r, const char *what)
{
	const char *n = "?";
	cuGetErrorName(r, &n);
	fprintf(stderr, "streambench: %s: %s\n", what, n);
	exit(1);
}
#define MUST(call)                      \
	do {                            \
		CUresult r_ = (call);   \
		if (r_ != CUDA_SUCCESS) \
			die(r_, #call); \
	} while (0)

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static CUfunction fn;
static CUstream st[NSTREAMS];
static CUdeviceptr d;
static size_t n, chunk;

static void launch(CUdeviceptr p, uint32_t v, CUstream s)
{
	uint32_t words = TOUCH;
	void *args[] = { &p, &v, &words };
	MUST(cuLaunchKernel(fn, TOUCH / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

enum mode { SYNC, ASYNC_PAGEABLE, ASYNC_PINNED };

/* pass returns how long the calls before the final synchronisation
 * held the caller. */
static double pass(enum mode m, uint8_t *h, uint32_t v)
{
	double t0 = now_ms();
	if (m == SYNC) {
		MUST(cuMemcpyHtoD(d, h, n));
		for (int i = 0; i < NSTREAMS; i++)
			launch(d + i * chunk, v, NULL);
		MUST(cuMemcpyDtoH(h, d, n));
	} else {
		for (int i = 0; i < NSTREAMS; i++)
			MUST(cuMemcpyHtoDAsync(d + i * chunk, h + i * chunk, chunk, st[i]));
		for (int i = 0; i < NSTREAMS; i++)
			launch(d + i * chunk, v, st[i]);
		for (int i = 0; i < NSTREAMS; i++)
			MUST(cuMemcpyDtoHAsync(h + i * chunk, d + i * chunk, chunk, st[i]));
	}
	double held = now_ms() - t0;
	MUST(cuCtxSynchronize());
	return held;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double run(enum mode m, uint8_t *h, int reps, double *held_ms)
{
	double t[64], held[64];
	uint32_t *w = (uint32_t *)h;
	for (int r = 0; r <= reps; r++) {
		for (size_t i = 0; i < n / 4; i++)
			w[i] = (uint32_t)i;
		double t0 = now_ms();
		double hd = pass(m, h, (uint32_t)r + 1);
		if (r > 0) {
			t[r - 1] = now_ms() - t0;
			held[r - 1] = hd;
		}
		for (int c = 0; c < NSTREAMS; c++)
			for (size_t i = 0; i < chunk / 4; i++) {
				size_t k = c * chunk / 4 + i;
				uint32_t want = (uint32_t)k + (i < TOUCH ? (uint32_t)r + 1 : 0);
				if (w[k] != want) {
					fprintf(stderr, "streambench: mode %d pass %d: word %zu is %u, want %u\n", m, r, k, w[k], want);
					exit(1);
				}
			}
	}
	qsort(t, reps, sizeof t[0], cmp_d);
	qsort(held, reps, sizeof held[0], cmp_d);
	*held_ms = held[reps / 2];
	return t[reps / 2];
}

int main(int argc, char **argv)
{
	int mib = argc > 1 ? atoi(argv[1]) : 32;
	int reps = argc > 2 ? atoi(argv[2]) : 5;
	if (mib < 1 || reps < 1 || reps > 64) {
		fprintf(stderr, "usage: streambench [MIB [REPS (1-64)]]\n");
		return 2;
	}
	n = (size_t)mib << 20;
	chunk = n / NSTREAMS;
	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	MUST(cuInit(0));
	MUST(cuDeviceGet(&dev, 0));
	MUST(cuCtxCreate(&ctx, NULL, 0, dev));
	MUST(cuModuleLoadData(&mod, ptx));
	MUST(cuModuleGetFunction(&fn, mod, "add"));
	for (int i = 0; i < NSTREAMS; i++)
		MUST(cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING));
	MUST(cuMemAlloc(&d, n));
	uint8_t *pageable = malloc(n), *pinned;
	MUST(cuMemAllocHost((void **)&pinned, n));

	double held[3];
	double ts[3];
	ts[0] = run(SYNC, pageable, reps, &held[0]);
	ts[1] = run(ASYNC_PAGEABLE, pageable, reps, &held[1]);
	ts[2] = run(ASYNC_PINNED, pinned, reps, &held[2]);
	printf("simpleStreams-like pass: %d MiB up, kernels, %d MiB down; median of %d passes\n\n", mib, mib, reps);
	printf("| copies | ms per pass | caller held (ms) | GB/s (both ways) | pass vs synchronous |\n");
	printf("| --- | --- | --- | --- | --- |\n");
	const char *names[] = { "synchronous, whole array", "asynchronous from pageable memory, 4 streams",
				"asynchronous from page-locked memory, 4 streams" };
	for (int i = 0; i < 3; i++)
		printf("| %s | %.1f | %.1f | %.2f | %.2fx |\n", names[i], ts[i], held[i], 2.0 * n / (ts[i] * 1e6), ts[0] / ts[i]);
	MUST(cuMemFreeHost(pinned));
	free(pageable);
	return 0;
}
