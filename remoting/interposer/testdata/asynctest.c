/* Asynchronous copies from and to page-locked memory through libcuda.so.1:
 * several streams, events, host functions, pinned host-to-device and
 * device-to-host copies of various sizes around kernels, checking the data
 * and the order in which completion becomes visible.
 * Usage: asynctest check | replay ROUNDS | threads THREADS ROUNDS */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"


/* add(p, v, n): p[i] += v for i < n (32-bit words). */
static const char *ptx = ADD_PTX;

static CUfunction add_fn;

static void add(CUdeviceptr p, uint32_t v, size_t bytes, CUstream s)
{
	uint32_t n = (uint32_t)(bytes / 4);
	void *args[] = { &p, &v, &n };
	OK(cuLaunchKernel(add_fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
}

static CUcontext ctx;

static void setup(void)
{
	CUdevice dev;
	CUmodule mod;
	OK(cuInit(0));
	OK(cuDeviceGet(&dev, 0));
	OK(cuCtxCreate(&ctx, NULL, 0, dev));
	OK(cuModuleLoadData(&mod, ptx));
	OK(cuModuleGetFunction(&add_fn, mod, "add"));
}

/* fill writes word i = seed + i; check compares against seed + i + plus. */
static void fill(uint32_t *p, size_t bytes, uint32_t seed)
{
	for (size_t i = 0; i < bytes / 4; i++)
		p[i] = seed + (uint32_t)i;
}

static size_t mismatch(const uint32_t *p, size_t bytes, uint32_t seed)
{
	for (size_t i = 0; i < bytes / 4; i++)
		if (p[i] != seed + (uint32_t)i)
			return i + 1;
	return 0;
}

struct cbcheck {
	const uint32_t *p;
	size_t bytes;
	uint32_t seed;
	int ran, bad;
};

static void host_check(void *arg)
{
	struct cbcheck *c = arg;
	c->ran++;
	if (mismatch(c->p, c->bytes, c->seed))
		c->bad++;
}

static void stream_check(CUstream s, CUresult status, void *arg)
{
	if (status != CUDA_SUCCESS)
		((struct cbcheck *)arg)->bad++;
	host_check(arg);
}

enum { NSTREAMS = 4 };

/* Sizes of the streams' copies: one small enough for the request ring,
 * and larger ones sent by reference and received deferred. */
static const size_t sizes[NSTREAMS] = { 4096, (64 << 10) + 4, 256 << 10, (512 << 10) + 12 };

/* round runs one pass over all streams: upload, kernel, download, a
 * second kernel on the same device buffer and a second download (which
 * must see it, while the first must not), an event; then it waits for
 * each event by polling, checking the data as soon as the event says the
 * copies are done. */
static void round_trip(CUstream *st, CUevent *ev, CUdeviceptr *d, uint32_t **in, uint32_t **out1, uint32_t **out2,
		       uint32_t seed, int poll)
{
	for (int i = 0; i < NSTREAMS; i++) {
		fill(in[i], sizes[i], seed + 1000u * i);
		memset(out1[i], 0xee, sizes[i]);
		memset(out2[i], 0xee, sizes[i]);
		OK(cuMemcpyHtoDAsync(d[i], in[i], sizes[i], st[i]));
		add(d[i], 1 + i, sizes[i], st[i]);
		OK(cuMemcpyDtoHAsync(out1[i], d[i], sizes[i], st[i]));
		add(d[i], 100, sizes[i], st[i]);
		OK(cuMemcpyDtoHAsync(out2[i], d[i], sizes[i], st[i]));
		OK(cuEventRecord(ev[i], st[i]));
	}
	for (int i = 0; i < NSTREAMS; i++) {
		if (poll) {
			CUresult r;
			long spins = 0;
			while ((r = cuEventQuery(ev[i])) == CUDA_ERROR_NOT_READY)
				spins++;
			OK(r);
		} else {
			OK(cuEventSynchronize(ev[i]));
		}
		uint32_t want = seed + 1000u * i + 1 + i;
		size_t at = mismatch(out1[i], sizes[i], want);
		EXPECT(at == 0, "stream %d, %zu bytes, round %u: first download wrong at word %zu: %#x, want %#x", i,
		       sizes[i], seed, at - 1, at ? out1[i][at - 1] : 0, at ? want + (uint32_t)(at - 1) : 0);
		at = mismatch(out2[i], sizes[i], want + 100);
		EXPECT(at == 0, "stream %d, %zu bytes, round %u: second download wrong at word %zu: %#x", i, sizes[i], seed,
		       at - 1, at ? out2[i][at - 1] : 0);
	}
}

struct bufs {
	CUstream st[NSTREAMS];
	CUevent ev[NSTREAMS];
	CUdeviceptr d[NSTREAMS];
	uint32_t *in[NSTREAMS], *out1[NSTREAMS], *out2[NSTREAMS];
	void *raw[NSTREAMS]; /* registered, not allocated */
};

static void bufs_init(struct bufs *b)
{
	for (int i = 0; i < NSTREAMS; i++) {
		OK(cuStreamCreate(&b->st[i], CU_STREAM_NON_BLOCKING));
		OK(cuEventCreate(&b->ev[i], CU_EVENT_DISABLE_TIMING));
		OK(cuMemAlloc(&b->d[i], sizes[i]));
		/* Both kinds of page-locked memory: allocated by the library
		 * and registered with it. */
		OK(cuMemHostAlloc((void **)&b->in[i], sizes[i], 0));
		OK(cuMemAllocHost((void **)&b->out1[i], sizes[i]));
		b->raw[i] = malloc(sizes[i] + 64);
		b->out2[i] = (uint32_t *)((char *)b->raw[i] + 64);
		OK(cuMemHostRegister(b->raw[i], sizes[i] + 64, 0));
	}
}

static void bufs_free(struct bufs *b)
{
	for (int i = 0; i < NSTREAMS; i++) {
		OK(cuMemFreeHost(b->in[i]));
		OK(cuMemFreeHost(b->out1[i]));
		OK(cuMemHostUnregister(b->raw[i]));
		free(b->raw[i]);
		OK(cuMemFree(b->d[i]));
		OK(cuEventDestroy(b->ev[i]));
		OK(cuStreamDestroy(b->st[i]));
	}
}

static void test_check(void)
{
	setup();
	struct bufs b;
	bufs_init(&b);

	/* Completion seen through event queries, event waits, stream and
	 * context synchronisation. */
	round_trip(b.st, b.ev, b.d, b.in, b.out1, b.out2, 1, 1);
	round_trip(b.st, b.ev, b.d, b.in, b.out1, b.out2, 2, 0);
	for (int i = 0; i < NSTREAMS; i++) {
		OK(cuMemcpyDtoHAsync(b.out1[i], b.d[i], sizes[i], b.st[i]));
		add(b.d[i], 1, sizes[i], b.st[i]);
	}
	OK(cuCtxSynchronize());
	for (int i = 0; i < NSTREAMS; i++)
		EXPECT(mismatch(b.out1[i], sizes[i], 2 + 1000u * i + 1 + i + 100) == 0, "stream %d after cuCtxSynchronize", i);
	for (int i = 0; i < NSTREAMS; i++) {
		OK(cuMemcpyDtoHAsync(b.out2[i], b.d[i], sizes[i], b.st[i]));
		OK(cuStreamSynchronize(b.st[i]));
		EXPECT(mismatch(b.out2[i], sizes[i], 2 + 1000u * i + 1 + i + 101) == 0, "stream %d after cuStreamSynchronize", i);
	}

	/* The upload's buffer may be reused once the stream is past it: the
	 * device has the bytes as they were at the call. */
	for (int i = 0; i < NSTREAMS; i++) {
		fill(b.in[i], sizes[i], 7000u + i);
		OK(cuMemcpyHtoDAsync(b.d[i], b.in[i], sizes[i], b.st[i]));
		OK(cuEventRecord(b.ev[i], b.st[i]));
	}
	for (int i = 0; i < NSTREAMS; i++) {
		OK(cuEventSynchronize(b.ev[i]));
		memset(b.in[i], 0, sizes[i]);
		OK(cuMemcpyDtoH(b.out1[i], b.d[i], sizes[i]));
		EXPECT(mismatch(b.out1[i], sizes[i], 7000u + i) == 0, "stream %d: upload after reuse", i);
	}

	/* A host function (or a stream callback) sees the data of the
	 * downloads queued before it. */
	struct cbcheck cb[NSTREAMS];
	for (int i = 0; i < NSTREAMS; i++) {
		fill(b.in[i], sizes[i], 9000u + i);
		memset(b.out2[i], 0, sizes[i]);
		OK(cuMemcpyHtoDAsync(b.d[i], b.in[i], sizes[i], b.st[i]));
		add(b.d[i], 5, sizes[i], b.st[i]);
		OK(cuMemcpyDtoHAsync(b.out2[i], b.d[i], sizes[i], b.st[i]));
		cb[i] = (struct cbcheck){ b.out2[i], sizes[i], 9005u + i, 0, 0 };
		if (i & 1)
			OK(cuStreamAddCallback(b.st[i], stream_check, &cb[i], 0));
		else
			OK(cuLaunchHostFunc(b.st[i], host_check, &cb[i]));
	}
	OK(cuCtxSynchronize());
	for (int i = 0; i < NSTREAMS; i++)
		EXPECT(cb[i].ran == 1 && cb[i].bad == 0, "stream %d: host function ran %d times, saw wrong data %d times", i,
		       cb[i].ran, cb[i].bad);

	/* Across streams: stream 1 waits for stream 0's kernel, then
	 * downloads its result. */
	fill(b.in[0], sizes[0], 500);
	OK(cuMemcpyHtoDAsync(b.d[0], b.in[0], sizes[0], b.st[0]));
	add(b.d[0], 3, sizes[0], b.st[0]);
	OK(cuEventRecord(b.ev[0], b.st[0]));
	OK(cuStreamWaitEvent(b.st[1], b.ev[0], 0));
	OK(cuMemcpyDtoHAsync(b.out1[1], b.d[0], sizes[0], b.st[1]));
	OK(cuEventRecord(b.ev[1], b.st[1]));
	OK(cuEventSynchronize(b.ev[1]));
	EXPECT(mismatch(b.out1[1], sizes[0], 503) == 0, "download on stream 1 after waiting for stream 0");

	/* Odd sizes and offsets inside the page-locked ranges, and the
	 * generic cuMemcpyAsync. */
	{
		size_t n = (2 << 20) + 3;
		uint8_t *src, *dst;
		CUdeviceptr dd;
		OK(cuMemAllocHost((void **)&src, n + 1));
		OK(cuMemAllocHost((void **)&dst, n + 1));
		OK(cuMemAlloc(&dd, n));
		for (size_t i = 0; i < n; i++)
			src[i + 1] = (uint8_t)(i * 13 + 1);
		memset(dst, 0, n + 1);
		OK(cuMemcpyAsync(dd, (CUdeviceptr)(uintptr_t)(src + 1), n, b.st[2]));
		OK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)(dst + 1), dd, n, b.st[2]));
		OK(cuStreamSynchronize(b.st[2]));
		EXPECT(memcmp(src + 1, dst + 1, n) == 0 && dst[0] == 0, "odd-sized copy through cuMemcpyAsync");
		/* A 2D copy whose host side is packed takes the same path. */
		CUDA_MEMCPY2D c2 = { .srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = dd, .srcPitch = 4096,
				     .dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = dst, .dstPitch = 1024,
				     .WidthInBytes = 1024, .Height = 256 };
		memset(dst, 0, n);
		OK(cuMemcpy2DAsync(&c2, b.st[3]));
		OK(cuStreamSynchronize(b.st[3]));
		int ok2 = 1;
		for (size_t y = 0; y < 256 && ok2; y++)
			ok2 = memcmp(dst + y * 1024, src + 1 + y * 4096, 1024) == 0;
		EXPECT(ok2, "2D download into page-locked memory");
		/* Freeing right after queuing is safe: the free waits for the
		 * copies that use the memory. */
		OK(cuMemcpyDtoHAsync(dst, dd, n, b.st[3]));
		OK(cuMemcpyHtoDAsync(dd, src, n, b.st[2]));
		OK(cuMemFreeHost(dst));
		OK(cuMemFreeHost(src));
		OK(cuCtxSynchronize());
		OK(cuMemFree(dd));
	}

	/* Pageable memory still works (the copy waits). */
	{
		uint32_t *pg = malloc(sizes[2]);
		fill(b.in[2], sizes[2], 42);
		OK(cuMemcpyHtoDAsync(b.d[2], b.in[2], sizes[2], b.st[2]));
		OK(cuMemcpyDtoHAsync(pg, b.d[2], sizes[2], b.st[2]));
		EXPECT(mismatch(pg, sizes[2], 42) == 0, "pageable download");
		free(pg);
	}

	/* A failing download is reported, by the call (NVIDIA's driver checks
	 * the address there) or by the next synchronisation (gpuctl queues
	 * it), once, and leaves the destination alone. */
	memset(b.out1[0], 0x5a, 64);
	CUresult r1 = cuMemcpyDtoHAsync(b.out1[0], 0x10, 64, b.st[0]);
	CUresult r2 = cuStreamSynchronize(b.st[0]);
	EXPECT(r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS, "the failed download was not reported");
	OK(cuStreamSynchronize(b.st[0]));
	EXPECT(b.out1[0][0] == 0x5a5a5a5a, "a failed download wrote its destination");

	bufs_free(&b);
	if (failures == 0)
		printf("PASS check\n");
}

/* replay runs rounds until told to stop, while the test cuts the
 * connection or moves the session: every round's data must be exact,
 * in particular the first download, whose source the next kernel
 * overwrites before anyone waits. */
static void test_replay(int rounds)
{
	setup();
	struct bufs b;
	bufs_init(&b);
	for (int k = 0; k < rounds && failures == 0; k++)
		round_trip(b.st, b.ev, b.d, b.in, b.out1, b.out2, (uint32_t)k * 7919u, k & 1);
	bufs_free(&b);
	if (failures == 0)
		printf("PASS replay\n");
}

/* threads runs rounds on several threads at once, each with its own
 * streams and buffers in the one context: their deferred downloads share
 * the reply reader with each other's synchronous calls. */
static int nrounds;

static void *thread_rounds(void *arg)
{
	int id = (int)(intptr_t)arg;
	OK(cuCtxSetCurrent(ctx));
	struct bufs b;
	bufs_init(&b);
	for (int k = 0; k < nrounds && failures == 0; k++)
		round_trip(b.st, b.ev, b.d, b.in, b.out1, b.out2, (uint32_t)(id * 100000 + k * 7919), (k + id) & 1);
	bufs_free(&b);
	return NULL;
}

static void test_threads(int n, int rounds)
{
	setup();
	nrounds = rounds;
	pthread_t t[16];
	if (n > 16)
		n = 16;
	for (int i = 0; i < n; i++)
		pthread_create(&t[i], NULL, thread_rounds, (void *)(intptr_t)i);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	if (failures == 0)
		printf("PASS threads\n");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "check";
	if (strcmp(mode, "check") == 0)
		test_check();
	else if (strcmp(mode, "replay") == 0)
		test_replay(argc > 2 ? atoi(argv[2]) : 100);
	else if (strcmp(mode, "threads") == 0)
		test_threads(argc > 2 ? atoi(argv[2]) : 4, argc > 3 ? atoi(argv[3]) : 20);
	else {
		fprintf(stderr, "usage: asynctest check | replay ROUNDS | threads THREADS ROUNDS\n");
		return 2;
	}
	return failures ? 1 : 0;
}
