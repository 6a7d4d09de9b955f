/*
 * reduction: integer sums three ways, each checked against the CPU:
 *   reduce_sum_shared  shared-memory tree with bar.sync, one atomicAdd per block;
 *   reduce_sum_dyn     dynamic shared memory, per-block partial sums;
 *   reduce_lastblock   fence and ticket: the last block sums the partials.
 *
 *   reduction [N]      (default 1048576 elements)
 */
#include "common.h"

int main(int argc, char **argv)
{
    init_args("reduction", &argc, argv);
    int n = (int)arg_long(argc, argv, 1, 1 << 20, "element count");
    setup();
    CUmodule mod = load_module("reduce");
    CUfunction shared_fn = get_function(mod, "reduce_sum_shared");
    CUfunction dyn_fn = get_function(mod, "reduce_sum_dyn");
    CUfunction last_fn = get_function(mod, "reduce_lastblock");

    size_t bytes = (size_t)n * sizeof(int);
    int *in = malloc(bytes);
    if (!in)
        fail("out of host memory");
    uint32_t seed = 7, want = 0;
    for (int i = 0; i < n; i++) {
        in[i] = (int)(xorshift32(&seed) % 2001) - 1000;
        want += (uint32_t)in[i];
    }
    CUdeviceptr din, dout;
    CK(cuMemAlloc(&din, bytes));
    CK(cuMemAlloc(&dout, 4 * sizeof(int)));
    CK(cuMemcpyHtoD(din, in, bytes));

    /* 1: shared-memory tree plus atomics. */
    CK(cuMemsetD32(dout, 0, 1));
    void *p1[] = {&din, &dout, &n};
    CK(cuLaunchKernel(shared_fn, 120, 1, 1, 256, 1, 1, 0, NULL, p1, NULL));
    int got;
    CK(cuMemcpyDtoH(&got, dout, sizeof got));
    if ((uint32_t)got != want)
        fail("reduce_sum_shared: %d, want %d", got, (int)want);

    /* 2: dynamic shared memory; each block sums 2*128 elements. */
    unsigned block = 128, blocks = (unsigned)((n + 2 * block - 1) / (2 * block));
    CUdeviceptr dpartial;
    CK(cuMemAlloc(&dpartial, blocks * sizeof(unsigned)));
    void *p2[] = {&din, &dpartial, &n};
    CK(cuLaunchKernel(dyn_fn, blocks, 1, 1, block, 1, 1, block * sizeof(unsigned), NULL, p2, NULL));
    unsigned *partial = malloc(blocks * sizeof(unsigned));
    if (!partial)
        fail("out of host memory");
    CK(cuMemcpyDtoH(partial, dpartial, blocks * sizeof(unsigned)));
    uint32_t sum = 0;
    for (unsigned b = 0; b < blocks; b++) {
        uint32_t seg = 0;
        for (size_t i = (size_t)b * 2 * block; i < (size_t)(b + 1) * 2 * block && i < (size_t)n; i++)
            seg += (uint32_t)in[i];
        if (partial[b] != seg)
            fail("reduce_sum_dyn: block %u sum %u, want %u", b, partial[b], seg);
        sum += partial[b];
    }
    if (sum != want)
        fail("reduce_sum_dyn: total %u, want %u", sum, want);

    /* 3: single pass; run twice to prove the ticket counter resets itself. */
    unsigned lblocks = 48;
    CUdeviceptr dlpartial;
    CK(cuMemAlloc(&dlpartial, lblocks * sizeof(unsigned)));
    for (int round = 0; round < 2; round++) {
        CK(cuMemsetD32(dout, 0, 1));
        void *p3[] = {&din, &dlpartial, &dout, &n};
        CK(cuLaunchKernel(last_fn, lblocks, 1, 1, 256, 1, 1, 0, NULL, p3, NULL));
        CK(cuCtxSynchronize());
        CK(cuMemcpyDtoH(&got, dout, sizeof got));
        if ((uint32_t)got != want)
            fail("reduce_lastblock round %d: %d, want %d", round, got, (int)want);
    }

    CK(cuMemFree(din));
    CK(cuMemFree(dout));
    CK(cuMemFree(dpartial));
    CK(cuMemFree(dlpartial));
    CK(cuModuleUnload(mod));
    printf("reduction: ok (%d elements, sum %d)\n", n, (int)want);
    free(in);
    free(partial);
    return 0;
}
