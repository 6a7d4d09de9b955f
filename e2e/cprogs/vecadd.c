/*
 * vecadd: c = a + b on the device, launched twice: once with kernelParams
 * and once with the "extra" parameter buffer. Both results must equal the
 * CPU's sums exactly.
 *
 *   vecadd [N]        (default 100000 elements)
 */
#include "common.h"

#include <stddef.h>

static void check(const float *a, const float *b, const float *c, int n, const char *how)
{
    for (int i = 0; i < n; i++)
        if (c[i] != a[i] + b[i])
            fail("%s: c[%d] = %.9g, want %.9g", how, i, c[i], a[i] + b[i]);
}

int main(int argc, char **argv)
{
    init_args("vecadd", &argc, argv);
    int n = (int)arg_long(argc, argv, 1, 100000, "element count");
    setup();
    CUmodule mod = load_module("basic");
    CUfunction f = get_function(mod, "vecadd");

    size_t bytes = (size_t)n * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    if (!a || !b || !c)
        fail("out of host memory");
    uint32_t seed = 1;
    for (int i = 0; i < n; i++) {
        a[i] = (float)((int)(xorshift32(&seed) % 20001) - 10000) * 0.125f;
        b[i] = (float)(xorshift32(&seed) >> 8) * 0x1p-20f;
    }
    CUdeviceptr da, db, dc, dc2;
    CK(cuMemAlloc(&da, bytes));
    CK(cuMemAlloc(&db, bytes));
    CK(cuMemAlloc(&dc, bytes));
    CK(cuMemAlloc(&dc2, bytes));
    CK(cuMemcpyHtoD(da, a, bytes));
    CK(cuMemcpyHtoD(db, b, bytes));

    unsigned grid = (unsigned)((n + 255) / 256);
    void *params[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
    CK(cuCtxSynchronize());
    CK(cuMemcpyDtoH(c, dc, bytes));
    check(a, b, c, n, "kernelParams");

    /* The same launch through one packed parameter buffer. */
    struct packed_args {
        CUdeviceptr a, b, c;
        int n;
    } packed = {da, db, dc2, n};
    /* The kernel's parameters end after n: the driver refuses a buffer
     * size that includes the struct's tail padding. */
    size_t packed_size = offsetof(struct packed_args, n) + sizeof(int);
    void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                     CU_LAUNCH_PARAM_END};
    CK(cuLaunchKernel(f, grid, 1, 1, 256, 1, 1, 0, NULL, NULL, extra));
    CK(cuCtxSynchronize());
    memset(c, 0, bytes);
    CK(cuMemcpyDtoH(c, dc2, bytes));
    check(a, b, c, n, "extra");

    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuMemFree(dc2));
    CK(cuModuleUnload(mod));
    printf("vecadd: ok (%d elements, kernelParams and extra)\n", n);
    free(a);
    free(b);
    free(c);
    return 0;
}
