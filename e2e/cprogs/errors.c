/*
 * errors: the driver's error paths, each checked for the exact CUresult
 * NVIDIA's driver returns:
 *   notfound  an unknown kernel or global name: CUDA_ERROR_NOT_FOUND;
 *   oom       a 1 PiB cuMemAlloc: CUDA_ERROR_OUT_OF_MEMORY, and the context
 *             still works afterwards;
 *   handle    cuEventElapsedTime on events that were never recorded, or that
 *             were created without timing: CUDA_ERROR_INVALID_HANDLE;
 *   oob       a kernel that stores 4 TiB past its buffer:
 *             CUDA_ERROR_ILLEGAL_ADDRESS at the next synchronisation, and
 *             again at the one after (the error is sticky).
 *
 *   errors [notfound|oom|handle|oob|all]     (default all; oob runs last)
 *
 * It prints "errors: NAME ok" per test and exits 0 when all pass.
 */
#include "common.h"

static void expect(CUresult got, CUresult want, const char *what)
{
    if (got != want)
        fail("%s returned %s (%d), want %s (%d)", what, cu_name(got), (int)got, cu_name(want), (int)want);
}

static void test_notfound(void)
{
    CUmodule mod = load_module("basic");
    CUfunction f;
    expect(cuModuleGetFunction(&f, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND,
           "cuModuleGetFunction(\"no_such_kernel\")");
    CUdeviceptr p;
    size_t size;
    expect(cuModuleGetGlobal(&p, &size, mod, "no_such_global"), CUDA_ERROR_NOT_FOUND,
           "cuModuleGetGlobal(\"no_such_global\")");
    CK(cuModuleGetFunction(&f, mod, "vecadd")); /* the module still works */
    CK(cuModuleUnload(mod));
}

static void test_oom(void)
{
    CUdeviceptr p = 0;
    expect(cuMemAlloc(&p, (size_t)1 << 50), CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc(1 PiB)");
    CK(cuMemAlloc(&p, 1 << 20));
    CK(cuMemsetD32(p, 0x01020304u, (1 << 20) / 4));
    unsigned v = 0;
    CK(cuMemcpyDtoH(&v, p + 4096, sizeof v));
    if (v != 0x01020304u)
        fail("after the failed allocation, a new buffer reads back %#x", v);
    CK(cuMemFree(p));
}

static void test_handle(void)
{
    CUevent a, b, c, d;
    float ms;
    CK(cuEventCreate(&a, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&b, CU_EVENT_DEFAULT));
    expect(cuEventElapsedTime(&ms, a, b), CUDA_ERROR_INVALID_HANDLE, "cuEventElapsedTime on unrecorded events");
    CK(cuEventCreate(&c, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&d, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(c, NULL));
    CK(cuEventRecord(d, NULL));
    CK(cuEventSynchronize(d));
    expect(cuEventElapsedTime(&ms, c, d), CUDA_ERROR_INVALID_HANDLE,
           "cuEventElapsedTime on events created with CU_EVENT_DISABLE_TIMING");
    CK(cuEventRecord(a, NULL));
    CK(cuEventRecord(b, NULL));
    CK(cuEventSynchronize(b));
    CK(cuEventElapsedTime(&ms, a, b)); /* recorded timing events work */
    CK(cuEventDestroy(a));
    CK(cuEventDestroy(b));
    CK(cuEventDestroy(c));
    CK(cuEventDestroy(d));
}

static void test_oob(void)
{
    CUmodule mod = load_module("oob");
    CUfunction f = get_function(mod, "oob_write");
    CUdeviceptr p;
    CK(cuMemAlloc(&p, 64));
    long long index = 1ll << 40;
    void *params[] = {&p, &index};
    CUresult r = cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, NULL, params, NULL);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_ILLEGAL_ADDRESS)
        fail("cuLaunchKernel(oob_write) returned %s, want CUDA_SUCCESS (the fault shows at the next sync)", cu_name(r));
    expect(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS, "cuCtxSynchronize after an out-of-bounds store");
    expect(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS, "a second cuCtxSynchronize (the error is sticky)");
}

int main(int argc, char **argv)
{
    init_args("errors", &argc, argv);
    const char *which = argc > 1 ? argv[1] : "all";
    static const struct {
        const char *name;
        void (*run)(void);
    } tests[] = {{"notfound", test_notfound}, {"oom", test_oom}, {"handle", test_handle}, {"oob", test_oob}};
    int ran = 0;
    setup();
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (strcmp(which, "all") != 0 && strcmp(which, tests[i].name) != 0)
            continue;
        tests[i].run();
        printf("errors: %s ok\n", tests[i].name);
        fflush(stdout);
        ran++;
    }
    if (ran == 0)
        fail("unknown test \"%s\" (want notfound, oom, handle, oob or all)", which);
    return 0;
}
