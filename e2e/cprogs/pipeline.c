/*
 * pipeline: a two-stream pipeline over pinned host memory.
 *
 * The input is cut into chunks. Chunk c goes to stream c%2: an async copy in
 * (cuMemcpyHtoDAsync from cuMemAllocHost memory), then scale_offset
 * (x = 2x + 1), then an event. The other stream waits for that event
 * (cuStreamWaitEvent), adds the chunk to itself with vecadd into the output,
 * and copies it back asynchronously. Timing events bracket the whole
 * pipeline. Every element must come back as exactly 2*(2x + 1).
 *
 *   pipeline [N [CHUNKS]]      (default 262144 elements in 8 chunks)
 */
#include "common.h"

int main(int argc, char **argv)
{
    init_args("pipeline", &argc, argv);
    int n = (int)arg_long(argc, argv, 1, 1 << 18, "element count");
    int chunks = (int)arg_long(argc, argv, 2, 8, "chunk count");
    if (chunks > 64 || chunks > n)
        fail("chunk count must be at most 64 and at most N");
    setup();
    CUmodule mod = load_module("basic");
    CUfunction scale = get_function(mod, "scale_offset");
    CUfunction add = get_function(mod, "vecadd");

    size_t bytes = (size_t)n * sizeof(float);
    float *hin, *hout;
    CK(cuMemAllocHost((void **)&hin, bytes));
    CK(cuMemAllocHost((void **)&hout, bytes));
    uint32_t seed = 5;
    for (int i = 0; i < n; i++) {
        hin[i] = (float)((int)(xorshift32(&seed) % 4001) - 2000) * 0.25f;
        hout[i] = -1.0f;
    }
    CUdeviceptr din, dout;
    CK(cuMemAlloc(&din, bytes));
    CK(cuMemAlloc(&dout, bytes));

    CUstream s[2];
    CK(cuStreamCreate(&s[0], CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreateWithPriority(&s[1], CU_STREAM_NON_BLOCKING, 0));
    CUevent start, stop, done[64];
    CK(cuEventCreate(&start, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
    for (int c = 0; c < chunks; c++)
        CK(cuEventCreate(&done[c], CU_EVENT_DISABLE_TIMING));

    float two = 2.0f, one = 1.0f;
    double t0 = now_ms();
    CK(cuEventRecord(start, s[0]));
    CK(cuStreamWaitEvent(s[1], start, 0));
    int per = (n + chunks - 1) / chunks;
    for (int c = 0; c < chunks; c++) {
        int off = c * per;
        int len = off + per <= n ? per : n - off;
        if (len <= 0)
            break;
        CUstream first = s[c % 2], second = s[(c + 1) % 2];
        CUdeviceptr xin = din + (CUdeviceptr)off * sizeof(float);
        CUdeviceptr xout = dout + (CUdeviceptr)off * sizeof(float);
        unsigned grid = (unsigned)((len + 255) / 256);

        CK(cuMemcpyHtoDAsync(xin, hin + off, (size_t)len * sizeof(float), first));
        void *ps[] = {&xin, &two, &one, &len};
        CK(cuLaunchKernel(scale, grid, 1, 1, 256, 1, 1, 0, first, ps, NULL));
        CK(cuEventRecord(done[c], first));

        CK(cuStreamWaitEvent(second, done[c], 0));
        void *pa[] = {&xin, &xin, &xout, &len};
        CK(cuLaunchKernel(add, grid, 1, 1, 256, 1, 1, 0, second, pa, NULL));
        CK(cuMemcpyDtoHAsync(hout + off, xout, (size_t)len * sizeof(float), second));
    }
    /* stop follows everything on both streams */
    CUevent tail;
    CK(cuEventCreate(&tail, CU_EVENT_DISABLE_TIMING));
    CK(cuEventRecord(tail, s[1]));
    CK(cuStreamWaitEvent(s[0], tail, 0));
    CK(cuEventRecord(stop, s[0]));
    CK(cuEventSynchronize(stop));
    double wall = now_ms() - t0;

    float ms = -1;
    CK(cuEventElapsedTime(&ms, start, stop));
    if (!(ms >= 0))
        fail("cuEventElapsedTime gave %g ms", ms);
    CK(cuEventQuery(stop));
    CK(cuStreamSynchronize(s[1]));
    CK(cuStreamQuery(s[0]));
    CK(cuStreamQuery(s[1]));

    for (int i = 0; i < n; i++) {
        float want = 2.0f * (2.0f * hin[i] + 1.0f);
        if (hout[i] != want)
            fail("out[%d] = %.9g, want %.9g (chunk %d)", i, hout[i], want, i / per);
    }

    for (int c = 0; c < chunks; c++)
        CK(cuEventDestroy(done[c]));
    CK(cuEventDestroy(tail));
    CK(cuEventDestroy(start));
    CK(cuEventDestroy(stop));
    CK(cuStreamDestroy(s[0]));
    CK(cuStreamDestroy(s[1]));
    CK(cuMemFree(din));
    CK(cuMemFree(dout));
    CK(cuMemFreeHost(hin));
    CK(cuMemFreeHost(hout));
    CK(cuModuleUnload(mod));
    printf("pipeline: ok (%d elements in %d chunks on 2 streams, events %.3f ms, wall %.3f ms)\n", n, chunks, ms,
           wall);
    return 0;
}
