/* Tests of the client's caches, module upload by hash and graph replay,
 * against a gpuctl server; built like ctest.c.
 * Usage: cachetest hot N | sizes | graph N | runtime N | launches N */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"


/* add(p, v, n): p[i] += v. */
static const char *kernel = ADD_PTX;

static CUcontext setup(CUdevice *dev)
{
	CUcontext ctx = NULL;
	OK(cuInit(0));
	OK(cuDeviceGet(dev, 0));
	OK(cuDevicePrimaryCtxRetain(&ctx, *dev));
	OK(cuCtxSetCurrent(ctx));
	return ctx;
}

/* hot asks, N times, the questions a training step asks hundreds of times;
 * with GPUCTL_CACHETEST_PAUSE set it stops half-way until a line arrives
 * on stdin (the test cuts the connection then). */
static void test_hot(int n)
{
	CUdevice dev;
	CUcontext ctx = setup(&dev);
	int sms0 = 0, cc0 = 0, ver0 = 0;
	OK(cuDeviceGetAttribute(&sms0, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	OK(cuDeviceGetAttribute(&cc0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	OK(cuDriverGetVersion(&ver0));
	char name0[256];
	OK(cuDeviceGetName(name0, sizeof name0, dev));
	for (int i = 0; i < n; i++) {
		if (i == n / 2 && getenv("GPUCTL_CACHETEST_PAUSE") != NULL) {
			printf("READY\n");
			fflush(stdout);
			char line[8];
			if (fgets(line, sizeof line, stdin) == NULL)
				break;
		}
		CUdevice d = -1;
		OK(cuCtxGetDevice(&d));
		EXPECT(d == dev);
		int v = 0;
		OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
		EXPECT(v == sms0);
		OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
		EXPECT(v == cc0);
		OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
		EXPECT(v == 32);
		CHECK(cuDeviceGetAttribute(&v, (CUdevice_attribute)0, dev), CUDA_ERROR_INVALID_VALUE);
		unsigned flags = 99;
		int active = 0;
		OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
		EXPECT(active == 1 && flags == 0);
		CUcontext cur = NULL;
		OK(cuCtxGetCurrent(&cur));
		EXPECT(cur == ctx);
		OK(cuCtxGetFlags(&flags));
		OK(cuDriverGetVersion(&v));
		EXPECT(v == ver0);
		OK(cuDeviceGetCount(&v));
		EXPECT(v == 1);
		CUdevice d2;
		OK(cuDeviceGet(&d2, 0));
		CHECK(cuDeviceGet(&d2, 1), CUDA_ERROR_INVALID_DEVICE);
		char name[256];
		OK(cuDeviceGetName(name, sizeof name, dev));
		EXPECT(strcmp(name, name0) == 0);
		size_t mem = 0;
		OK(cuDeviceTotalMem(&mem, dev));
		EXPECT(mem > 0);
	}
	/* Primary-context state follows this client's retains and releases. */
	CUcontext c2;
	OK(cuDevicePrimaryCtxRetain(&c2, dev));
	EXPECT(c2 == ctx);
	OK(cuDevicePrimaryCtxRelease(dev));
	unsigned flags;
	int active = 0;
	OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	EXPECT(active == 1);
	OK(cuDevicePrimaryCtxSetFlags(dev, CU_CTX_SCHED_BLOCKING_SYNC));
	OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	EXPECT(flags == CU_CTX_SCHED_BLOCKING_SYNC);
	OK(cuCtxGetFlags(&flags));
	EXPECT(flags == CU_CTX_SCHED_BLOCKING_SYNC);
	OK(cuDevicePrimaryCtxRelease(dev));
	OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	EXPECT(active == 0);
	/* Asked again after the round trips above (after a reconnect, with a
	 * new connection), the answers are the same. */
	int v = 0;
	OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	EXPECT(v == sms0);
	/* A created context knows its device and flags too. */
	CUcontext mine;
	OK(cuCtxCreate(&mine, NULL, CU_CTX_SCHED_SPIN, dev));
	CUdevice d = -1;
	OK(cuCtxGetDevice(&d));
	EXPECT(d == dev);
	OK(cuCtxGetFlags(&flags));
	EXPECT(flags == CU_CTX_SCHED_SPIN);
	OK(cuCtxDestroy(mine));
}

/* padded returns the kernel padded with a comment to n bytes (malloc'd). */
static char *padded(size_t n)
{
	size_t base = strlen(kernel);
	char *img = malloc(n + 1);
	memcpy(img, kernel, base);
	memcpy(img + base, "//", 2);
	memset(img + base + 2, 'x', n - base - 3);
	img[n - 1] = '\n';
	img[n] = 0;
	return img;
}

/* sizes loads modules of sizes around the SHA-256 block boundaries, so
 * the server's check of each upload's hash covers the client's padding. */
static void test_sizes(void)
{
	CUdevice dev;
	setup(&dev);
	static const int extra[] = { 0, 1, 55, 56, 57, 63, 64, 65, 119, 120, 4096 + 7 };
	for (size_t i = 0; i < sizeof extra / sizeof extra[0]; i++) {
		char *img = padded((16 << 10) + (size_t)extra[i]);
		CUmodule m;
		CUfunction f;
		OK(cuModuleLoadData(&m, img));
		OK(cuModuleGetFunction(&f, m, "add"));
		OK(cuModuleUnload(m));
		free(img);
	}
}

/* graph captures p[i] += 1 then += 2 on a stream and replays the graph N
 * times; with the connection cut under it, every replay must still run
 * exactly once: p[i] ends at 3N. */
static void test_graph(int n)
{
	CUdevice dev;
	setup(&dev);
	CUmodule m;
	CUfunction f;
	OK(cuModuleLoadData(&m, kernel));
	OK(cuModuleGetFunction(&f, m, "add"));
	CUstream s;
	OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	unsigned cnt = 1024;
	CUdeviceptr p;
	OK(cuMemAlloc(&p, cnt * 4));
	OK(cuMemsetD32(p, 0, cnt));
	OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	unsigned one = 1, two = 2;
	void *a1[] = { &p, &one, &cnt }, *a2[] = { &p, &two, &cnt };
	OK(cuLaunchKernel(f, cnt / 128, 1, 1, 128, 1, 1, 0, s, a1, NULL));
	OK(cuLaunchKernel(f, cnt / 128, 1, 1, 128, 1, 1, 0, s, a2, NULL));
	CUgraph g;
	OK(cuStreamEndCapture(s, &g));
	CUgraphExec x;
	OK(cuGraphInstantiate(&x, g, 0));
	for (int i = 0; i < n; i++)
		OK(cuGraphLaunch(x, s));
	OK(cuStreamSynchronize(s));
	unsigned *h = malloc(cnt * 4);
	OK(cuMemcpyDtoH(h, p, cnt * 4));
	for (unsigned i = 0; i < cnt; i++)
		if (h[i] != 3u * (unsigned)n) {
			fprintf(stderr, "FAIL: p[%u] = %u after %d replays, want %u\n", i, h[i], n, 3u * (unsigned)n);
			failures++;
			break;
		}
	free(h);
	OK(cuGraphExecDestroy(x));
	OK(cuGraphDestroy(g));
}

/* check_sum fails unless every p[i] of cnt is want. */
static void check_sum(CUdeviceptr p, unsigned cnt, unsigned want, const char *what)
{
	unsigned *h = malloc(cnt * 4);
	OK(cuMemcpyDtoH(h, p, cnt * 4));
	for (unsigned i = 0; i < cnt; i++)
		if (h[i] != want) {
			fprintf(stderr, "FAIL: %s: p[%u] = %u, want %u\n", what, i, h[i], want);
			failures++;
			break;
		}
	free(h);
}

/* runtime uses the CUDA runtime's calls on top of the client's caches,
 * module upload by hash and capture: a library of more than 16 KiB
 * (loaded by hash when first used), N rounds of CUDA 13's
 * context-taking queries and occupancy (answered from the caches), its
 * CUkernel in a graph kernel node and in a captured launch, and the
 * context-taking and per-thread forms of synchronisation refused in a
 * capture. */
static void test_runtime(int n)
{
	CUdevice dev;
	CUcontext ctx = setup(&dev);
	char *img = padded(32 << 10);
	CUlibrary lib;
	CUkernel k;
	OK(cuLibraryLoadData(&lib, img, NULL, NULL, 0, NULL, NULL, 0));
	free(img);
	OK(cuLibraryGetKernel(&k, lib, "add"));
	int blocks0 = 0;
	OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks0, (CUfunction)(void *)k, 128, 0));
	EXPECT(blocks0 > 0);
	for (int i = 0; i < n; i++) {
		CUdevice d = -1;
		OK(cuCtxGetDevice_v2(&d, ctx));
		EXPECT(d == dev);
		d = -1;
		OK(cuCtxGetDevice_v2(&d, NULL));
		EXPECT(d == dev);
		unsigned flags = 99;
		OK(cuCtxGetFlags(&flags));
		EXPECT(flags == 0);
		int blocks = 0;
		OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, (CUfunction)(void *)k, 128, 0));
		EXPECT(blocks == blocks0);
	}

	unsigned cnt = 1024, one = 1, two = 2;
	CUdeviceptr p;
	OK(cuMemAlloc(&p, cnt * 4));
	OK(cuMemsetD32(p, 0, cnt));
	void *a1[] = { &p, &one, &cnt }, *a2[] = { &p, &two, &cnt };
	/* A kernel node naming the CUkernel, not a function. */
	CUgraph g;
	OK(cuGraphCreate(&g, 0));
	CUDA_KERNEL_NODE_PARAMS kp = { .gridDimX = cnt / 128, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 128,
				       .blockDimY = 1, .blockDimZ = 1, .kernelParams = a1, .kern = k };
	CUgraphNode nd;
	OK(cuGraphAddKernelNode(&nd, g, NULL, 0, &kp));
	CUgraphExec x;
	OK(cuGraphInstantiate(&x, g, 0));
	OK(cuGraphLaunch(x, NULL));
	OK(cuCtxSynchronize_v2(ctx));
	check_sum(p, cnt, 1, "kernel node with a CUkernel");
	OK(cuGraphExecDestroy(x));
	OK(cuGraphDestroy(g));

	/* A CUkernel launched into a capture. */
	CUstream s;
	OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	OK(cuLaunchKernel((CUfunction)(void *)k, cnt / 128, 1, 1, 128, 1, 1, 0, s, a2, NULL));
	OK(cuStreamEndCapture(s, &g));
	OK(cuGraphInstantiate(&x, g, 0));
	OK(cuGraphLaunch(x, s));
	OK(cuGraphLaunch(x, s));
	OK(cuStreamSynchronize(s));
	check_sum(p, cnt, 5, "captured launch of a CUkernel");
	OK(cuGraphExecDestroy(x));
	OK(cuGraphDestroy(g));

	/* Synchronising under a capture fails and invalidates it, in the
	 * CUDA 13 and per-thread forms too. */
	OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK(cuCtxSynchronize_v2(ctx), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CHECK(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	CUresult (*sync_ptsz)(CUstream) = NULL;
	CUdriverProcAddressQueryResult st;
	OK(cuGetProcAddress("cuStreamSynchronize", (void **)&sync_ptsz, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
			    &st));
	EXPECT(sync_ptsz != NULL && sync_ptsz != cuStreamSynchronize);
	OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	if (sync_ptsz != NULL)
		CHECK(sync_ptsz(s), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CHECK(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	OK(cuStreamDestroy(s));
	OK(cuMemFree(p));
	OK(cuLibraryUnload(lib));
}

/* launches makes N launches, each checked in the client against the
 * device's and the kernel's limits, and one refused by the check: the
 * statistics show what the checks cost. */
static void test_launches(int n)
{
	CUdevice dev;
	setup(&dev);
	CUmodule m;
	CUfunction f;
	OK(cuModuleLoadData(&m, kernel));
	OK(cuModuleGetFunction(&f, m, "add"));
	unsigned cnt = 1024, one = 1;
	CUdeviceptr p;
	OK(cuMemAlloc(&p, cnt * 4));
	OK(cuMemsetD32(p, 0, cnt));
	void *a[] = { &p, &one, &cnt };
	for (int i = 0; i < n; i++)
		OK(cuLaunchKernel(f, cnt / 128, 1, 1, 128, 1, 1, 0, NULL, a, NULL));
	CHECK(cuLaunchKernel(f, 1, 1, 1, 4096, 1, 1, 0, NULL, a, NULL), CUDA_ERROR_INVALID_VALUE);
	OK(cuCtxSynchronize());
	check_sum(p, cnt, (unsigned)n, "checked launches");
	OK(cuMemFree(p));
	OK(cuModuleUnload(m));
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "hot";
	if (strcmp(mode, "hot") == 0)
		test_hot(argc > 2 ? atoi(argv[2]) : 1000);
	else if (strcmp(mode, "sizes") == 0)
		test_sizes();
	else if (strcmp(mode, "graph") == 0)
		test_graph(argc > 2 ? atoi(argv[2]) : 1000);
	else if (strcmp(mode, "runtime") == 0)
		test_runtime(argc > 2 ? atoi(argv[2]) : 1000);
	else if (strcmp(mode, "launches") == 0)
		test_launches(argc > 2 ? atoi(argv[2]) : 1000);
	else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	if (failures) {
		fprintf(stderr, "%d failures\n", failures);
		return 1;
	}
	printf("PASS %s\n", mode);
	return 0;
}
