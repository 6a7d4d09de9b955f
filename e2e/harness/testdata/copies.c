/* copies: a CUDA driver-API client that needs no kernels. It exercises
 * device discovery, contexts, allocation, every copy direction, memsets,
 * streams, events and pinned memory, and checks every result against what
 * it wrote. Modes (argv[1]):
 *   basic      all of the above; prints "copies: ok"
 *   oom        a 1 PiB allocation must fail with CUDA_ERROR_OUT_OF_MEMORY
 *   badhandle  a made-up stream must fail with CUDA_ERROR_INVALID_HANDLE
 *   loop SECS  copy round trips for SECS seconds (for tests that kill gpud)
 * Exit status 0 on success; otherwise one line on stderr. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(call)                                                         \
	do {                                                                \
		CUresult r_ = (call);                                       \
		if (r_ != CUDA_SUCCESS) {                                   \
			const char *n_ = "?";                               \
			cuGetErrorName(r_, &n_);                            \
			fprintf(stderr, "copies: %s failed: %s (%d) at line %d\n", \
				#call, n_, (int)r_, __LINE__);              \
			exit(10);                                           \
		}                                                           \
	} while (0)

#define EXPECT(cond, ...)                                                   \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "copies: " __VA_ARGS__);            \
			fputc('\n', stderr);                                \
			exit(11);                                           \
		}                                                           \
	} while (0)

static CUcontext setup(void) {
	CUdevice dev;
	CUcontext ctx;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	return ctx;
}

static double now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int basic(void) {
	int count = 0, major = 0, minor = 0, warp = 0;
	char name[256];
	size_t total = 0, freeb = 0;
	CUdevice dev;
	CHECK(cuInit(0));
	CHECK(cuDeviceGetCount(&count));
	EXPECT(count >= 1, "no device");
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDeviceGetName(name, sizeof name, dev));
	CHECK(cuDeviceTotalMem(&total, dev));
	CHECK(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
	CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	EXPECT(warp == 32, "warp size %d", warp);
	EXPECT(total > 0, "total memory 0");
	setup();

	const size_t n = 1 << 20;
	unsigned char *host = malloc(n), *back = malloc(n);
	for (size_t i = 0; i < n; i++)
		host[i] = (unsigned char)(i * 7 + 3);
	CUdeviceptr a, b;
	CHECK(cuMemAlloc(&a, n));
	CHECK(cuMemAlloc(&b, n));
	CHECK(cuMemGetInfo(&freeb, &total));
	EXPECT(total - freeb >= 2 * n, "cuMemGetInfo shows %zu in use", total - freeb);

	CHECK(cuMemcpyHtoD(a, host, n));
	CHECK(cuMemcpyDtoD(b, a, n));
	memset(back, 0, n);
	CHECK(cuMemcpyDtoH(back, b, n));
	EXPECT(memcmp(host, back, n) == 0, "HtoD/DtoD/DtoH round trip differs");

	CHECK(cuMemsetD8(a, 0xab, 100));
	CHECK(cuMemsetD16(a + 100, 0x1234, 50));
	CHECK(cuMemsetD32(a + 200, 0xdeadbeef, 25));
	CHECK(cuMemcpyDtoH(back, a, 300));
	for (int i = 0; i < 100; i++)
		EXPECT(back[i] == 0xab, "memset D8 byte %d = %x", i, back[i]);
	for (int i = 0; i < 50; i++) {
		unsigned short v;
		memcpy(&v, back + 100 + 2 * i, 2);
		EXPECT(v == 0x1234, "memset D16 element %d = %x", i, v);
	}
	for (int i = 0; i < 25; i++) {
		unsigned int v;
		memcpy(&v, back + 200 + 4 * i, 4);
		EXPECT(v == 0xdeadbeef, "memset D32 element %d = %x", i, v);
	}

	CUdeviceptr base;
	size_t size;
	CHECK(cuMemGetAddressRange(&base, &size, a + 1000));
	EXPECT(base == a && size >= n, "address range of a+1000: %llx %zu", (unsigned long long)base, size);

	/* Streams, events and pinned memory: an async pipeline. */
	CUstream s;
	CUevent start, stop;
	void *pinned;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
	CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
	CHECK(cuMemAllocHost(&pinned, n));
	memcpy(pinned, host, n);
	CHECK(cuEventRecord(start, s));
	CHECK(cuMemcpyHtoDAsync(b, pinned, n, s));
	/* The upload's buffer may be reused once the stream is past the
	 * copy, not before: an event after it says when. */
	CUevent uploaded;
	CHECK(cuEventCreate(&uploaded, CU_EVENT_DISABLE_TIMING));
	CHECK(cuEventRecord(uploaded, s));
	CHECK(cuMemsetD32Async(a, 7, n / 4, s));
	CHECK(cuMemcpyDtoDAsync(a, b, n / 2, s));
	CHECK(cuEventSynchronize(uploaded));
	memset(pinned, 0, n);
	CHECK(cuMemcpyDtoHAsync(pinned, a, n, s));
	CHECK(cuEventRecord(stop, s));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuEventSynchronize(stop));
	CHECK(cuStreamQuery(s));
	CHECK(cuEventQuery(stop));
	float ms = -1;
	CHECK(cuEventElapsedTime(&ms, start, stop));
	EXPECT(ms >= 0, "elapsed %f ms", ms);
	EXPECT(memcmp(pinned, host, n / 2) == 0, "async pipeline: first half differs");
	for (size_t i = n / 2; i < n; i += 4) {
		unsigned int v;
		memcpy(&v, (char *)pinned + i, 4);
		EXPECT(v == 7, "async pipeline: word at %zu = %u", i, v);
	}
	CHECK(cuStreamWaitEvent(s, stop, 0));
	CHECK(cuEventDestroy(start));
	CHECK(cuEventDestroy(stop));
	CHECK(cuEventDestroy(uploaded));
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFreeHost(pinned));
	CHECK(cuMemFree(a));
	CHECK(cuMemFree(b));
	CHECK(cuCtxSynchronize());
	printf("copies: ok (%s, sm_%d%d, %zu MiB)\n", name, major, minor, total >> 20);
	return 0;
}

static int oom(void) {
	CUdeviceptr p;
	setup();
	CUresult r = cuMemAlloc(&p, (size_t)1 << 50);
	EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "1 PiB allocation returned %d, want CUDA_ERROR_OUT_OF_MEMORY", (int)r);
	/* The session is still usable afterwards. */
	CHECK(cuMemAlloc(&p, 4096));
	CHECK(cuMemFree(p));
	printf("copies: oom ok\n");
	return 0;
}

static int badhandle(void) {
	setup();
	CUresult r = cuStreamSynchronize((CUstream)(uintptr_t)0xdeadbeef0ULL);
	EXPECT(r == CUDA_ERROR_INVALID_HANDLE, "made-up stream returned %d, want CUDA_ERROR_INVALID_HANDLE", (int)r);
	CHECK(cuCtxSynchronize());
	printf("copies: badhandle ok\n");
	return 0;
}

static int loop(double secs) {
	const size_t n = 64 << 10;
	unsigned char *buf = malloc(n);
	CUdeviceptr p;
	setup();
	CHECK(cuMemAlloc(&p, n));
	printf("copies: looping\n");
	fflush(stdout);
	double end = now() + secs;
	for (unsigned i = 0; now() < end; i++) {
		memset(buf, (int)i, n);
		CHECK(cuMemcpyHtoD(p, buf, n));
		CHECK(cuMemcpyDtoH(buf, p, n));
		EXPECT(buf[n - 1] == (unsigned char)i, "round trip %u corrupted", i);
	}
	printf("copies: loop ok\n");
	return 0;
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "basic";
	if (!strcmp(mode, "basic"))
		return basic();
	if (!strcmp(mode, "oom"))
		return oom();
	if (!strcmp(mode, "badhandle"))
		return badhandle();
	if (!strcmp(mode, "loop") && argc > 2)
		return loop(atof(argv[2]));
	fprintf(stderr, "usage: copies basic|oom|badhandle|loop SECS\n");
	return 2;
}
