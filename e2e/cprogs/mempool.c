/*
 * mempool: stream-ordered allocation and memory pools, the calls behind
 * PyTorch's cudaMallocAsync allocator.
 *
 * Allocates from the device's default pool on a stream, computes in that
 * memory and frees it on the stream; checks the pool's used and reserved
 * counters; makes a pool with a release threshold, sees it keep freed
 * memory and give it back on cuMemPoolTrimTo; makes it the device's
 * current pool; checks cuMemGetInfo against an allocation.
 *
 *   mempool [N]      (default 65536 elements)
 */
#include "common.h"

static cuuint64_t attr(CUmemoryPool p, CUmemPool_attribute a)
{
    cuuint64_t v = 0;
    CK(cuMemPoolGetAttribute(p, a, &v));
    return v;
}

int main(int argc, char **argv)
{
    init_args("mempool", &argc, argv);
    int n = (int)arg_long(argc, argv, 1, 65536, "element count");
    CUdevice dev = setup();
    CUmodule mod = load_module("basic");
    CUfunction vecadd = get_function(mod, "vecadd");
    size_t bytes = (size_t)n * 4;
    unsigned grid = (unsigned)((n + 255) / 256);
    CUstream s;
    CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    float *ha = malloc(bytes), *hc = malloc(bytes);
    if (!ha || !hc)
        fail("out of host memory");
    for (int i = 0; i < n; i++)
        ha[i] = (float)(i % 513);

    /* The default pool. */
    CUmemoryPool def, cur;
    CK(cuDeviceGetDefaultMemPool(&def, dev));
    CK(cuDeviceGetMemPool(&cur, dev));
    if (cur != def)
        fail("the device's current pool is not its default pool");
    int reuse = 0;
    CK(cuMemPoolGetAttribute(def, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
    if (reuse != 1)
        fail("CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC is %d by default, want 1", reuse);
    cuuint64_t used0 = attr(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT);
    CUdeviceptr da, dc;
    CK(cuMemAllocAsync(&da, bytes, s));
    CK(cuMemAllocAsync(&dc, bytes, s));
    if (attr(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) < used0 + 2 * bytes)
        fail("the default pool's used memory did not grow by the two allocations");
    CK(cuMemcpyHtoDAsync(da, ha, bytes, s));
    void *pv[] = {&da, &da, &dc, &n};
    CK(cuLaunchKernel(vecadd, grid, 1, 1, 256, 1, 1, 0, s, pv, NULL));
    CK(cuMemcpyDtoHAsync(hc, dc, bytes, s));
    CK(cuStreamSynchronize(s));
    for (int i = 0; i < n; i++)
        if (hc[i] != 2 * ha[i])
            fail("pool memory: c[%d] = %g, want %g", i, hc[i], 2 * ha[i]);
    CK(cuMemFreeAsync(da, s));
    CK(cuMemFreeAsync(dc, s));
    CK(cuStreamSynchronize(s));
    if (attr(def, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) != used0)
        fail("the default pool still counts freed memory as used");
    if (attr(def, CU_MEMPOOL_ATTR_USED_MEM_HIGH) < used0 + 2 * bytes)
        fail("the default pool's high-water mark missed the allocations");

    /* A pool that keeps freed memory up to its threshold. */
    CUmemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = dev;
    CUmemoryPool pool;
    CK(cuMemPoolCreate(&pool, &props));
    cuuint64_t keep = 64ull << 20;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep));
    if (attr(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) != keep)
        fail("the release threshold did not stick");
    CUdeviceptr p1;
    CK(cuMemAllocFromPoolAsync(&p1, 4 << 20, pool, s));
    CK(cuMemsetD32Async(p1, 0x01020304, (4 << 20) / 4, s));
    unsigned word = 0;
    CK(cuMemcpyDtoHAsync(&word, p1 + 1000 * 4, 4, s));
    CK(cuStreamSynchronize(s));
    if (word != 0x01020304)
        fail("memset of pool memory read back %#x", word);
    CK(cuMemFreeAsync(p1, s));
    CK(cuStreamSynchronize(s));
    if (attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) != 0)
        fail("used memory after the free");
    if (attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) < (4u << 20))
        fail("the pool gave back memory below its release threshold");
    CK(cuMemPoolTrimTo(pool, 0));
    if (attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT) != 0)
        fail("cuMemPoolTrimTo(0) left %llu bytes reserved", (unsigned long long)attr(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT));
    cuuint64_t zero = 0;
    CK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH, &zero));
    if (attr(pool, CU_MEMPOOL_ATTR_USED_MEM_HIGH) != 0)
        fail("the used high-water mark did not reset");

    /* The device's current pool serves cuMemAllocAsync. */
    CK(cuDeviceSetMemPool(dev, pool));
    CK(cuMemAllocAsync(&p1, 1 << 20, s));
    if (attr(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT) < (1u << 20))
        fail("cuMemAllocAsync did not allocate from the device's current pool");
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
    CUmemAccess_flags af;
    CK(cuMemPoolGetAccess(&af, pool, &loc));
    if (af != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        fail("the pool's own device has access %d", (int)af);
    CK(cuMemFree(p1)); /* cuMemFree takes pool memory too */
    CK(cuDeviceSetMemPool(dev, def));
    CK(cuMemPoolDestroy(pool));

    /* cuMemGetInfo sees a large allocation. */
    size_t free0, total, free1;
    CK(cuMemGetInfo(&free0, &total));
    size_t tm;
    CK(cuDeviceTotalMem(&tm, dev));
    if (total != tm || free0 > total)
        fail("cuMemGetInfo: %zu free of %zu, device has %zu", free0, total, tm);
    CUdeviceptr big;
    CK(cuMemAllocAsync(&big, 256 << 20, s));
    CK(cuStreamSynchronize(s));
    CK(cuMemGetInfo(&free1, &total));
    if (free1 + (256u << 20) > free0)
        fail("cuMemGetInfo: free went from %zu to %zu over a 256 MiB allocation", free0, free1);
    CK(cuMemFreeAsync(big, s));
    CK(cuStreamSynchronize(s));

    CK(cuStreamDestroy(s));
    CK(cuModuleUnload(mod));
    free(ha);
    free(hc);
    printf("mempool: ok (%d elements; default and own pools, threshold, trim, current pool)\n", n);
    return 0;
}
