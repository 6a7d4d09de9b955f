/* Client-level test of the runtime-API surface of libcuda.so.1: export
 * tables, cuGetProcAddress versions and flags, libraries and kernels,
 * cached attributes, occupancy, cuLaunchKernelEx and bad input.
 * Usage: rtest surface | integrity | badinput | clusters | driver | atexit */
#define _GNU_SOURCE
#include <cuda.h>
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

/* NVIDIA's cuda.h declares these; gpuctl's leaves out what CUDA deprecates. */
CUresult cuDeviceGetProperties(int *prop, CUdevice dev);
CUresult cuCtxGetSharedMemConfig(int *config);
CUresult cuCtxSetSharedMemConfig(int config);
CUresult cuFuncSetSharedMemConfig(CUfunction f, int config);

#define CHECK(call, want)                                                                                 \
	do {                                                                                              \
		CUresult r_ = (call);                                                                     \
		if (r_ != (want)) {                                                                       \
			fprintf(stderr, "FAIL %s:%d: %s = %d, want %d\n", __FILE__, __LINE__, #call, (int)r_, \
				(int)(want));                                                             \
			failures++;                                                                       \
		}                                                                                         \
	} while (0)
#define OK(call) CHECK(call, CUDA_SUCCESS)
#define EXPECT(cond)                                                                    \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                     \
		}                                                                       \
	} while (0)

/* twice(p, n): p[i] *= 2 for i < n. */
static const char *ptx =
	".version 7.0\n.target sm_52\n.address_size 64\n"
	".visible .entry twice(.param .u64 p, .param .u32 n)\n{\n"
	"  .reg .pred %p<2>;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<5>;\n"
	"  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r2, [n];\n"
	"  mov.u32 %r3, %ctaid.x;\n  mov.u32 %r4, %ntid.x;\n  mov.u32 %r5, %tid.x;\n"
	"  mad.lo.s32 %r1, %r3, %r4, %r5;\n  setp.ge.u32 %p1, %r1, %r2;\n  @%p1 bra DONE;\n"
	"  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.u32 %rd3, %r1, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
	"  ld.global.u32 %r6, [%rd4];\n  add.s32 %r7, %r6, %r6;\n  st.global.u32 [%rd4], %r7;\n"
	"DONE:\n  ret;\n}\n";

static CUuuid uuid(const char *hex)
{
	CUuuid u;
	for (int i = 0; i < 16; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		u.bytes[i] = (char)v;
	}
	return u;
}

static const void *table(const char *hex, CUresult want)
{
	const void *t = NULL;
	CUuuid u = uuid(hex);
	CHECK(cuGetExportTable(&t, &u), want);
	return t;
}

static CUcontext setup(void)
{
	CUdevice dev;
	CUcontext ctx = NULL;
	OK(cuInit(0));
	OK(cuDeviceGet(&dev, 0));
	OK(cuCtxCreate(&ctx, NULL, 0, dev));
	return ctx;
}

/* Context-local storage destructor calls, checked after cuCtxDestroy. */
static CUcontext dtor_ctx;
static void *dtor_key, *dtor_val;
static int dtor_calls;
static void cls_dtor(CUcontext c, void *key, void *val)
{
	dtor_ctx = c, dtor_key = key, dtor_val = val;
	dtor_calls++;
}

static size_t smem_for(int block) { return (size_t)block * 8; }

static void test_tables(void)
{
	static const struct {
		const char *uuid;
		uintptr_t size;
	} sized[] = {
		{ "f8cff95121468b4eb9e2fb469e7c0dd9", 0x18 }, { "6bd5fb6c5bf4e74a8987d93912fd9df9", 0x68 },
		{ "a094798c2e742e7493f20800200c0a66", 0x38 }, { "42d85a8123f6cb478298f6e78a3aecdc", 0x18 },
		{ "263e88607cd2614392f6bbd5006dfa7e", 0x78 }, { "d4082055bde6704b8d34ba123c66e1f2", 0x18 },
		{ "21318c60971432488ca641ff7324c8f2", 0x2e8 }, { "1734dc26800d47458726c0f1e7dd8bca", 0x88 },
	};
	for (size_t i = 0; i < sizeof sized / sizeof sized[0]; i++) {
		const uintptr_t *t = table(sized[i].uuid, CUDA_SUCCESS);
		EXPECT(t != NULL && t[0] == sized[i].size);
		/* The same address every time: cudart's copies compare them. */
		EXPECT(table(sized[i].uuid, CUDA_SUCCESS) == (const void *)t);
		for (uintptr_t s = 1; t != NULL && s < sized[i].size / 8; s++)
			EXPECT(t[s] != 0);
	}
	/* CONTEXT_LOCAL_STORAGE has no size word: three functions, then NULL. */
	void *const *cls = table("c693336e1121df11a8c368f355d89593", CUDA_SUCCESS);
	EXPECT(cls[0] != NULL && cls[1] != NULL && cls[2] != NULL && cls[3] == NULL);

	/* An unknown table: an error, and a stub table that answers errors. */
	const uintptr_t *unk = table("00112233445566778899aabbccddeeff", CUDA_ERROR_NOT_SUPPORTED);
	EXPECT(unk != NULL && unk[0] == 65 * 8);
	if (unk != NULL)
		CHECK(((CUresult(*)(void))unk[5])(), CUDA_ERROR_NOT_SUPPORTED);
	EXPECT(table("00112233445566778899aabbccddeeff", CUDA_ERROR_NOT_SUPPORTED) == (const void *)unk);
	CUuuid u = uuid("6bd5fb6c5bf4e74a8987d93912fd9df9");
	CHECK(cuGetExportTable(NULL, &u), CUDA_ERROR_INVALID_VALUE);
	/* A slot no one implements: an error, not a crash. */
	const uintptr_t *cudart = table("6bd5fb6c5bf4e74a8987d93912fd9df9", CUDA_SUCCESS);
	CHECK(((CUresult(*)(void))cudart[4])(), CUDA_ERROR_NOT_SUPPORTED);

	/* Tools hooks hand out zeroed buffers: no callback enabled. */
	const uintptr_t *hooks = table("a094798c2e742e7493f20800200c0a66", CUDA_SUCCESS);
	void *buf = NULL;
	size_t n = 0;
	((void (*)(void **, size_t *))hooks[2])(&buf, &n);
	EXPECT(buf != NULL && n == 1024 && ((uint32_t *)buf)[0] == 0);

	/* CUDART_INTERFACE slot 1 loads a module from an image. */
	CUcontext ctx = setup();
	CUmodule m = NULL;
	OK(((CUresult(*)(CUmodule *, const void *))cudart[1])(&m, ptx));
	CUfunction f;
	OK(cuModuleGetFunction(&f, m, "twice"));
	/* Slot 2: the primary context. */
	CUcontext pctx = NULL, pctx2 = NULL;
	OK(((CUresult(*)(CUcontext *, CUdevice))cudart[2])(&pctx, 0));
	OK(cuDevicePrimaryCtxRetain(&pctx2, 0));
	EXPECT(pctx != NULL && pctx == pctx2);

	/* Context-local storage: put, get, delete, and the destructor on
	 * context destruction. */
	CUresult (*put)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *)) = cls[0];
	CUresult (*del)(CUcontext, void *) = cls[1];
	CUresult (*get)(void **, CUcontext, void *) = cls[2];
	int key1, key2, val1, val2;
	void *v = NULL;
	OK(put(NULL, &key1, &val1, cls_dtor));
	OK(get(&v, ctx, &key1));
	EXPECT(v == &val1);
	CHECK(get(&v, ctx, &key2), CUDA_ERROR_INVALID_HANDLE);
	OK(del(ctx, &key1));
	CHECK(get(&v, ctx, &key1), CUDA_ERROR_INVALID_HANDLE);
	OK(put(ctx, &key2, &val2, cls_dtor));
	OK(cuCtxDestroy(ctx));
	EXPECT(dtor_calls == 1 && dtor_ctx == ctx && dtor_key == &key2 && dtor_val == &val2);
	/* And on the primary context's reset. */
	OK(put(pctx, &key1, &val1, cls_dtor));
	OK(cuDevicePrimaryCtxReset(0));
	EXPECT(dtor_calls == 2 && dtor_ctx == pctx && dtor_val == &val1);
	/* And on its last release, not before. */
	OK(cuDevicePrimaryCtxRetain(&pctx, 0));
	OK(cuDevicePrimaryCtxRetain(&pctx2, 0));
	OK(put(pctx, &key2, &val2, cls_dtor));
	OK(cuDevicePrimaryCtxRelease(0));
	EXPECT(dtor_calls == 2);
	OK(cuDevicePrimaryCtxRelease(0));
	EXPECT(dtor_calls == 3 && dtor_ctx == pctx && dtor_key == &key2 && dtor_val == &val2);

	/* CONTEXT_CHECKS: an ordinary context. */
	const uintptr_t *checks = table("263e88607cd2614392f6bbd5006dfa7e", CUDA_SUCCESS);
	uint32_t flags = 7;
	const void *extra = &flags;
	OK(((CUresult(*)(CUcontext, uint32_t *, const void **))checks[2])(NULL, &flags, &extra));
	/* extra is written only for a context of kind 1; NVIDIA's driver
	 * leaves the caller's value for an ordinary one. */
	EXPECT(flags == 0 && extra == &flags);
	CHECK(((CUresult(*)(CUcontext, uint32_t *, const void **))checks[2])(NULL, NULL, &extra), CUDA_ERROR_INVALID_VALUE);
}

/* What cuBLAS and cuBLASLt ask of the driver besides cudart's look-ups:
 * the thread's context through TOOLS_TLS, context and stream numbers
 * through their own table, the legacy context-stack names, freeing 0 and
 * profiler control. */
CUresult CUDAAPI cuProfilerStart(void); /* NVIDIA declares them in cudaProfiler.h */
CUresult CUDAAPI cuProfilerStop(void);
CUresult CUDAAPI cuStreamGetId_ptsz(CUstream hStream, unsigned long long *streamId); /* the per-thread form */

static void test_libraries(void)
{
	const uintptr_t *tls = table("42d85a8123f6cb478298f6e78a3aecdc", CUDA_SUCCESS);
	const uintptr_t *lt = table("21318c60971432488ca641ff7324c8f2", CUDA_SUCCESS);
	CUresult (*thread_ctx)(CUcontext *) = (void *)tls[2];
	CUresult (*ctx_number)(CUcontext, unsigned long long *) = (void *)lt[4];
	CUresult (*stream_obj)(CUcontext, CUstream, void **, int) = (void *)lt[51];
	CUresult (*stream_number)(CUcontext, const void *, unsigned long long *) = (void *)lt[39];

	CUcontext c = (CUcontext)1;
	OK(cuInit(0));
	while (cuCtxGetCurrent(&c) == CUDA_SUCCESS && c != NULL)
		OK(cuCtxPopCurrent(&c)); /* what earlier tests left current */
	CHECK(thread_ctx(&c), CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(c == NULL);
	CHECK(cuProfilerStart(), CUDA_ERROR_INVALID_CONTEXT);

	CUcontext ctx = setup(), ctx2;
	OK(thread_ctx(&c));
	EXPECT(c == ctx);
	unsigned long long n1 = 0, n2 = 0, id = 0;
	OK(ctx_number(c, &n1));
	OK(cuCtxGetId(ctx, &id));
	EXPECT(n1 != 0 && n1 == id);
	CHECK(ctx_number(c, NULL), CUDA_ERROR_INVALID_VALUE);
	CUdevice dev;
	OK(cuCtxGetDevice(&dev));
	OK(cuCtxCreate(&ctx2, NULL, 0, dev));
	OK(ctx_number(ctx2, &n2));
	EXPECT(n2 != n1);

	/* Streams: the NULL stream is the legacy or per-thread default one,
	 * a created stream is its own object, and each has its own number. */
	CUstream s;
	void *o0 = NULL, *opt = NULL, *os = NULL;
	OK(cuStreamCreate(&s, 0));
	OK(stream_obj(ctx2, NULL, &o0, 0));
	OK(stream_obj(ctx2, NULL, &opt, 1));
	OK(stream_obj(ctx2, s, &os, 0));
	EXPECT(o0 == (void *)CU_STREAM_LEGACY && opt == (void *)CU_STREAM_PER_THREAD && os == (void *)s);
	CHECK(stream_obj(ctx2, s, NULL, 0), CUDA_ERROR_INVALID_VALUE);
	unsigned long long sn0 = 0, sns = 0;
	OK(stream_number(ctx2, o0, &sn0));
	OK(stream_number(ctx2, os, &sns));
	EXPECT(sn0 != sns);
	CHECK(stream_number(ctx2, NULL, &sns), CUDA_ERROR_INVALID_VALUE);
	/* The numbers are cuStreamGetId's, from the server: the NULL stream
	 * is the legacy one (the per-thread one for the _ptsz form), and
	 * each stream keeps its number. */
	unsigned long long gid = 0, gpt = 0, gs = 0, snpt = 0;
	OK(cuStreamGetId(NULL, &gid));
	EXPECT(gid == sn0);
	OK(cuStreamGetId(CU_STREAM_LEGACY, &gid));
	EXPECT(gid == sn0);
	OK(cuStreamGetId_ptsz(NULL, &gpt));
	OK(stream_number(ctx2, opt, &snpt));
	EXPECT(gpt == snpt && gpt != sn0);
	OK(cuStreamGetId(s, &gs));
	EXPECT(gs == sns);
	OK(stream_number(ctx2, os, &gs));
	EXPECT(gs == sns);
	CHECK(cuStreamGetId(s, NULL), CUDA_ERROR_INVALID_VALUE);
	OK(cuStreamDestroy(s));
	CHECK(cuStreamGetId(s, &gs), CUDA_ERROR_INVALID_HANDLE);

	/* cuBLASLt's topology table: the TPC layout (slot 4) in two malloc'd
	 * buffers that slot 13 frees, consistent with the multiprocessor
	 * count; slot 8 is the cluster-launch attribute, slot 14 a constant. */
	const uintptr_t *topo = table("1734dc26800d47458726c0f1e7dd8bca", CUDA_SUCCESS);
	CUresult (*tpc_layout)(void **, void **) = (void *)topo[4];
	CUresult (*tpc_release)(void *, void *) = (void *)topo[13];
	CUresult (*cluster_launch)(CUdevice, int *) = (void *)topo[8];
	CUresult (*one)(int *) = (void *)topo[14];
	unsigned char *gpc = NULL, *local = NULL;
	OK(tpc_layout((void **)&gpc, (void **)&local));
	int sms = 0, tpcs, seen[256] = { 0 };
	OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
	tpcs = (sms + 1) / 2;
	EXPECT(gpc != NULL && local != NULL && malloc_usable_size(gpc) >= (size_t)tpcs);
	/* Every (GPC, index in GPC) pair names one TPC. */
	for (int i = 0; gpc != NULL && local != NULL && i < tpcs; i++) {
		EXPECT(local[i] < 16 && gpc[i] < 16 && !seen[gpc[i] * 16 + local[i]]);
		seen[gpc[i] * 16 + local[i]] = 1;
	}
	OK(tpc_release(gpc, local));
	CHECK(tpc_layout(NULL, (void **)&local), CUDA_ERROR_INVALID_VALUE);
	int cl = -1, cl2 = -1, k = 0;
	OK(cluster_launch(dev, &cl));
	OK(cuDeviceGetAttribute(&cl2, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev));
	EXPECT(cl == cl2);
	OK(one(&k));
	EXPECT(k == 1);

	/* The pre-4.0 names cuBLAS resolves with dlsym. */
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	CUresult (*push)(CUcontext) = dlsym(h, "cuCtxPushCurrent");
	CUresult (*pop)(CUcontext *) = dlsym(h, "cuCtxPopCurrent");
	EXPECT(push != NULL && pop != NULL);
	if (push != NULL && pop != NULL) {
		OK(push(ctx));
		OK(pop(&c));
		EXPECT(c == ctx);
	}
	/* cudaFree(0), which cuBLAS calls to create the context. */
	OK(cuMemFree(0));
	/* No profiler attaches; the calls succeed and do nothing. */
	OK(cuProfilerStart());
	OK(cuProfilerStop());
	OK(cuCtxDestroy(ctx2));
	OK(cuCtxDestroy(ctx));
}

/* bounded() allows at most 64 threads per block (.maxntid). */
static const char *bounded_ptx = ".version 7.0\n.target sm_52\n.address_size 64\n"
				 ".visible .entry bounded() .maxntid 64, 1, 1\n{\n  ret;\n}\n";

/* Launch configurations NVIDIA's driver refuses are refused by the launch
 * call itself, with its error, and never reach the server. */
static void test_launch_checks(void)
{
	CUcontext ctx = setup();
	CUmodule m, mb;
	CUfunction f, fb;
	OK(cuModuleLoadData(&m, ptx));
	OK(cuModuleGetFunction(&f, m, "twice"));
	OK(cuModuleLoadData(&mb, bounded_ptx));
	OK(cuModuleGetFunction(&fb, mb, "bounded"));
	CUdeviceptr d;
	OK(cuMemAlloc(&d, 4096 * 4));
	unsigned int n = 4096;
	void *args[] = { &d, &n };
	int maxdyn = 0;
	OK(cuFuncGetAttribute(&maxdyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	static const struct {
		const char *name;
		unsigned g[3], b[3], shared;
		CUresult want;
	} cases[] = {
		{ "4096 threads per block", { 1, 1, 1 }, { 4096, 1, 1 }, 0, CUDA_ERROR_INVALID_VALUE },
		{ "33 x 32 threads", { 1, 1, 1 }, { 32, 33, 1 }, 0, CUDA_ERROR_INVALID_VALUE },
		{ "block z 65", { 1, 1, 1 }, { 1, 1, 65 }, 0, CUDA_ERROR_INVALID_VALUE },
		{ "block x 0", { 1, 1, 1 }, { 0, 1, 1 }, 0, CUDA_ERROR_INVALID_VALUE },
		{ "grid z 0", { 1, 1, 0 }, { 1, 1, 1 }, 0, CUDA_ERROR_INVALID_VALUE },
		{ "grid y 65536", { 1, 65536, 1 }, { 1, 1, 1 }, 0, CUDA_ERROR_INVALID_VALUE },
		{ "grid x 2^31", { 1u << 31, 1, 1 }, { 1, 1, 1 }, 0, CUDA_ERROR_INVALID_VALUE },
		{ "the largest block", { 4, 1, 1 }, { 1024, 1, 1 }, 0, CUDA_SUCCESS },
		{ "dynamic shared memory at the limit", { 1, 1, 1 }, { 32, 1, 1 }, 0xffffffffu, CUDA_SUCCESS },
		{ "dynamic shared memory past the limit", { 1, 1, 1 }, { 32, 1, 1 }, 0xfffffffeu, CUDA_ERROR_INVALID_VALUE },
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		/* 0xffffffff: the function's limit; 0xfffffffe: one byte more. */
		unsigned shared = cases[i].shared == 0xffffffffu ? (unsigned)maxdyn :
				  cases[i].shared == 0xfffffffeu ? (unsigned)maxdyn + 1 : cases[i].shared;
		CUresult r = cuLaunchKernel(f, cases[i].g[0], cases[i].g[1], cases[i].g[2], cases[i].b[0], cases[i].b[1],
					    cases[i].b[2], shared, NULL, args, NULL);
		if (r != cases[i].want) {
			fprintf(stderr, "FAIL launch with %s: %d, want %d\n", cases[i].name, (int)r, (int)cases[i].want);
			failures++;
		}
	}
	/* Raising the function's limit raises what a launch may ask for. */
	OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, maxdyn + 4096));
	OK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, (unsigned)maxdyn + 4096, NULL, args, NULL));
	CHECK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, (unsigned)maxdyn + 4097, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	/* More threads than the kernel allows: "too many resources". */
	OK(cuLaunchKernel(fb, 1, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
	CHECK(cuLaunchKernel(fb, 1, 1, 1, 65, 1, 1, 0, NULL, NULL, NULL), CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES);
	/* cuLaunchKernelEx and a CUkernel are checked alike. */
	CUlaunchConfig cfg = { 1, 1, 1, 2048, 1, 1, 0, NULL, NULL, 0 };
	CHECK(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_INVALID_VALUE);
	CUlibrary lib;
	CUkernel k;
	OK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
	OK(cuLibraryGetKernel(&k, lib, "twice"));
	CHECK(cuLaunchKernel((CUfunction)(void *)k, 1, 1, 1, 1, 1, 65, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
	/* Clusters and cooperative launches: the emulated device supports
	 * neither (its CLUSTER_LAUNCH and COOPERATIVE_LAUNCH attributes are
	 * 0), so the client refuses them; a 1x1x1 cluster is a plain launch. */
	int clusters = -1, coop = -1;
	OK(cuDeviceGetAttribute(&clusters, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0));
	OK(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0));
	EXPECT(clusters == 0 && coop == 0);
	CUlaunchAttribute at;
	memset(&at, 0, sizeof at);
	at.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	at.value.clusterDim.x = 1, at.value.clusterDim.y = 1, at.value.clusterDim.z = 1;
	CUlaunchConfig ccfg = { 4, 1, 1, 32, 1, 1, 0, NULL, &at, 1 };
	OK(cuLaunchKernelEx(&ccfg, f, args, NULL));
	at.value.clusterDim.x = 2;
	CHECK(cuLaunchKernelEx(&ccfg, f, args, NULL), CUDA_ERROR_NOT_SUPPORTED);
	at.value.clusterDim.x = 0;
	CHECK(cuLaunchKernelEx(&ccfg, f, args, NULL), CUDA_ERROR_INVALID_CLUSTER_SIZE);
	memset(&at, 0, sizeof at);
	at.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
	at.value.cooperative = 1;
	CHECK(cuLaunchKernelEx(&ccfg, f, args, NULL), CUDA_ERROR_NOT_SUPPORTED);
	CHECK(cuLaunchCooperativeKernel(f, 4, 1, 1, 32, 1, 1, 0, NULL, args), CUDA_ERROR_NOT_SUPPORTED);
	CHECK(cuLaunchCooperativeKernel(f, 4, 1, 1, 4096, 1, 1, 0, NULL, args), CUDA_ERROR_INVALID_VALUE);
	/* None of the refused launches reached the server: nothing is
	 * reported later. */
	OK(cuCtxSynchronize());
	OK(cuLibraryUnload(lib));
	OK(cuCtxDestroy(ctx));
}

/* Clusters and cooperative launches on a device that supports them (the
 * test server's Clusters option claims so and reports every such launch
 * it receives, which the Go test compares): they travel as LaunchEx,
 * directly and from a captured graph, and run. */
static void test_clusters(void)
{
	enum { N = 256 };
	CUcontext ctx = setup();
	CUmodule m;
	CUfunction f;
	OK(cuModuleLoadData(&m, ptx));
	OK(cuModuleGetFunction(&f, m, "twice"));
	int clusters = 0, coop = 0;
	OK(cuDeviceGetAttribute(&clusters, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0));
	OK(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0));
	EXPECT(clusters == 1 && coop == 1);
	uint32_t host[N];
	for (uint32_t i = 0; i < N; i++)
		host[i] = i;
	CUdeviceptr d;
	OK(cuMemAlloc(&d, sizeof host));
	OK(cuMemcpyHtoD(d, host, sizeof host));
	unsigned int n = N;
	void *args[] = { &d, &n };

	CUlaunchAttribute at;
	memset(&at, 0, sizeof at);
	at.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	at.value.clusterDim.x = 2, at.value.clusterDim.y = 1, at.value.clusterDim.z = 1;
	CUlaunchConfig cfg = { 4, 1, 1, 64, 1, 1, 0, NULL, &at, 1 };
	OK(cuLaunchKernelEx(&cfg, f, args, NULL)); /* x2 */
	cfg.gridDimX = 3;			   /* not whole clusters: never sent */
	CHECK(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_INVALID_CLUSTER_SIZE);
	cfg.gridDimX = 4;
	OK(cuLaunchCooperativeKernel(f, 4, 1, 1, 64, 1, 1, 0, NULL, args)); /* x4 */

	/* Captured, the launch keeps its cluster shape, and each launch of
	 * the graph sends it again. */
	CUstream s;
	CUgraph g;
	CUgraphExec x;
	OK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	cfg.hStream = s;
	at.value.clusterDim.x = 4;
	OK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	OK(cuLaunchKernelEx(&cfg, f, args, NULL));
	OK(cuStreamEndCapture(s, &g));
	OK(cuGraphInstantiate(&x, g, 0));
	OK(cuGraphLaunch(x, s));
	OK(cuGraphLaunch(x, s)); /* x16 */
	OK(cuStreamSynchronize(s));
	OK(cuMemcpyDtoH(host, d, sizeof host));
	int bad = 0;
	for (uint32_t i = 0; i < N; i++)
		bad += host[i] != i * 16;
	EXPECT(bad == 0);
	OK(cuGraphExecDestroy(x));
	OK(cuGraphDestroy(g));
	OK(cuStreamDestroy(s));
	OK(cuMemFree(d));
	OK(cuCtxDestroy(ctx));
}

static void test_procaddr(void)
{
	void *fn = NULL, *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	CUdriverProcAddressQueryResult st;
	EXPECT(h != NULL);
	OK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &st));
	EXPECT(fn == dlsym(h, "cuLaunchKernel") && st == CU_GET_PROC_ADDRESS_SUCCESS);
	OK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	EXPECT(fn == dlsym(h, "cuLaunchKernel_ptsz"));
	OK(cuGetProcAddress_v2("cuMemcpyHtoD", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	EXPECT(fn == dlsym(h, "cuMemcpyHtoD_v2_ptds"));
	/* A call that takes no stream has one form for both flags. */
	OK(cuGetProcAddress_v2("cuMemAlloc", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
	EXPECT(fn == dlsym(h, "cuMemAlloc_v2"));
	OK(cuGetProcAddress_v2("cuCtxGetDevice", &fn, 13000, 0, &st));
	EXPECT(fn == dlsym(h, "cuCtxGetDevice_v2"));
	OK(cuGetProcAddress_v2("cuCtxGetDevice", &fn, 12080, 0, &st));
	EXPECT(fn == dlsym(h, "cuCtxGetDevice"));
	/* The v2 ABI answers a failed look-up in its status and succeeds
	 * with NULL, as NVIDIA's driver does; the v1 ABI fails. */
	fn = &st;
	OK(cuGetProcAddress_v2("cuLibraryLoadData", &fn, 11080, 0, &st));
	EXPECT(fn == NULL && st == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
	fn = &st;
	OK(cuGetProcAddress_v2("cuNoSuchCall", &fn, 13000, 0, &st));
	EXPECT(fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	fn = &st;
	OK(cuGetProcAddress_v2("", &fn, 0, 0, &st));
	EXPECT(fn == NULL && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
	OK(cuGetProcAddress_v2("cuNoSuchCall", &fn, 13000, 0, NULL));
	CHECK(cuGetProcAddress_v2("cuLaunchKernel", &fn, 12000, 4, &st), CUDA_ERROR_INVALID_VALUE);
	/* The CUDA 5.0 linker names, asked for at 5.5, and the _v2 ones from
	 * 6.5. */
	OK(cuGetProcAddress_v2("cuLinkCreate", &fn, 5050, 0, &st));
	EXPECT(fn != NULL && fn == dlsym(h, "cuLinkCreate"));
	OK(cuGetProcAddress_v2("cuLinkAddData", &fn, 5050, 0, &st));
	EXPECT(fn != NULL && fn == dlsym(h, "cuLinkAddData"));
	OK(cuGetProcAddress_v2("cuLinkAddFile", &fn, 5050, 0, &st));
	EXPECT(fn != NULL && fn == dlsym(h, "cuLinkAddFile"));
	OK(cuGetProcAddress_v2("cuLinkCreate", &fn, 13000, 0, &st));
	EXPECT(fn == dlsym(h, "cuLinkCreate_v2"));
	/* The v1 ABI: no status argument. */
	CUresult (*v1)(const char *, void **, int, cuuint64_t) = dlsym(h, "cuGetProcAddress");
	OK(v1("cuEventRecord", &fn, 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM));
	EXPECT(fn == dlsym(h, "cuEventRecord_ptsz"));
	CHECK(v1("cuNoSuchCall", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
	CHECK(v1("", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
	/* A name gpuctl does not serve resolves to a stub that says so. */
	OK(cuGetProcAddress_v2("cuGraphAddChildGraphNode", &fn, 12000, 0, &st));
	EXPECT(fn != NULL && dlsym(h, "cuGraphAddChildGraphNode") == NULL);
	if (fn != NULL)
		CHECK(((CUresult(*)(void))fn)(), CUDA_ERROR_NOT_SUPPORTED);
}

/* kernel_attr_thread asks a kernel attribute from a thread of its own. */
struct kernel_attr {
	CUkernel k;
	CUfunction_attribute attr;
	int v;
	CUresult r;
};
static void *kernel_attr_thread(void *p)
{
	struct kernel_attr *a = p;
	a->r = cuKernelGetAttribute(&a->v, a->attr, a->k, 0);
	return NULL;
}

static void test_library(void)
{
	CUcontext ctx = setup();
	CUlibrary lib;
	CUkernel k;
	OK(cuLibraryLoadData(&lib, ptx, NULL, NULL, 0, NULL, NULL, 0));
	OK(cuLibraryGetKernel(&k, lib, "twice"));
	const char *name = NULL;
	OK(cuKernelGetName(&name, k));
	EXPECT(name != NULL && strcmp(name, "twice") == 0);
	enum { N = 1000 };
	unsigned int h[N];
	for (int i = 0; i < N; i++)
		h[i] = (unsigned)i;
	CUdeviceptr d;
	OK(cuMemAlloc(&d, sizeof h));
	OK(cuMemcpyHtoD(d, h, sizeof h));
	unsigned int n = N;
	void *args[] = { &d, &n };
	/* A CUkernel passed where a CUfunction goes. */
	OK(cuLaunchKernel((CUfunction)(void *)k, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
	CUfunction f;
	OK(cuKernelGetFunction(&f, k));
	CUlaunchAttribute attrs[2];
	memset(attrs, 0, sizeof attrs);
	attrs[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
	attrs[0].value.priority = -1;
	CUlaunchConfig cfg = { (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, attrs, 1 };
	OK(cuLaunchKernelEx(&cfg, f, args, NULL));
	OK(cuMemcpyDtoH(h, d, sizeof h));
	for (int i = 0; i < N; i++)
		EXPECT(h[i] == 4u * (unsigned)i);
	attrs[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	attrs[1].value.clusterDim.x = 2, attrs[1].value.clusterDim.y = 1, attrs[1].value.clusterDim.z = 1;
	cfg.numAttrs = 2;
	CHECK(cuLaunchKernelEx(&cfg, f, args, NULL), CUDA_ERROR_NOT_SUPPORTED);

	/* Attributes, for the kernel and its function alike. */
	int maxt = 0, maxt2 = 0, regs = -1;
	OK(cuKernelGetAttribute(&maxt, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k, 0));
	OK(cuFuncGetAttribute(&maxt2, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f));
	OK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, (CUfunction)(void *)k));
	EXPECT(maxt > 0 && maxt == maxt2 && regs >= 0);
	OK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096, k, 0));
	int dyn = 0;
	OK(cuFuncGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	EXPECT(dyn == 4096);
	CHECK(cuKernelGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_NUM_REGS, k, 7), CUDA_ERROR_INVALID_DEVICE);
	/* A thread with no current context asks through the device's primary
	 * context, which the process holds. */
	CUcontext prim;
	OK(cuDevicePrimaryCtxRetain(&prim, 0));
	struct kernel_attr ka = { k, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 0, CUDA_ERROR_UNKNOWN };
	pthread_t th;
	EXPECT(pthread_create(&th, NULL, kernel_attr_thread, &ka) == 0 && pthread_join(th, NULL) == 0);
	EXPECT(ka.r == CUDA_SUCCESS && ka.v == maxt);
	OK(cuDevicePrimaryCtxRelease(0));

	/* Occupancy, computed in the client. */
	int blocks = 0, minGrid = 0, block = 0, sms = 0, tpsm = 0;
	OK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
	OK(cuDeviceGetAttribute(&tpsm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 0));
	OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, 128, 0));
	EXPECT(blocks >= 1 && blocks * 128 <= tpsm);
	OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f, maxt + 32, 0));
	EXPECT(blocks == 0);
	OK(cuOccupancyMaxPotentialBlockSize(&minGrid, &block, f, NULL, 0, 0));
	EXPECT(block > 0 && block <= maxt && block % 32 == 0 && minGrid > 0 && minGrid % sms == 0);
	OK(cuOccupancyMaxPotentialBlockSize(&minGrid, &block, f, smem_for, 0, 96));
	EXPECT(block > 0 && block <= 96);
	size_t avail = 0;
	OK(cuOccupancyAvailableDynamicSMemPerBlock(&avail, f, 1, 128));
	EXPECT(avail > 0);
	/* Clusters: the emulated device leaves them to the client's own
	 * calculator. A launch names its cluster shape or the kernel was
	 * given one; past 8 blocks needs the kernel's permission. */
	int clusters = 0, csize = 0, per_sm = 0;
	OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, 256, 0));
	cfg.attrs = &attrs[1];
	cfg.numAttrs = 0;
	CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &cfg), CUDA_ERROR_INVALID_CLUSTER_SIZE);
	OK(cuOccupancyMaxPotentialClusterSize(&csize, f, &cfg));
	EXPECT(csize == 8);
	cfg.numAttrs = 1; /* 2x1x1 */
	OK(cuOccupancyMaxActiveClusters(&clusters, f, &cfg));
	EXPECT(per_sm > 0 && clusters == per_sm * sms / 2);
	attrs[1].value.clusterDim.x = 9;
	CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &cfg), CUDA_ERROR_INVALID_CLUSTER_SIZE);
	OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
	OK(cuOccupancyMaxActiveClusters(&clusters, f, &cfg));
	EXPECT(clusters == per_sm * sms / 9);
	cfg.numAttrs = 0;
	OK(cuOccupancyMaxPotentialClusterSize(&csize, f, &cfg));
	EXPECT(csize == 16);
	OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, 4));
	OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, 1));
	OK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, 1));
	OK(cuOccupancyMaxActiveClusters(&clusters, f, &cfg));
	EXPECT(clusters == per_sm * sms / 4);
	OK(cuOccupancyMaxPotentialClusterSize(&csize, f, &cfg));
	EXPECT(csize == 4);
	cfg.numAttrs = 1; /* 9x1x1 is not the kernel's shape */
	CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &cfg), CUDA_ERROR_INVALID_CLUSTER_SIZE);
	attrs[1].value.clusterDim.y = 0;
	CHECK(cuOccupancyMaxActiveClusters(&clusters, f, &cfg), CUDA_ERROR_INVALID_CLUSTER_SIZE);
	CHECK(cuOccupancyMaxActiveClusters(NULL, f, &cfg), CUDA_ERROR_INVALID_VALUE);
	/* The legacy calls libraries may still make. */
	OK(cuFuncSetSharedMemConfig(f, 1));
	CHECK(cuFuncSetSharedMemConfig(f, 3), CUDA_ERROR_INVALID_VALUE);

	CUmodule m;
	OK(cuLibraryGetModule(&m, lib));
	CUmodule fm;
	OK(cuFuncGetModule(&fm, f));
	EXPECT(fm == m);
	OK(cuFuncGetName(&name, f));
	EXPECT(strcmp(name, "twice") == 0);
	OK(cuLibraryUnload(lib));
	/* The kernel's library is gone: an error, not a crash. */
	CUcontext c2;
	OK(cuCtxCreate(&c2, NULL, 0, 0));
	CHECK(cuKernelGetFunction(&f, k), CUDA_ERROR_INVALID_HANDLE);
	OK(cuCtxDestroy(c2));

	/* Limits are the server's device's (here the emulated one's), and
	 * CUDA 12.5's shared memory limit, which cuBLAS reads, among them. */
	size_t stack = 0, smem = 0, cig = 1;
	int sm_smem = 0;
	OK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
	EXPECT(stack == 1024);
	OK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 4096));
	OK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
	EXPECT(stack == 4096);
	OK(cuDeviceGetAttribute(&sm_smem, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 0));
	OK(cuCtxGetLimit(&smem, CU_LIMIT_SHMEM_SIZE));
	EXPECT(smem > 0 && smem == (size_t)sm_smem);
	OK(cuCtxGetLimit(&cig, CU_LIMIT_CIG_ENABLED));
	EXPECT(cig == 0);
	CHECK(cuCtxSetLimit(CU_LIMIT_SHMEM_SIZE, 1024), CUDA_ERROR_INVALID_VALUE);
	CHECK(cuCtxGetLimit(&smem, CU_LIMIT_MAX), CUDA_ERROR_UNSUPPORTED_LIMIT);
	CHECK(cuCtxGetLimit(NULL, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE);
	/* Legacy device and context queries, answered in the client. */
	int props[14], sconf = -1;
	OK(cuDeviceGetProperties(props, 0));
	for (int i = 0; i < 14; i++) {
		int v = -1;
		OK(cuDeviceGetAttribute(&v, (CUdevice_attribute)(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK + i), 0));
		EXPECT(props[i] == v);
	}
	CHECK(cuDeviceGetProperties(NULL, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cuCtxGetSharedMemConfig(&sconf));
	EXPECT(sconf == 1); /* four-byte banks */
	OK(cuCtxSetSharedMemConfig(2));
	CHECK(cuCtxSetSharedMemConfig(3), CUDA_ERROR_INVALID_VALUE);
	unsigned int flags = 99;
	OK(cuCtxGetFlags(&flags));
	EXPECT(flags == 0);
	unsigned long long id1 = 0, id2 = 0;
	OK(cuCtxGetId(NULL, &id1));
	OK(cuCtxGetId(ctx, &id2));
	EXPECT(id1 != 0 && id1 == id2);
	CUdevice dev = -1;
	OK(cuCtxGetDevice_v2(&dev, ctx));
	EXPECT(dev == 0);
	OK(cuCtxSynchronize_v2(NULL));
	/* Pointers. */
	CUmemorytype type = 0;
	CUcontext pc = NULL;
	CUpointer_attribute pa[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT };
	void *pd[] = { &type, &pc };
	OK(cuPointerGetAttributes(2, pa, pd, d));
	EXPECT(type == CU_MEMORYTYPE_DEVICE && pc == ctx);
	void *host;
	CUdeviceptr mapped = 0;
	OK(cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
	OK(cuMemHostGetDevicePointer(&mapped, host, 0));
	EXPECT(mapped == (CUdeviceptr)(uintptr_t)host);
	int stackvar;
	CHECK(cuMemHostGetDevicePointer(&mapped, &stackvar, 0), CUDA_ERROR_INVALID_VALUE);
	OK(cuMemFreeHost(host));
	OK(cuMemFree(d));
	OK(cuCtxDestroy(ctx));
}

/* integrity prints INTEGRITY_CHECK's inputs and its answer, for the Go
 * test to recompute the keyed hash independently. */
static void test_integrity(void)
{
	setup();
	const uintptr_t *it = table("d4082055bde6704b8d34ba123c66e1f2", CUDA_SUCCESS);
	const void *cudart = table("6bd5fb6c5bf4e74a8987d93912fd9df9", CUDA_SUCCESS);
	CUresult (*check)(uint32_t, uint64_t, uint64_t *) = (void *)it[1];
	uint64_t out[2] = { 0 }, again[2] = { 0 };
	OK(check(12044, 0x682b9cee, out));
	OK(check(12044, 0x682b9cee, again));
	EXPECT(out[0] == again[0] && out[1] == again[1]);
	OK(check(12030, 0x682b9cee, again)); /* versions ending in 0 are constant */
	EXPECT(again[0] == 0x3341181c03cb675cull && again[1] == 0x8ed383aa1f4cd1e8ull);
	int drv = 0, n = 0;
	OK(cuDriverGetVersion(&drv));
	OK(cuDeviceGetCount(&n));
	printf("inputs %d %u %u %llx %llx %llx %d\n", drv, (unsigned)getpid(), (unsigned)(uintptr_t)pthread_self(),
	       (unsigned long long)(uintptr_t)cudart, (unsigned long long)(uintptr_t)it, (unsigned long long)it[1], n);
	for (int d = 0; d < n; d++) {
		CUuuid u;
		int dom, bus, dv;
		OK(cuDeviceGetUuid(&u, d));
		OK(cuDeviceGetAttribute(&dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d));
		OK(cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d));
		OK(cuDeviceGetAttribute(&dv, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d));
		printf("device ");
		for (int i = 0; i < 16; i++)
			printf("%02x", (unsigned char)u.bytes[i]);
		printf(" %d %d %d\n", dom, bus, dv);
	}
	printf("hash %016llx %016llx\n", (unsigned long long)out[0], (unsigned long long)out[1]);
}

/* Images the interposer cannot make sense of fail with a CUDA error. */
static void test_badinput(void)
{
	CUcontext ctx = setup();
	CUmodule m;
	CUlibrary lib;
	/* nvcc's fatbin wrapper around a fatbin with a broken header. */
	static uint8_t inner[64];
	memset(inner, 0xab, sizeof inner - 1); /* NUL-terminated: read as text */
	struct {
		uint32_t magic, version;
		const void *data;
		void *unused;
	} wrapper = { 0x466243b1u, 1, inner, NULL };
	EXPECT(cuModuleLoadData(&m, &wrapper) != CUDA_SUCCESS);
	EXPECT(cuLibraryLoadData(&lib, &wrapper, NULL, NULL, 0, NULL, NULL, 0) == CUDA_SUCCESS);
	CUkernel k;
	OK(cuLibraryGetKernel(&k, lib, "twice"));
	CUfunction f;
	EXPECT(cuKernelGetFunction(&f, k) != CUDA_SUCCESS); /* loaded lazily: fails here */
	/* A fatbin whose header claims more than the process holds. */
	static uint8_t fb[16] = { 0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0 };
	CHECK(cuModuleLoadData(&m, fb), CUDA_ERROR_INVALID_IMAGE);
	wrapper.data = NULL;
	CHECK(cuModuleLoadData(&m, &wrapper), CUDA_ERROR_INVALID_IMAGE);
	OK(cuCtxDestroy(ctx));
}

/* driver runs against a server standing in for a driver newer than the
 * emulator (runtime_test.go's newerDriver): one function per kernel however
 * often it is looked up, a function attribute past CUDA 12's, and cluster
 * occupancy answered by the driver, which the client keeps per function,
 * shape and question until an attribute of the function is set. */
static void test_driver(void)
{
	CUcontext ctx = setup();
	CUmodule m;
	CUfunction f1, f2;
	OK(cuModuleLoadData(&m, ptx));
	OK(cuModuleGetFunction(&f1, m, "twice"));
	OK(cuModuleGetFunction(&f2, m, "twice"));
	EXPECT(f1 == f2);
	int v = 0;
	OK(cuFuncGetAttribute(&v, (CUfunction_attribute)16, f1));
	EXPECT(v == 1);
	CHECK(cuFuncGetAttribute(&v, (CUfunction_attribute)40, f1), CUDA_ERROR_INVALID_VALUE);

	CUlaunchAttribute a;
	memset(&a, 0, sizeof a);
	a.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
	a.value.clusterDim.x = 2, a.value.clusterDim.y = 1, a.value.clusterDim.z = 1;
	CUlaunchConfig cfg = { 2, 1, 1, 128, 1, 1, 0, NULL, &a, 1 };
	int n1 = 0, n2 = 0, dyn = 0;
	OK(cuFuncGetAttribute(&dyn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f1));
	OK(cuOccupancyMaxActiveClusters(&n1, f1, &cfg)); /* the driver's answer */
	EXPECT(n1 == 500 + dyn / 1024);
	OK(cuOccupancyMaxActiveClusters(&n2, f2, &cfg)); /* kept */
	EXPECT(n2 == n1);
	OK(cuFuncSetAttribute(f2, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 64 << 10));
	OK(cuOccupancyMaxActiveClusters(&n2, f1, &cfg)); /* asked again */
	EXPECT(n2 == 500 + 64);
	int blocks = 0;
	OK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, f1, 128, 64 << 10));
	EXPECT(blocks >= 1);
	cfg.numAttrs = 0;
	CHECK(cuOccupancyMaxActiveClusters(&n2, f1, &cfg), CUDA_ERROR_INVALID_CLUSTER_SIZE);
	CHECK(cuOccupancyMaxActiveClusters(&n2, f1, &cfg), CUDA_ERROR_INVALID_CLUSTER_SIZE); /* kept too */
	OK(cuOccupancyMaxPotentialClusterSize(&n2, f1, &cfg));
	EXPECT(n2 == 12);

	size_t smem = 0, again = 0;
	OK(cuCtxGetLimit(&smem, CU_LIMIT_SHMEM_SIZE));
	OK(cuCtxGetLimit(&again, CU_LIMIT_SHMEM_SIZE)); /* kept */
	EXPECT(smem > 0 && again == smem);
	OK(cuCtxDestroy(ctx));
}

/* The static runtime's exit handler, registered by its constructors
 * before cuInit, deletes its context-local storage entry after the
 * driver has deinitialised: NVIDIA's driver answers
 * CUDA_ERROR_DEINITIALIZED (4) there. The handler prints what this
 * library answers, before exit and at exit. */
static void *cls_del;
static int cls_key, cls_val;
static void atexit_delete(void)
{
	CUresult (*del)(CUcontext, void *) = cls_del;
	printf("cls delete at exit: %d\n", (int)del(NULL, &cls_key));
}

static void test_atexit(void)
{
	atexit(atexit_delete);
	void *const *cls = table("c693336e1121df11a8c368f355d89593", CUDA_SUCCESS);
	setup();
	CUresult (*put)(CUcontext, void *, void *, void (*)(CUcontext, void *, void *)) = cls[0];
	CUresult (*del)(CUcontext, void *) = cls[1];
	OK(put(NULL, &cls_key, &cls_val, NULL));
	OK(del(NULL, &cls_key));
	OK(put(NULL, &cls_key, &cls_val, NULL));
	cls_del = cls[1];
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "surface";
	if (strcmp(mode, "surface") == 0) {
		test_tables();
		test_procaddr();
		test_library();
		test_libraries();
		test_launch_checks();
	} else if (strcmp(mode, "integrity") == 0) {
		test_integrity();
	} else if (strcmp(mode, "badinput") == 0) {
		test_badinput();
	} else if (strcmp(mode, "clusters") == 0) {
		test_clusters();
	} else if (strcmp(mode, "driver") == 0) {
		test_driver();
	} else if (strcmp(mode, "atexit") == 0) {
		test_atexit();
	} else {
		fprintf(stderr, "usage: rtest surface | integrity | badinput | clusters | driver | atexit\n");
		return 2;
	}
	if (failures > 0) {
		fprintf(stderr, "%d failures\n", failures);
		return 1;
	}
	printf("PASS %s\n", mode);
	return 0;
}
