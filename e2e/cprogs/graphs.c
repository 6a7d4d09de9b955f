/*
 * graphs: stream capture and CUDA graphs, as PyTorch's CUDA graphs use
 * them.
 *
 * 1. Captures, on two streams forked and joined through events, copies in,
 *    a memset, three kernels and a copy out; checks the captured graph's
 *    shape (7 nodes, 7 edges, 1 root), instantiates it and launches it three
 *    times with new host inputs each time: the copy nodes read and write
 *    host memory when the graph runs.
 * 2. Builds a graph with the node API (memset -> kernel), launches it,
 *    changes the kernel's parameters in the executable graph, launches again.
 * 3. The errors CUDA gives: capturing the legacy stream, ending a capture
 *    with a forked stream not joined back, synchronising a capturing stream
 *    (which ruins the capture), an allocation in global mode (allowed in
 *    relaxed mode).
 *
 *   graphs [N]      (default 4096 elements)
 */
#include "common.h"

#include <math.h>

static void want_err(CUresult got, CUresult want, const char *what)
{
    if (got != want)
        fail("%s returned %s (%d), want %s (%d)", what, cu_name(got), (int)got, cu_name(want), (int)want);
}

static unsigned fbits(float f)
{
    unsigned u;
    memcpy(&u, &f, 4);
    return u;
}

int main(int argc, char **argv)
{
    init_args("graphs", &argc, argv);
    int n = (int)arg_long(argc, argv, 1, 4096, "element count");
    setup();
    CUmodule mod = load_module("basic");
    CUfunction vecadd = get_function(mod, "vecadd");
    CUfunction scale = get_function(mod, "scale_offset");

    size_t bytes = (size_t)n * 4;
    float *ha, *hb, *hout;
    CK(cuMemAllocHost((void **)&ha, bytes));
    CK(cuMemAllocHost((void **)&hb, bytes));
    CK(cuMemAllocHost((void **)&hout, bytes));
    CUdeviceptr da, db, dc, dd;
    CK(cuMemAlloc(&da, bytes));
    CK(cuMemAlloc(&db, bytes));
    CK(cuMemAlloc(&dc, bytes));
    CK(cuMemAlloc(&dd, bytes));
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CUevent fork, join;
    CK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
    CK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
    unsigned grid = (unsigned)((n + 255) / 256);

    /* ---- 1. capture --------------------------------------------------- */
    CUstreamCaptureStatus st;
    CK(cuStreamIsCapturing(s1, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_NONE)
        fail("a new stream reports capture status %d", (int)st);
    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuStreamIsCapturing(s1, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        fail("a capturing stream reports status %d", (int)st);
    CK(cuMemcpyHtoDAsync(da, ha, bytes, s1));
    CK(cuMemcpyHtoDAsync(db, hb, bytes, s1));
    CK(cuEventRecord(fork, s1));
    CK(cuStreamWaitEvent(s2, fork, 0));
    CK(cuStreamIsCapturing(s2, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
        fail("a stream that waited on a captured event did not join the capture (status %d)", (int)st);
    void *pv[] = {&da, &db, &dc, &n};
    CK(cuLaunchKernel(vecadd, grid, 1, 1, 256, 1, 1, 0, s1, pv, NULL));
    cuuint64_t id = 0;
    const CUgraphNode *deps = NULL;
    size_t ndeps = 0;
    CUgraph cg = NULL;
    CK(cuStreamGetCaptureInfo(s1, &st, &id, &cg, &deps, NULL, &ndeps));
    if (st != CU_STREAM_CAPTURE_STATUS_ACTIVE || id == 0 || cg == NULL || ndeps != 1 || deps == NULL)
        fail("capture info: status %d id %llu graph %p, %zu dependencies", (int)st, (unsigned long long)id, (void *)cg, ndeps);
    CUgraphNodeType nt;
    CK(cuGraphNodeGetType(deps[0], &nt));
    if (nt != CU_GRAPH_NODE_TYPE_KERNEL)
        fail("the capturing stream's dependency is a node of type %d, want a kernel", (int)nt);
    CK(cuMemsetD32Async(dd, fbits(1.0f), (size_t)n, s2));
    float k = 3.0f, off = 0.5f;
    void *ps[] = {&dd, &k, &off, &n};
    CK(cuLaunchKernel(scale, grid, 1, 1, 256, 1, 1, 0, s2, ps, NULL));
    CK(cuEventRecord(join, s2));
    CK(cuStreamWaitEvent(s1, join, 0));
    void *pv2[] = {&dc, &dd, &dc, &n};
    CK(cuLaunchKernel(vecadd, grid, 1, 1, 256, 1, 1, 0, s1, pv2, NULL));
    CK(cuMemcpyDtoHAsync(hout, dc, bytes, s1));
    CUgraph g;
    CK(cuStreamEndCapture(s1, &g));
    CK(cuStreamIsCapturing(s2, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_NONE)
        fail("the joined stream still captures after the capture ended");

    size_t nn = 0, ne = 0, nr = 0;
    CK(cuGraphGetNodes(g, NULL, &nn));
    CK(cuGraphGetEdges(g, NULL, NULL, NULL, &ne));
    CK(cuGraphGetRootNodes(g, NULL, &nr));
    if (nn != 7 || ne != 7 || nr != 1)
        fail("captured graph has %zu nodes, %zu edges, %zu roots; want 7, 7, 1", nn, ne, nr);
    CUgraphExec x;
    CK(cuGraphInstantiate(&x, g, 0));
    for (int it = 0; it < 3; it++) {
        for (int i = 0; i < n; i++) {
            ha[i] = (float)(i % 1000) + (float)it;
            hb[i] = (float)(i % 7) * 2.0f;
        }
        memset(hout, 0, bytes);
        CK(cuGraphLaunch(x, s1));
        CK(cuStreamSynchronize(s1));
        for (int i = 0; i < n; i++) {
            float want = ha[i] + hb[i] + 3.5f;
            if (hout[i] != want)
                fail("launch %d: out[%d] = %g, want %g", it, i, hout[i], want);
        }
    }
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    /* ---- 2. the node API ------------------------------------------------ */
    CK(cuGraphCreate(&g, 0));
    CUDA_MEMSET_NODE_PARAMS ms;
    memset(&ms, 0, sizeof ms);
    ms.dst = dc;
    ms.value = fbits(2.0f);
    ms.elementSize = 4;
    ms.width = (size_t)n;
    ms.height = 1;
    CUcontext cur;
    CK(cuCtxGetCurrent(&cur));
    CUgraphNode nset, nker;
    CK(cuGraphAddMemsetNode(&nset, g, NULL, 0, &ms, cur));
    CUDA_KERNEL_NODE_PARAMS kp;
    memset(&kp, 0, sizeof kp);
    kp.func = scale;
    kp.gridDimX = grid;
    kp.gridDimY = kp.gridDimZ = 1;
    kp.blockDimX = 256;
    kp.blockDimY = kp.blockDimZ = 1;
    k = 3.0f;
    off = 1.0f;
    void *pk[] = {&dc, &k, &off, &n};
    kp.kernelParams = pk;
    CK(cuGraphAddKernelNode(&nker, g, &nset, 1, &kp));
    k = 100.0f; /* the node keeps the values it was given */
    CUDA_KERNEL_NODE_PARAMS back;
    CK(cuGraphKernelNodeGetParams(nker, &back));
    if (back.func != scale || back.gridDimX != grid || back.blockDimX != 256 || *(float *)back.kernelParams[1] != 3.0f)
        fail("kernel node parameters read back wrong");
    CK(cuGraphInstantiate(&x, g, 0));
    CK(cuGraphLaunch(x, s1));
    CK(cuMemcpyDtoHAsync(hout, dc, bytes, s1));
    CK(cuStreamSynchronize(s1));
    for (int i = 0; i < n; i++)
        if (hout[i] != 7.0f)
            fail("node API graph: out[%d] = %g, want 7", i, hout[i]);
    k = 5.0f;
    CK(cuGraphExecKernelNodeSetParams(x, nker, &kp));
    CK(cuGraphLaunch(x, s1));
    CK(cuMemcpyDtoHAsync(hout, dc, bytes, s1));
    CK(cuStreamSynchronize(s1));
    for (int i = 0; i < n; i++)
        if (hout[i] != 11.0f)
            fail("after cuGraphExecKernelNodeSetParams: out[%d] = %g, want 11", i, hout[i]);
    CK(cuGraphExecDestroy(x));
    CK(cuGraphDestroy(g));

    /* ---- 3. errors ------------------------------------------------------- */
    want_err(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
             "capturing the legacy stream");

    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuEventRecord(fork, s1));
    CK(cuStreamWaitEvent(s2, fork, 0));
    CK(cuLaunchKernel(scale, grid, 1, 1, 256, 1, 1, 0, s2, ps, NULL));
    g = NULL;
    want_err(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_UNJOINED, "ending a capture with a stream not joined");
    if (g != NULL)
        fail("an unjoined capture returned a graph");
    CK(cuStreamIsCapturing(s2, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_NONE)
        fail("the unjoined stream still captures");

    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CK(cuLaunchKernel(vecadd, grid, 1, 1, 256, 1, 1, 0, s1, pv, NULL));
    want_err(cuStreamSynchronize(s1), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "synchronising a capturing stream");
    CK(cuStreamIsCapturing(s1, &st));
    if (st != CU_STREAM_CAPTURE_STATUS_INVALIDATED)
        fail("after a forbidden call the capture reports status %d, want invalidated", (int)st);
    want_err(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "ending an invalidated capture");

    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL)
        fail("the thread's capture mode was %d, want global", (int)mode);
    CUdeviceptr tmp;
    CK(cuMemAlloc(&tmp, 4096)); /* allowed in relaxed mode */
    CK(cuThreadExchangeStreamCaptureMode(&mode));
    CK(cuLaunchKernel(vecadd, grid, 1, 1, 256, 1, 1, 0, s1, pv, NULL));
    CK(cuStreamEndCapture(s1, &g));
    CK(cuGraphDestroy(g));
    CK(cuMemFree(tmp));

    CK(cuStreamBeginCapture(s1, CU_STREAM_CAPTURE_MODE_GLOBAL));
    want_err(cuMemAlloc(&tmp, 4096), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "cuMemAlloc during a global capture");
    want_err(cuStreamEndCapture(s1, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "ending a capture after a forbidden call");

    /* The streams are fine afterwards. */
    CK(cuLaunchKernel(vecadd, grid, 1, 1, 256, 1, 1, 0, s1, pv, NULL));
    CK(cuStreamSynchronize(s1));

    CK(cuEventDestroy(fork));
    CK(cuEventDestroy(join));
    CK(cuStreamDestroy(s1));
    CK(cuStreamDestroy(s2));
    CK(cuMemFree(da));
    CK(cuMemFree(db));
    CK(cuMemFree(dc));
    CK(cuMemFree(dd));
    CK(cuMemFreeHost(ha));
    CK(cuMemFreeHost(hb));
    CK(cuMemFreeHost(hout));
    CK(cuModuleUnload(mod));
    printf("graphs: ok (%d elements; capture across two streams, node API, capture errors)\n", n);
    return 0;
}
