/*
 * warpreduce: warp-shuffle reductions, checked against the CPU:
 *   reduce_warp_shfl     shfl.down within warps, warp sums through shared
 *                        memory, one atomicAdd per block (integers);
 *   warp_reduce_xor_f32  an xor butterfly per warp (floats). The butterfly's
 *                        order of additions is fixed, so the CPU replays it
 *                        and the sums must match bit for bit.
 *
 *   warpreduce [N]      (default 1048576 elements)
 */
#include "common.h"

int main(int argc, char **argv)
{
    init_args("warpreduce", &argc, argv);
    int n = (int)arg_long(argc, argv, 1, 1 << 20, "element count");
    setup();
    CUmodule red = load_module("reduce");
    CUmodule warp = load_module("warp");
    CUfunction isum = get_function(red, "reduce_warp_shfl");
    CUfunction fsum = get_function(warp, "warp_reduce_xor_f32");

    int *iv = malloc((size_t)n * sizeof(int));
    float *fv = malloc((size_t)n * sizeof(float));
    if (!iv || !fv)
        fail("out of host memory");
    uint32_t seed = 11, want = 0;
    for (int i = 0; i < n; i++) {
        iv[i] = (int)(xorshift32(&seed) % 20001) - 10000;
        fv[i] = (float)(xorshift32(&seed) >> 8) * 0x1p-24f * 20.0f - 10.0f;
        want += (uint32_t)iv[i];
    }
    CUdeviceptr di, df, dout, dwarps;
    unsigned block = 256, blocks = (unsigned)((n + block - 1) / block);
    unsigned warps = blocks * block / 32;
    CK(cuMemAlloc(&di, (size_t)n * sizeof(int)));
    CK(cuMemAlloc(&df, (size_t)n * sizeof(float)));
    CK(cuMemAlloc(&dout, sizeof(int)));
    CK(cuMemAlloc(&dwarps, 2 * (size_t)warps * sizeof(float)));
    CK(cuMemcpyHtoD(di, iv, (size_t)n * sizeof(int)));
    CK(cuMemcpyHtoD(df, fv, (size_t)n * sizeof(float)));
    CK(cuMemsetD32(dout, 0, 1));

    void *pi[] = {&di, &dout, &n};
    CK(cuLaunchKernel(isum, 96, 1, 1, 192, 1, 1, 0, NULL, pi, NULL));
    void *pf[] = {&df, &dwarps, &n};
    CK(cuLaunchKernel(fsum, blocks, 1, 1, block, 1, 1, 0, NULL, pf, NULL));
    CK(cuCtxSynchronize());

    int got;
    CK(cuMemcpyDtoH(&got, dout, sizeof got));
    if ((uint32_t)got != want)
        fail("reduce_warp_shfl: %d, want %d", got, (int)want);

    float *ws = malloc(2 * (size_t)warps * sizeof(float));
    if (!ws)
        fail("out of host memory");
    CK(cuMemcpyDtoH(ws, dwarps, 2 * (size_t)warps * sizeof(float)));
    for (unsigned w = 0; w < warps; w++) {
        float v[32], next[32];
        for (int l = 0; l < 32; l++) {
            size_t i = (size_t)w * 32 + (size_t)l;
            v[l] = i < (size_t)n ? fv[i] : 0.0f;
        }
        for (int mask = 16; mask > 0; mask >>= 1) {
            for (int l = 0; l < 32; l++)
                next[l] = v[l] + v[l ^ mask];
            memcpy(v, next, sizeof v);
        }
        if (ws[2 * w] != v[0] || ws[2 * w + 1] != v[31])
            fail("warp_reduce_xor_f32: warp %u: lanes 0 and 31 hold %.9g and %.9g, want %.9g", w, ws[2 * w],
                 ws[2 * w + 1], v[0]);
    }

    CK(cuMemFree(di));
    CK(cuMemFree(df));
    CK(cuMemFree(dout));
    CK(cuMemFree(dwarps));
    CK(cuModuleUnload(red));
    CK(cuModuleUnload(warp));
    printf("warpreduce: ok (%d elements, %u warps)\n", n, warps);
    free(iv);
    free(fv);
    free(ws);
    return 0;
}
