/*
 * The demo's CUDA workload: an unmodified driver-API program whose state
 * lives in device memory, so that moving its session moves its state.
 *
 *   workload MIB STEPS SLEEP_MS [SEED]
 *
 * It fills MIB MiB of device memory, then runs STEPS kernel launches that
 * each rewrite every word from its previous value, printing one progress
 * line per step (with a checksum of the first page read back from the
 * device) and sleeping SLEEP_MS between steps so that a migration can
 * happen mid-run. SEED (default 0) changes the initial contents, so that
 * two runs share no blocks of device memory. At the end it reads the whole buffer back, recomputes
 * the same steps on the CPU and prints
 *
 *   RESULT <fnv-1a of the buffer> OK      (exit 0)
 *   RESULT <fnv-1a of the buffer> BAD n   (exit 1; n words differ)
 *
 * so a run is correct exactly when the device memory survived every
 * checkpoint and migration bit for bit.
 */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* x = (x * 1664525 + salt) ^ i, one thread per word; written as nvcc
 * writes PTX, so both the real driver and the emulated device run it. */
static const char ptx[] =
    ".version 7.5\n"
    ".target sm_75\n"
    ".address_size 64\n"
    "\n"
    ".visible .entry step(\n"
    "\t.param .u64 step_param_0,\n"
    "\t.param .u32 step_param_1,\n"
    "\t.param .u32 step_param_2\n"
    ")\n"
    "{\n"
    "\t.reg .pred \t%p<2>;\n"
    "\t.reg .b32 \t%r<10>;\n"
    "\t.reg .b64 \t%rd<5>;\n"
    "\n"
    "\tld.param.u64 \t%rd1, [step_param_0];\n"
    "\tld.param.u32 \t%r2, [step_param_1];\n"
    "\tld.param.u32 \t%r3, [step_param_2];\n"
    "\tmov.u32 \t%r4, %ctaid.x;\n"
    "\tmov.u32 \t%r5, %ntid.x;\n"
    "\tmov.u32 \t%r6, %tid.x;\n"
    "\tmad.lo.s32 \t%r1, %r4, %r5, %r6;\n"
    "\tsetp.ge.u32 \t%p1, %r1, %r2;\n"
    "\t@%p1 bra \t$L__BB0_2;\n"
    "\tcvta.to.global.u64 \t%rd2, %rd1;\n"
    "\tmul.wide.u32 \t%rd3, %r1, 4;\n"
    "\tadd.s64 \t%rd4, %rd2, %rd3;\n"
    "\tld.global.u32 \t%r7, [%rd4];\n"
    "\tmad.lo.s32 \t%r8, %r7, 1664525, %r3;\n"
    "\txor.b32 \t%r9, %r8, %r1;\n"
    "\tst.global.u32 \t[%rd4], %r9;\n"
    "$L__BB0_2:\n"
    "\tret;\n"
    "}\n";

#define CHECK(call)                                                              \
	do {                                                                     \
		CUresult r_ = (call);                                            \
		if (r_ != CUDA_SUCCESS) {                                        \
			const char *name_ = "?";                                 \
			cuGetErrorName(r_, &name_);                              \
			fprintf(stderr, "workload: %s failed: %s (%d)\n", #call, \
			        name_, (int)r_);                                 \
			exit(2);                                                 \
		}                                                                \
	} while (0)

static uint32_t salt(unsigned s) { return s * 7u + 1u; }

static uint64_t fnv1a(const uint32_t *w, size_t n)
{
	const unsigned char *p = (const unsigned char *)w;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < n * 4; i++) {
		h ^= p[i];
		h *= 1099511628211ull;
	}
	return h;
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: workload MIB STEPS SLEEP_MS [SEED]\n");
		return 2;
	}
	uint32_t seed = argc == 5 ? (uint32_t)strtoul(argv[4], NULL, 10) : 0;
	size_t mib = strtoul(argv[1], NULL, 10);
	unsigned steps = strtoul(argv[2], NULL, 10);
	unsigned sleep_ms = strtoul(argv[3], NULL, 10);
	if (mib == 0 || mib > 4096) {
		fprintf(stderr, "workload: MIB must be 1..4096\n");
		return 2;
	}
	size_t n = mib << 18; /* 32-bit words */
	size_t bytes = n * 4;
	uint32_t *host = malloc(bytes), *back = malloc(bytes);
	if (!host || !back) {
		fprintf(stderr, "workload: out of host memory\n");
		return 2;
	}
	for (size_t i = 0; i < n; i++)
		host[i] = (uint32_t)(i * 2654435761u) ^ (seed * 40503u);

	CUdevice dev;
	CUcontext ctx;
	CUmodule mod;
	CUfunction fn;
	CUdeviceptr buf;
	char name[128] = "";
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDeviceGetName(name, sizeof name, dev));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuModuleLoadData(&mod, ptx));
	CHECK(cuModuleGetFunction(&fn, mod, "step"));
	CHECK(cuMemAlloc(&buf, bytes));
	CHECK(cuMemcpyHtoD(buf, host, bytes));
	printf("workload: %zu MiB on %s, %u steps\n", mib, name, steps);
	fflush(stdout);

	unsigned block = 256, grid = (unsigned)((n + block - 1) / block);
	uint32_t nn = (uint32_t)n;
	for (unsigned s = 0; s < steps; s++) {
		uint32_t sl = salt(s);
		void *params[] = {&buf, &nn, &sl};
		double t0 = now();
		CHECK(cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, 0, params, NULL));
		CHECK(cuCtxSynchronize());
		uint32_t page[1024];
		size_t words = n < 1024 ? n : 1024;
		CHECK(cuMemcpyDtoH(page, buf, words * 4));
		printf("step %3u/%u  first-page %016llx  %.0f ms\n", s + 1, steps,
		       (unsigned long long)fnv1a(page, words), (now() - t0) * 1e3);
		fflush(stdout);
		if (sleep_ms) {
			struct timespec ts = {sleep_ms / 1000, (long)(sleep_ms % 1000) * 1000000L};
			nanosleep(&ts, NULL);
		}
	}
	if (steps == 0 && sleep_ms) {
		struct timespec ts = {sleep_ms / 1000, (long)(sleep_ms % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) != 0)
			;
	}
	CHECK(cuMemcpyDtoH(back, buf, bytes));
	CHECK(cuMemFree(buf));
	CHECK(cuModuleUnload(mod));
	CHECK(cuDevicePrimaryCtxRelease(dev));

	/* The same steps on the CPU. */
	for (unsigned s = 0; s < steps; s++) {
		uint32_t sl = salt(s);
		for (size_t i = 0; i < n; i++)
			host[i] = (host[i] * 1664525u + sl) ^ (uint32_t)i;
	}
	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += host[i] != back[i];
	unsigned long long h = (unsigned long long)fnv1a(back, n);
	if (bad) {
		printf("RESULT %016llx BAD %zu\n", h, bad);
		return 1;
	}
	printf("RESULT %016llx OK\n", h);
	return 0;
}
