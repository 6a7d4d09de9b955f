/*
 * matmul: C = A*B with 16x16 shared-memory tiles (matmul_tiled). The inputs
 * are small integers, so every product and partial sum is exact and the
 * device result must equal the CPU's bit for bit.
 *
 *   matmul [M [N [K]]]      (default 128 128 128)
 */
#include "common.h"

int main(int argc, char **argv)
{
    init_args("matmul", &argc, argv);
    int M = (int)arg_long(argc, argv, 1, 128, "M");
    int N = (int)arg_long(argc, argv, 2, M, "N");
    int K = (int)arg_long(argc, argv, 3, M, "K");
    setup();
    CUmodule mod = load_module("matmul");
    CUfunction f = get_function(mod, "matmul_tiled");

    size_t an = (size_t)M * K, bn = (size_t)K * N, cn = (size_t)M * N;
    float *A = malloc(an * sizeof(float)), *B = malloc(bn * sizeof(float)), *C = malloc(cn * sizeof(float));
    if (!A || !B || !C)
        fail("out of host memory");
    uint32_t seed = 3;
    for (size_t i = 0; i < an; i++)
        A[i] = (float)((int)(xorshift32(&seed) % 17) - 8);
    for (size_t i = 0; i < bn; i++)
        B[i] = (float)((int)(xorshift32(&seed) % 17) - 8);

    CUdeviceptr dA, dB, dC;
    CK(cuMemAlloc(&dA, an * sizeof(float)));
    CK(cuMemAlloc(&dB, bn * sizeof(float)));
    CK(cuMemAlloc(&dC, cn * sizeof(float)));
    CK(cuMemcpyHtoD(dA, A, an * sizeof(float)));
    CK(cuMemcpyHtoD(dB, B, bn * sizeof(float)));
    CK(cuMemsetD32(dC, 0xffffffffu, cn)); /* NaN everywhere: an unwritten element shows */

    void *params[] = {&dA, &dB, &dC, &M, &N, &K};
    double t0 = now_ms();
    CK(cuLaunchKernel(f, (unsigned)(N + 15) / 16, (unsigned)(M + 15) / 16, 1, 16, 16, 1, 0, NULL, params, NULL));
    CK(cuCtxSynchronize());
    double ms = now_ms() - t0;
    CK(cuMemcpyDtoH(C, dC, cn * sizeof(float)));

    for (int r = 0; r < M; r++)
        for (int col = 0; col < N; col++) {
            float want = 0;
            for (int k = 0; k < K; k++)
                want += A[(size_t)r * K + k] * B[(size_t)k * N + col];
            float got = C[(size_t)r * N + col];
            if (got != want)
                fail("C[%d][%d] = %.9g, want %.9g", r, col, got, want);
        }

    CK(cuMemFree(dA));
    CK(cuMemFree(dB));
    CK(cuMemFree(dC));
    CK(cuModuleUnload(mod));
    printf("matmul: ok (%dx%dx%d, %.3f ms, %.2f GFLOP/s)\n", M, N, K, ms, 2.0 * M * N * K / (ms * 1e6));
    free(A);
    free(B);
    free(C);
    return 0;
}
