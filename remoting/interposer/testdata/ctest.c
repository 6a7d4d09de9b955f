/* Client-level test of libcuda.so.1 against a gpuctl server: built with
 * gcc against build/include/cuda.h only, as an application would be.
 * Usage: ctest basic | replay N | flood N | threads T N | bulk T N | dead | badtoken | nodevice
 *        | end exit|_exit|fork */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"


/* inc(p, n): p[i] += 1 for i < n. add(p, v, n): p[i] += v. */
static const char *ptx =
	".version 7.0\n"
	".target sm_52\n"
	".address_size 64\n"
	".visible .entry inc(.param .u64 p, .param .u32 n)\n"
	"{\n"
	"  .reg .pred %p<2>;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<5>;\n"
	"  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r2, [n];\n"
	"  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
	"  mad.lo.s32 %r1, %r3, %r4, %r5;\n"
	"  setp.ge.u32 %p1, %r1, %r2;\n  @%p1 bra DONE;\n"
	"  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
	"  ld.global.u32 %r6, [%rd4];\n  add.s32 %r7, %r6, 1;\n  st.global.u32 [%rd4], %r7;\n"
	"DONE:\n  ret;\n}\n"
	".visible .entry add(.param .u64 p, .param .u32 v, .param .u32 n)\n"
	"{\n"
	"  .reg .pred %p<2>;\n  .reg .b32 %r<9>;\n  .reg .b64 %rd<5>;\n"
	"  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r8, [v];\n  ld.param.u32 %r2, [n];\n"
	"  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
	"  mad.lo.s32 %r1, %r3, %r4, %r5;\n"
	"  setp.ge.u32 %p1, %r1, %r2;\n  @%p1 bra DONE;\n"
	"  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
	"  ld.global.u32 %r6, [%rd4];\n  add.s32 %r7, %r6, %r8;\n  st.global.u32 [%rd4], %r7;\n"
	"DONE:\n  ret;\n}\n";

static CUcontext setup(void)
{
	CUdevice dev;
	CUcontext ctx = NULL;
	OK(cuInit(0));
	OK(cuDeviceGet(&dev, 0));
	OK(cuCtxCreate(&ctx, NULL, 0, dev));
	return ctx;
}

static void test_basic(void)
{
	int n = 0, v = 0, major = 0, minor = 0;
	CUdevice dev;
	char name[128] = { 0 };
	size_t total = 0, freeb = 0;
	CUuuid uuid;

	CHECK(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
	OK(cuDriverGetVersion(&v));
	EXPECT(v == CUDA_VERSION);
	OK(cuInit(0));
	OK(cuDeviceGetCount(&n));
	EXPECT(n >= 1);
	CHECK(cuDeviceGet(&dev, n), CUDA_ERROR_INVALID_DEVICE);
	OK(cuDeviceGet(&dev, 0));
	OK(cuDeviceGetName(name, sizeof name, dev));
	EXPECT(strlen(name) > 0);
	OK(cuDeviceTotalMem(&total, dev));
	EXPECT(total > 0);
	OK(cuDeviceGetUuid(&uuid, dev));
	OK(cuDeviceComputeCapability(&major, &minor, dev));
	EXPECT(major >= 5);
	OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
	EXPECT(v == 32);
	OK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev));
	EXPECT(v >= 512);

	/* Primary context and the context stack. */
	CUcontext pctx = NULL, cur = NULL, ctx = NULL, popped = NULL;
	unsigned flags = 0;
	int active = -1;
	CHECK(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
	OK(cuDevicePrimaryCtxRetain(&pctx, dev));
	OK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	EXPECT(active == 1);
	OK(cuCtxSetCurrent(pctx));
	OK(cuCtxGetCurrent(&cur));
	EXPECT(cur == pctx);
	OK(cuCtxCreate(&ctx, NULL, 0, dev));
	OK(cuCtxGetCurrent(&cur));
	EXPECT(cur == ctx);
	OK(cuCtxPopCurrent(&popped));
	EXPECT(popped == ctx);
	OK(cuCtxPushCurrent(ctx));
	CUdevice cd = -1;
	OK(cuCtxGetDevice(&cd));
	EXPECT(cd == dev);
	OK(cuMemGetInfo(&freeb, &total));
	EXPECT(freeb > 0 && freeb <= total);

	/* Copies and fills. */
	enum { N = 1 << 20 };
	unsigned char *h = malloc(N), *g = malloc(N);
	for (int i = 0; i < N; i++)
		h[i] = (unsigned char)(i * 7 + 3);
	CUdeviceptr d1, d2, base;
	size_t sz = 0;
	OK(cuMemAlloc(&d1, N));
	OK(cuMemAlloc(&d2, N));
	OK(cuMemGetAddressRange(&base, &sz, d1 + 100));
	EXPECT(base == d1 && sz == N);
	OK(cuMemcpyHtoD(d1, h, N));
	OK(cuMemcpyDtoD(d2, d1, N));
	memset(g, 0, N);
	OK(cuMemcpyDtoH(g, d2, N));
	EXPECT(memcmp(g, h, N) == 0);
	OK(cuMemsetD8(d1, 0xab, N));
	OK(cuMemcpyDtoH(g, d1, 16));
	EXPECT(g[0] == 0xab && g[15] == 0xab);
	OK(cuMemsetD16(d1, 0x1234, 8));
	OK(cuMemsetD32(d1 + 16, 0xdeadbeef, 4));
	OK(cuMemcpyDtoH(g, d1, 32));
	EXPECT(g[0] == 0x34 && g[1] == 0x12 && g[16] == 0xef && g[19] == 0xde && g[32 - 1] == 0xde);
	/* Unified cuMemcpy: host->device, device->host, host->host. */
	OK(cuMemcpy(d2, (CUdeviceptr)(uintptr_t)h, 4096));
	memset(g, 0, 4096);
	OK(cuMemcpy((CUdeviceptr)(uintptr_t)g, d2, 4096));
	EXPECT(memcmp(g, h, 4096) == 0);
	memset(g, 0, 64);
	OK(cuMemcpy((CUdeviceptr)(uintptr_t)g, (CUdeviceptr)(uintptr_t)h, 64));
	EXPECT(memcmp(g, h, 64) == 0);

	/* Streams, events and async copies with pinned memory. */
	CUstream s;
	CUevent e0, e1;
	void *pin = NULL;
	unsigned hf = 0;
	float ms = -1;
	OK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, -1));
	OK(cuEventCreate(&e0, CU_EVENT_DEFAULT));
	OK(cuEventCreate(&e1, CU_EVENT_DEFAULT));
	OK(cuMemHostAlloc(&pin, 8192, CU_MEMHOSTALLOC_PORTABLE));
	OK(cuMemHostGetFlags(&hf, pin));
	EXPECT(hf == CU_MEMHOSTALLOC_PORTABLE);
	OK(cuMemHostRegister(h, N, 0));
	CHECK(cuMemHostRegister(h + 10, 10, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
	memcpy(pin, h, 8192);
	OK(cuEventRecord(e0, s));
	OK(cuMemsetD32Async(d1, 7, 2048, s));
	OK(cuMemcpyHtoDAsync(d2, pin, 8192, s));
	OK(cuMemcpyDtoDAsync(d1 + 8192, d2, 8192, s));
	OK(cuEventRecord(e1, s));
	OK(cuStreamWaitEvent(NULL, e1, 0));
	OK(cuEventSynchronize(e1));
	OK(cuEventQuery(e1));
	OK(cuEventElapsedTime(&ms, e0, e1));
	EXPECT(ms >= 0);
	OK(cuMemcpyDtoHAsync(g, d1, 16384, s));
	OK(cuStreamSynchronize(s));
	OK(cuStreamQuery(s));
	EXPECT(((unsigned *)g)[0] == 7 && ((unsigned *)g)[2047] == 7);
	EXPECT(memcmp(g + 8192, h, 8192) == 0);
	/* Pointer attributes and device lookup by bus id. */
	{
		unsigned mt = 0;
		CUdeviceptr start = 0;
		size_t rsz = 0;
		CUcontext pc = NULL;
		int ord = -1;
		char bus[64];
		CUdevice bd = -1;
		OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d2 + 10));
		EXPECT(mt == CU_MEMORYTYPE_DEVICE);
		OK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d2 + 10));
		OK(cuPointerGetAttribute(&rsz, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d2 + 10));
		EXPECT(start == d2 && rsz == N);
		OK(cuPointerGetAttribute(&pc, CU_POINTER_ATTRIBUTE_CONTEXT, d2));
		EXPECT(pc == ctx);
		OK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d2));
		EXPECT(ord == dev);
		OK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)(h + 5)));
		EXPECT(mt == CU_MEMORYTYPE_HOST);
		CHECK(cuPointerGetAttribute(&mt, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)&mt),
		      CUDA_ERROR_INVALID_VALUE);
		OK(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
		OK(cuDeviceGetByPCIBusId(&bd, bus));
		EXPECT(bd == dev);
		CHECK(cuDeviceGetByPCIBusId(&bd, "ffff:ff:1f.7"), CUDA_ERROR_INVALID_DEVICE);
	}
	OK(cuMemHostUnregister(h));
	CHECK(cuMemHostUnregister(h), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
	OK(cuMemFreeHost(pin));
	OK(cuEventDestroy(e0));
	OK(cuEventDestroy(e1));
	OK(cuStreamDestroy(s));

	/* Modules and launches, with kernelParams and with extra. */
	CUmodule mod;
	CUfunction finc, fadd, fnone;
	OK(cuModuleLoadData(&mod, ptx));
	OK(cuModuleGetFunction(&finc, mod, "inc"));
	OK(cuModuleGetFunction(&fadd, mod, "add"));
	CHECK(cuModuleGetFunction(&fnone, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
	int nthreads = 0;
	OK(cuFuncGetAttribute(&nthreads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, finc));
	EXPECT(nthreads > 0);
	unsigned cnt = 1000;
	OK(cuMemsetD32(d1, 0, cnt));
	void *args[] = { &d1, &cnt };
	for (int i = 0; i < 10; i++)
		OK(cuLaunchKernel(finc, (cnt + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
	struct {
		CUdeviceptr p;
		unsigned v, n;
	} pk = { d1, 5, cnt };
	size_t pks = sizeof pk;
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &pk, CU_LAUNCH_PARAM_BUFFER_SIZE, &pks, CU_LAUNCH_PARAM_END };
	OK(cuLaunchKernel(fadd, (cnt + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
	OK(cuCtxSynchronize());
	OK(cuMemcpyDtoH(g, d1, cnt * 4));
	EXPECT(((unsigned *)g)[0] == 15 && ((unsigned *)g)[cnt - 1] == 15);
	OK(cuModuleUnload(mod));

	/* The other ways to load the same code: from a file, with JIT
	 * options, as a fatbin holding the PTX, and through nvcc's fatbin
	 * wrapper. Each must yield a working "inc". */
	{
		char path[] = "/tmp/gpuctl-ctest-XXXXXX";
		int fd = mkstemp(path);
		EXPECT(fd >= 0 && write(fd, ptx, strlen(ptx)) == (ssize_t)strlen(ptx));
		close(fd);
		size_t pl = (strlen(ptx) + 8) & ~(size_t)7;
		unsigned char *fb = calloc(1, 16 + 64 + pl);
		uint32_t u32;
		uint16_t u16;
		uint64_t u64;
		u32 = 0xBA55ED50u, memcpy(fb, &u32, 4);
		u16 = 1, memcpy(fb + 4, &u16, 2);
		u16 = 16, memcpy(fb + 6, &u16, 2);
		u64 = 64 + pl, memcpy(fb + 8, &u64, 8);
		u16 = 1, memcpy(fb + 16, &u16, 2); /* PTX entry */
		u32 = 64, memcpy(fb + 16 + 4, &u32, 4);
		u64 = pl, memcpy(fb + 16 + 8, &u64, 8);
		u32 = 52, memcpy(fb + 16 + 28, &u32, 4);
		memcpy(fb + 16 + 64, ptx, strlen(ptx));
		struct {
			int magic, version;
			const void *data, *unused;
		} wrapper = { 0x466243b1, 1, fb, NULL };
		char log[64];
		CUjit_option opts[] = { CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
		void *vals[] = { log, (void *)(uintptr_t)sizeof log };
		for (int way = 0; way < 4; way++) {
			CUmodule m2 = NULL;
			CUfunction f2;
			CUresult r = way == 0 ? cuModuleLoad(&m2, path)
				   : way == 1 ? cuModuleLoadDataEx(&m2, ptx, 2, opts, vals)
				   : way == 2 ? cuModuleLoadFatBinary(&m2, fb)
					      : cuModuleLoadData(&m2, &wrapper);
			if (r != CUDA_SUCCESS) {
				fprintf(stderr, "FAIL: module load way %d: %d\n", way, (int)r);
				failures++;
				continue;
			}
			OK(cuModuleGetFunction(&f2, m2, "inc"));
			OK(cuMemsetD32(d1, 41, 4));
			unsigned four = 4;
			void *a2[] = { &d1, &four };
			OK(cuLaunchKernel(f2, 1, 1, 1, 32, 1, 1, 0, NULL, a2, NULL));
			unsigned v[4] = { 0 };
			OK(cuMemcpyDtoH(v, d1, sizeof v));
			EXPECT(v[0] == 42 && v[3] == 42);
			OK(cuModuleUnload(m2));
		}
		EXPECT((uintptr_t)vals[1] == 0); /* no log */
		CUmodule m3;
		CHECK(cuModuleLoad(&m3, "/nonexistent/kernel.ptx"), CUDA_ERROR_FILE_NOT_FOUND);
		unlink(path);
		free(fb);
	}

	/* Errors. */
	CUdeviceptr huge;
	const char *str = NULL;
	CHECK(cuMemAlloc(&huge, (size_t)1 << 50), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cuStreamSynchronize((CUstream)(uintptr_t)0x7777777), CUDA_ERROR_INVALID_HANDLE);
	CHECK(cuEventQuery((CUevent)(uintptr_t)0x7777777), CUDA_ERROR_INVALID_HANDLE);
	OK(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &str));
	EXPECT(str && strcmp(str, "CUDA_ERROR_OUT_OF_MEMORY") == 0);
	OK(cuGetErrorString(CUDA_ERROR_INVALID_VALUE, &str));
	EXPECT(str && strcmp(str, "invalid argument") == 0);
	OK(cuGetErrorName(CUDA_ERROR_KEY_ROTATION, &str)); /* every code of the enum has a name */
	EXPECT(str && strcmp(str, "CUDA_ERROR_KEY_ROTATION") == 0);
	CHECK(cuGetErrorName((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE);
	EXPECT(str == NULL);
	CHECK(cuGetErrorString((CUresult)12345, &str), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuGetErrorName(CUDA_SUCCESS, NULL), CUDA_ERROR_INVALID_VALUE);
	/* An asynchronous failure surfaces at the next synchronising call. */
	OK(cuMemsetD32Async(0x10, 1, 4, NULL));
	EXPECT(cuCtxSynchronize() != CUDA_SUCCESS);
	OK(cuCtxSynchronize());

	/* Lookup. */
	void *fn = NULL;
	CUdriverProcAddressQueryResult qr;
	OK(cuGetProcAddress("cuMemAlloc", &fn, 12000, 0, &qr));
	EXPECT(fn == (void *)cuMemAlloc_v2 && qr == CU_GET_PROC_ADDRESS_SUCCESS);
	OK(cuGetProcAddress("cuCtxCreate", &fn, 13000, 0, &qr));
	EXPECT(fn == (void *)cuCtxCreate_v4);
	OK(cuGetProcAddress("cuCtxCreate", &fn, 11000, 0, &qr));
	EXPECT(fn == (void *)cuCtxCreate_v2);
	/* The v2 ABI (what cuGetProcAddress names in CUDA 12 and 13) says
	 * "not found" in its status and succeeds with NULL. */
	OK(cuGetProcAddress("cuNoSuchCall", &fn, 13000, 0, &qr));
	EXPECT(fn == NULL && qr == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	OK(cuGetProcAddress("cuMemAllocManaged", &fn, 13000, 0, &qr));
	typedef CUresult (*managed_fn)(CUdeviceptr *, size_t, unsigned);
	CHECK(((managed_fn)fn)(&huge, 16, 1), CUDA_ERROR_NOT_SUPPORTED);

	OK(cuMemFree(d1));
	OK(cuMemFree(d2));
	OK(cuCtxDestroy(ctx));
	OK(cuDevicePrimaryCtxRelease(dev));
	free(h);
	free(g);
}

/* replay: N rounds of increment launches and copies; the server drops
 * the connection repeatedly meanwhile. Exactly-once execution means the
 * counters end at exactly N. */
static void test_replay(int rounds)
{
	CUcontext ctx = setup();
	(void)ctx;
	enum { CNT = 256 };
	CUmodule mod;
	CUfunction finc;
	CUdeviceptr d, acc;
	OK(cuModuleLoadData(&mod, ptx));
	OK(cuModuleGetFunction(&finc, mod, "inc"));
	OK(cuMemAlloc(&d, CNT * 4));
	OK(cuMemAlloc(&acc, 4 * (size_t)rounds));
	OK(cuMemsetD32(d, 0, CNT));
	unsigned cnt = CNT, host[CNT];
	void *args[] = { &d, &cnt };
	for (int i = 1; i <= rounds; i++) {
		OK(cuLaunchKernel(finc, 2, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
		unsigned v = (unsigned)i;
		OK(cuMemcpyHtoDAsync(acc + 4 * (size_t)(i - 1), &v, 4, NULL));
		if (i % 50 == 0) {
			OK(cuMemcpyDtoH(host, d, sizeof host));
			EXPECT(host[0] == (unsigned)i && host[CNT - 1] == (unsigned)i);
			if (host[0] != (unsigned)i) {
				fprintf(stderr, "round %d: counter %u\n", i, host[0]);
				break;
			}
		}
	}
	OK(cuCtxSynchronize());
	OK(cuMemcpyDtoH(host, d, sizeof host));
	EXPECT(host[0] == (unsigned)rounds && host[CNT - 1] == (unsigned)rounds);
	unsigned *all = malloc(4 * (size_t)rounds);
	OK(cuMemcpyDtoH(all, acc, 4 * (size_t)rounds));
	for (int i = 0; i < rounds; i++) {
		if (all[i] != (unsigned)(i + 1)) {
			fprintf(stderr, "FAIL: acc[%d] = %u\n", i, all[i]);
			failures++;
			break;
		}
	}
	free(all);
}

/* flood: N launches without a synchronous call in between, several times
 * the ring's capacity, so the client must recycle the ring from acks. */
static void test_flood(int n)
{
	setup();
	CUmodule mod;
	CUfunction finc;
	CUdeviceptr d;
	unsigned one = 1, v = 0;
	OK(cuModuleLoadData(&mod, ptx));
	OK(cuModuleGetFunction(&finc, mod, "inc"));
	OK(cuMemAlloc(&d, 4));
	OK(cuMemsetD32(d, 0, 1));
	void *args[] = { &d, &one };
	for (int i = 0; i < n; i++) {
		CUresult r = cuLaunchKernel(finc, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL);
		if (r != CUDA_SUCCESS) {
			CHECK(r, CUDA_SUCCESS);
			break;
		}
	}
	OK(cuCtxSynchronize());
	OK(cuMemcpyDtoH(&v, d, 4));
	if (v != (unsigned)n) {
		fprintf(stderr, "FAIL: counter %u after %d launches\n", v, n);
		failures++;
	}
}

/* threads: several threads share one context and interleave synchronous
 * and asynchronous calls; each checks its own data, so replies delivered
 * to the wrong thread or lost requests show up as wrong values. */
static CUcontext shared_ctx;
static CUfunction shared_inc;
static int thread_iters;
static pthread_mutex_t fail_mu = PTHREAD_MUTEX_INITIALIZER;

static void *worker(void *arg)
{
	int id = (int)(intptr_t)arg, bad = 0;
	enum { W = 4096 };
	unsigned host[W], back[W];
	if (cuCtxSetCurrent(shared_ctx) != CUDA_SUCCESS)
		bad++;
	for (int it = 0; it < thread_iters && !bad; it++) {
		CUdeviceptr d;
		if (cuMemAlloc(&d, sizeof host) != CUDA_SUCCESS) {
			bad++;
			break;
		}
		for (int i = 0; i < W; i++)
			host[i] = (unsigned)(id * 1000003 + it * 31 + i);
		unsigned n = W;
		void *args[] = { &d, &n };
		if (cuMemcpyHtoDAsync(d, host, sizeof host, NULL) != CUDA_SUCCESS ||
		    cuLaunchKernel(shared_inc, W / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL) != CUDA_SUCCESS ||
		    cuLaunchKernel(shared_inc, W / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL) != CUDA_SUCCESS ||
		    cuMemcpyDtoH(back, d, sizeof back) != CUDA_SUCCESS || cuMemFree(d) != CUDA_SUCCESS) {
			bad++;
			break;
		}
		for (int i = 0; i < W; i++) {
			if (back[i] != host[i] + 2) {
				fprintf(stderr, "thread %d iteration %d: [%d] = %u, want %u\n", id, it, i, back[i], host[i] + 2);
				bad++;
				break;
			}
		}
	}
	pthread_mutex_lock(&fail_mu);
	failures += bad;
	pthread_mutex_unlock(&fail_mu);
	return NULL;
}

static void test_threads(int nthreads, int iters)
{
	shared_ctx = setup();
	CUmodule mod;
	OK(cuModuleLoadData(&mod, ptx));
	OK(cuModuleGetFunction(&shared_inc, mod, "inc"));
	thread_iters = iters;
	pthread_t t[64];
	if (nthreads > 64)
		nthreads = 64;
	for (int i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	OK(cuCtxSynchronize());
}

/* bulk: copies of every size around the record and batch boundaries of
 * the TLS record layer, then T threads copying N rounds of a few MiB each
 * way at once, so that both directions' bulk records are in flight
 * together; every byte is checked, into and out of odd offsets. */
static int bulk_bad;

static void fill_pattern(unsigned char *p, size_t n, unsigned seed)
{
	uint32_t x = seed * 2654435761u + 1;
	for (size_t i = 0; i < n; i++) {
		x = x * 1664525u + 1013904223u;
		p[i] = (unsigned char)(x >> 24);
	}
}

static int bulk_round(size_t n, unsigned seed)
{
	unsigned char *h = malloc(n + 3), *g = malloc(n + 3);
	CUdeviceptr d;
	int bad = 0;
	if (h == NULL || g == NULL || cuMemAlloc(&d, n) != CUDA_SUCCESS) {
		free(h);
		free(g);
		return 1;
	}
	fill_pattern(h + 1, n, seed);
	memset(g, 0x5a, n + 3);
	if (cuMemcpyHtoD(d, h + 1, n) != CUDA_SUCCESS || cuMemcpyDtoH(g + 3, d, n) != CUDA_SUCCESS) {
		fprintf(stderr, "bulk copy of %zu bytes failed\n", n);
		bad = 1;
	} else if (memcmp(g + 3, h + 1, n) != 0 || g[0] != 0x5a || g[1] != 0x5a || g[2] != 0x5a) {
		size_t i = 0;
		while (i < n && g[3 + i] == h[1 + i])
			i++;
		fprintf(stderr, "bulk copy of %zu bytes came back different at byte %zu\n", n, i);
		bad = 1;
	}
	cuMemFree(d);
	free(h);
	free(g);
	return bad;
}

static void *bulk_worker(void *arg)
{
	int id = (int)(intptr_t)arg;
	if (cuCtxSetCurrent(shared_ctx) != CUDA_SUCCESS) {
		__atomic_add_fetch(&bulk_bad, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	for (int it = 0; it < thread_iters; it++) {
		size_t n = ((size_t)(1 + (id + it) % 4) << 20) + (size_t)(id * 7919 + it * 131) % 65536;
		if (bulk_round(n, (unsigned)(id * 1000 + it))) {
			__atomic_add_fetch(&bulk_bad, 1, __ATOMIC_RELAXED);
			break;
		}
	}
	return NULL;
}

static void test_bulk(int nthreads, int iters)
{
	shared_ctx = setup();
	static const size_t sizes[] = { 1, 100, 16383, 16384, 16385, 131071, 131072, 131073, 16 * 16384 - 1, 16 * 16384,
					16 * 16384 + 1, 1 << 20, (5 << 20) + 3, 17 * 16384 * 6 + 9 };
	for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
		if (bulk_round(sizes[i], (unsigned)i))
			failures++;
	thread_iters = iters;
	pthread_t t[16];
	if (nthreads > 16)
		nthreads = 16;
	for (int i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, bulk_worker, (void *)(intptr_t)i);
	for (int i = 0; i < nthreads; i++)
		pthread_join(t[i], NULL);
	failures += bulk_bad;
	OK(cuCtxSynchronize());
}

/* dead: the server goes away; calls must fail, not hang. */
static void test_dead(void)
{
	setup();
	CUdeviceptr d;
	OK(cuMemAlloc(&d, 4096));
	printf("READY\n");
	fflush(stdout);
	/* The test closes the server now; wait for it on stdin. */
	char line[16];
	if (fgets(line, sizeof line, stdin) == NULL)
		return;
	CUresult r = cuMemsetD32(d, 1, 1024);
	EXPECT(r == CUDA_ERROR_DEVICE_UNAVAILABLE);
	EXPECT(cuCtxSynchronize() == CUDA_ERROR_DEVICE_UNAVAILABLE);
	EXPECT(cuLaunchKernel((CUfunction)(uintptr_t)1, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL) != CUDA_SUCCESS);
}

/* end: work with queued asynchronous requests outstanding, then end the
 * way how says: "exit" returns from main (the library says goodbye at
 * exit), "_exit" leaves without running any exit handler, "fork" first
 * lets a forked child exit normally and then checks that the session
 * still serves this process. */
static void test_end(const char *how)
{
	setup();
	CUdeviceptr d;
	OK(cuMemAlloc(&d, 1 << 20));
	for (int i = 0; i < 64; i++)
		OK(cuMemsetD32Async(d, (unsigned)i, 1 << 18, NULL));
	if (strcmp(how, "_exit") == 0) {
		printf("PASS end _exit\n");
		fflush(stdout);
		_exit(failures != 0);
	}
	if (strcmp(how, "fork") == 0) {
		OK(cuCtxSynchronize());
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0)
			exit(0); /* runs the library's exit handling in the child */
		int st = 0;
		EXPECT(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
		/* The child's exit did not end the parent's session. */
		uint32_t v = 0;
		OK(cuMemsetD32(d, 7, 1 << 18));
		OK(cuMemcpyDtoH(&v, d + 4096, 4));
		EXPECT(v == 7);
	}
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "basic";
	if (strcmp(mode, "basic") == 0)
		test_basic();
	else if (strcmp(mode, "replay") == 0)
		test_replay(argc > 2 ? atoi(argv[2]) : 1000);
	else if (strcmp(mode, "flood") == 0)
		test_flood(argc > 2 ? atoi(argv[2]) : 100000);
	else if (strcmp(mode, "threads") == 0)
		test_threads(argc > 2 ? atoi(argv[2]) : 8, argc > 3 ? atoi(argv[3]) : 200);
	else if (strcmp(mode, "bulk") == 0)
		test_bulk(argc > 2 ? atoi(argv[2]) : 3, argc > 3 ? atoi(argv[3]) : 4);
	else if (strcmp(mode, "dead") == 0)
		test_dead();
	else if (strcmp(mode, "end") == 0 && argc > 2)
		test_end(argv[2]);
	else if (strcmp(mode, "badtoken") == 0)
		CHECK(cuInit(0), CUDA_ERROR_NOT_PERMITTED);
	else if (strcmp(mode, "nodevice") == 0)
		CHECK(cuInit(0), CUDA_ERROR_NO_DEVICE); /* no usable server: cuInit says so */
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
