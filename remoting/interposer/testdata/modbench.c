/* Module load timing for the module cache benchmark: builds a PTX image
 * of MIB mebibytes (one kernel, then comment lines) and times
 * cuModuleLoadData of it, through whatever libcuda.so.1 it runs with.
 * Usage: modbench MIB   prints "load_ms <ms> bytes <n>". */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define CK(call)                                                                                  \
	do {                                                                                      \
		CUresult r_ = (call);                                                             \
		if (r_ != CUDA_SUCCESS) {                                                         \
			fprintf(stderr, "modbench: %s failed with %d\n", #call, (int)r_);         \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	long mib = argc > 1 ? atol(argv[1]) : 64;
	size_t n = (size_t)mib << 20;
	const char *head = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry nop()\n{\n  ret;\n}\n";
	char *img = malloc(n + 1);
	if (img == NULL || mib <= 0)
		return 2;
	size_t at = strlen(head);
	memcpy(img, head, at);
	/* Lines of comment, each different so that nothing compresses or
	 * deduplicates away. */
	unsigned x = 12345;
	while (at < n) {
		size_t line = n - at < 128 ? n - at : 128;
		img[at] = '/';
		for (size_t i = 1; i + 1 < line; i++) {
			x = x * 1103515245u + 12345u;
			img[at + i] = (char)('a' + (x >> 16) % 26);
		}
		if (line >= 2)
			img[at + 1] = '/';
		img[at + line - 1] = '\n';
		at += line;
	}
	img[n] = 0;
	CUdevice dev;
	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CUmodule m;
	double t0 = now_ms();
	CK(cuModuleLoadData(&m, img));
	double t1 = now_ms();
	CUfunction f;
	CK(cuModuleGetFunction(&f, m, "nop"));
	CK(cuModuleUnload(m));
	printf("load_ms %.1f bytes %zu\n", t1 - t0, n);
	free(img);
	return 0;
}
