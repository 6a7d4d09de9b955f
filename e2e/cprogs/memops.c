/*
 * memops: the rest of the driver surface cuBLAS and PyTorch reach.
 *
 * Stream memory operations (a stream waits for a value another stream
 * writes, 32- and 64-bit, and in a batch); cuMemcpy2D/3D between pitched
 * host and device memory in every direction; cuMemcpyPeer between two
 * contexts; stream flags and priorities; peer-access queries; a tensor map
 * encoded and a bad one refused.
 *
 *   memops
 */
#include "common.h"

static void want_err(CUresult got, CUresult want, const char *what)
{
    if (got != want)
        fail("%s returned %s (%d), want %s (%d)", what, cu_name(got), (int)got, cu_name(want), (int)want);
}

int main(int argc, char **argv)
{
    init_args("memops", &argc, argv);
    CUdevice dev = setup();
    CUcontext prim;
    CK(cuCtxGetCurrent(&prim));
    CUstream s1, s2;
    CK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
    CK(cuStreamCreateWithPriority(&s2, CU_STREAM_NON_BLOCKING, -1));
    unsigned flags = 7;
    int prio = 7;
    CK(cuStreamGetFlags(s1, &flags));
    CK(cuStreamGetPriority(s2, &prio));
    if (flags != CU_STREAM_NON_BLOCKING || prio != -1)
        fail("stream flags %u, priority %d", flags, prio);
    CUcontext sc;
    CK(cuStreamGetCtx(s1, &sc));
    if (sc != prim)
        fail("the stream's context is not the one it was made in");

    /* ---- stream memory operations --------------------------------------- */
    CUdeviceptr flag, buf;
    CK(cuMemAlloc(&flag, 64));
    CK(cuMemAlloc(&buf, 4096));
    CK(cuMemsetD8(flag, 0, 64));
    CK(cuMemsetD8(buf, 0, 4096));
    /* s1 waits for the flag before it writes buf; s2 raises the flag. */
    CK(cuStreamWaitValue32(s1, flag, 3, CU_STREAM_WAIT_VALUE_GEQ));
    CK(cuMemsetD32Async(buf, 0xcafe, 16, s1));
    CK(cuStreamWriteValue32(s2, flag, 3, CU_STREAM_WRITE_VALUE_DEFAULT));
    CK(cuStreamSynchronize(s1));
    unsigned w[16];
    CK(cuMemcpyDtoH(w, buf, sizeof w));
    for (int i = 0; i < 16; i++)
        if (w[i] != 0xcafe)
            fail("after the wait: word %d is %#x", i, w[i]);
    CK(cuStreamWaitValue64(s1, flag + 8, 0x100000000ull, CU_STREAM_WAIT_VALUE_EQ));
    CK(cuStreamWriteValue32(s1, buf + 64, 77, 0));
    CK(cuStreamWriteValue64(s2, flag + 8, 0x100000000ull, 0));
    CK(cuStreamSynchronize(s1));
    CK(cuStreamSynchronize(s2));
    CK(cuMemcpyDtoH(w, buf + 64, 4));
    if (w[0] != 77)
        fail("after the 64-bit wait the write reads %u", w[0]);
    CUstreamBatchMemOpParams ops[2];
    memset(ops, 0, sizeof ops);
    ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    ops[0].writeValue.address = flag + 16;
    ops[0].writeValue.value = 9;
    ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[1].waitValue.address = flag + 16;
    ops[1].waitValue.value = 9;
    ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
    CK(cuStreamBatchMemOp(s1, 2, ops, 0));
    CK(cuStreamSynchronize(s1));
    CK(cuMemcpyDtoH(w, flag + 16, 4));
    if (w[0] != 9)
        fail("the batch's write reads %u", w[0]);

    /* ---- pitched copies ------------------------------------------------- */
    enum { W = 48, H = 20, D = 3, HP = 64, DP = 128, DH = 24 };
    unsigned char *host = malloc(HP * H * D), *back = calloc(HP * H * D, 1);
    if (!host || !back)
        fail("out of host memory");
    for (int i = 0; i < HP * H * D; i++)
        host[i] = (unsigned char)(i * 13 + 1);
    CUdeviceptr dp, dq;
    CK(cuMemAlloc(&dp, DP * DH * D));
    CK(cuMemAlloc(&dq, DP * DH * D));
    CK(cuMemsetD8(dp, 0xee, DP * DH * D));
    CUDA_MEMCPY2D c2;
    memset(&c2, 0, sizeof c2);
    c2.srcMemoryType = CU_MEMORYTYPE_HOST;
    c2.srcHost = host;
    c2.srcPitch = HP;
    c2.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c2.dstDevice = dp;
    c2.dstPitch = DP;
    c2.dstXInBytes = 8;
    c2.dstY = 1;
    c2.WidthInBytes = W;
    c2.Height = H;
    CK(cuMemcpy2D(&c2));
    /* Device to device, then back to a pitched host buffer. */
    CUDA_MEMCPY2D d2 = c2;
    d2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    d2.srcHost = NULL;
    d2.srcDevice = dp;
    d2.srcPitch = DP;
    d2.srcXInBytes = 8;
    d2.srcY = 1;
    d2.dstDevice = dq;
    d2.dstXInBytes = 0;
    d2.dstY = 0;
    CK(cuMemcpy2DAsync(&d2, s1));
    CUDA_MEMCPY2D h2;
    memset(&h2, 0, sizeof h2);
    h2.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    h2.srcDevice = dq;
    h2.srcPitch = DP;
    h2.dstMemoryType = CU_MEMORYTYPE_HOST;
    h2.dstHost = back;
    h2.dstPitch = HP;
    h2.WidthInBytes = W;
    h2.Height = H;
    CK(cuStreamSynchronize(s1));
    CK(cuMemcpy2D(&h2));
    for (int y = 0; y < H; y++)
        if (memcmp(back + y * HP, host + y * HP, W) != 0)
            fail("2D round trip: row %d differs", y);
    unsigned char pad = 0;
    CK(cuMemcpyDtoH(&pad, dp + DP + 7, 1));
    if (pad != 0xee)
        fail("the 2D copy wrote outside its rows");
    /* 3D: D slices of H rows, host packed by HP, device by DP and DH. */
    CUDA_MEMCPY3D c3;
    memset(&c3, 0, sizeof c3);
    c3.srcMemoryType = CU_MEMORYTYPE_HOST;
    c3.srcHost = host;
    c3.srcPitch = HP;
    c3.srcHeight = H;
    c3.dstMemoryType = CU_MEMORYTYPE_DEVICE;
    c3.dstDevice = dp;
    c3.dstPitch = DP;
    c3.dstHeight = DH;
    c3.WidthInBytes = W;
    c3.Height = H;
    c3.Depth = D;
    CK(cuMemcpy3D(&c3));
    CUDA_MEMCPY3D b3;
    memset(&b3, 0, sizeof b3);
    b3.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    b3.srcDevice = dp;
    b3.srcPitch = DP;
    b3.srcHeight = DH;
    b3.dstMemoryType = CU_MEMORYTYPE_HOST;
    b3.dstHost = back;
    b3.dstPitch = HP;
    b3.dstHeight = H;
    b3.WidthInBytes = W;
    b3.Height = H;
    b3.Depth = D;
    memset(back, 0, HP * H * D);
    CK(cuMemcpy3DAsync(&b3, s2));
    CK(cuStreamSynchronize(s2));
    for (int z = 0; z < D; z++)
        for (int y = 0; y < H; y++)
            if (memcmp(back + (z * H + y) * HP, host + (z * H + y) * HP, W) != 0)
                fail("3D round trip: slice %d row %d differs", z, y);

    /* ---- peer copies between contexts ----------------------------------- */
    CUcontext other;
    CK(cuCtxCreate(&other, NULL, 0, dev));
    CUdeviceptr theirs;
    CK(cuMemAlloc(&theirs, 4096));
    CK(cuMemcpyHtoD(theirs, host, 2048));
    CK(cuCtxPopCurrent(NULL));
    CK(cuCtxSetCurrent(prim));
    CK(cuMemcpyPeer(buf, prim, theirs, other, 2048));
    memset(back, 0, 2048);
    CK(cuMemcpyDtoH(back, buf, 2048));
    if (memcmp(back, host, 2048) != 0)
        fail("cuMemcpyPeer between contexts copied something else");
    CK(cuMemcpyPeerAsync(theirs, other, flag, prim, 64, s1));
    CK(cuStreamSynchronize(s1));
    CK(cuCtxDestroy(other));

    /* ---- peer access: no device is its own peer -------------------------- */
    int can = 7;
    CK(cuDeviceCanAccessPeer(&can, dev, dev));
    if (can != 0)
        fail("cuDeviceCanAccessPeer(dev, dev) = %d", can);
    int v = 0;
    want_err(cuDeviceGetP2PAttribute(&v, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, dev, dev), CUDA_ERROR_INVALID_DEVICE,
             "cuDeviceGetP2PAttribute(dev, dev)");

    /* ---- tensor maps -------------------------------------------------------- */
    int major = 0;
    CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    if (major >= 9) {
        CUtensorMap tm;
        cuuint64_t dims[2] = {64, 32}, strides[1] = {256};
        cuuint32_t box[2] = {32, 8}, es[2] = {1, 1};
        CK(cuTensorMapEncodeTiled(&tm, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)dp, dims, strides, box, es,
                                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
        CUtensorMap again;
        CK(cuTensorMapEncodeTiled(&again, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)dp, dims, strides, box,
                                  es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                  CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
        if (memcmp(&tm, &again, sizeof tm) != 0)
            fail("the same tensor map encoded twice differs");
        cuuint64_t bad[1] = {250};
        want_err(cuTensorMapEncodeTiled(&tm, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, (void *)(uintptr_t)dp, dims, bad, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE),
                 CUDA_ERROR_INVALID_VALUE, "a tensor map with a stride not a multiple of 16");
    }

    CK(cuMemFree(flag));
    CK(cuMemFree(buf));
    CK(cuMemFree(dp));
    CK(cuMemFree(dq));
    CK(cuStreamDestroy(s1));
    CK(cuStreamDestroy(s2));
    free(host);
    free(back);
    printf("memops: ok (stream waits and writes, 2D/3D copies, peer copies, peer queries, tensor maps)\n");
    return 0;
}
