/*
 * vmm: virtual memory management as PyTorch's expandable segments use it.
 *
 * Reserves a range, maps physical allocations into it back to back, and
 * uses the mapped range as one buffer: a copy and a kernel that cross from
 * one allocation into the next. Then: a second mapping of the same memory
 * sees the same bytes; a handle retained from an address is that memory;
 * the segment grows by unmapping its tail and mapping a larger allocation
 * there, keeping the data before it.
 *
 *   vmm
 */
#include "common.h"

#include <unistd.h>

int main(int argc, char **argv)
{
    init_args("vmm", &argc, argv);
    CUdevice dev = setup();
    CUmodule mod = load_module("basic");
    CUfunction scale = get_function(mod, "scale_offset");

    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t g = 0;
    CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    if (g == 0 || (g & (g - 1)) != 0)
        fail("granularity %zu is not a power of two", g);

    CUdeviceptr va;
    CK(cuMemAddressReserve(&va, 8 * g, 0, 0, 0));
    CUmemGenericAllocationHandle h1, h2;
    CK(cuMemCreate(&h1, g, &prop, 0));
    CK(cuMemCreate(&h2, 2 * g, &prop, 0));
    CK(cuMemMap(va, g, 0, h1, 0));
    CK(cuMemMap(va + g, 2 * g, 0, h2, 0));
    CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    CK(cuMemSetAccess(va, 3 * g, &acc, 1));
    unsigned long long fl = 0;
    CUmemLocation loc = {CU_MEM_LOCATION_TYPE_DEVICE, dev};
    CK(cuMemGetAccess(&fl, &loc, va + g + 4096));
    if (fl != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        fail("access flags %llu, want read-write", fl);

    /* One buffer of 1 MiB floats astride the boundary of the first and
     * second allocation. */
    int n = 1 << 18;
    size_t bytes = (size_t)n * 4;
    CUdeviceptr buf = va + g - bytes / 2;
    float *h = malloc(bytes), *out = malloc(bytes);
    if (!h || !out)
        fail("out of host memory");
    for (int i = 0; i < n; i++)
        h[i] = (float)(i % 4093);
    CK(cuMemcpyHtoD(buf, h, bytes));
    float k = 2.0f, off = -1.0f;
    void *ps[] = {&buf, &k, &off, &n};
    CK(cuLaunchKernel(scale, (unsigned)(n / 256), 1, 1, 256, 1, 1, 0, NULL, ps, NULL));
    CK(cuMemcpyDtoH(out, buf, bytes));
    for (int i = 0; i < n; i++)
        if (out[i] != 2 * h[i] - 1)
            fail("mapped memory: out[%d] = %g, want %g", i, out[i], 2 * h[i] - 1);

    /* A second mapping of the first allocation shows the same bytes. */
    CUdeviceptr va2;
    CK(cuMemAddressReserve(&va2, g, 0, 0, 0));
    CK(cuMemMap(va2, g, 0, h1, 0));
    CK(cuMemSetAccess(va2, g, &acc, 1));
    float a = 0, b = 0;
    CK(cuMemcpyDtoH(&a, va2 + g - bytes / 2 + 40, 4));
    if (a != out[10])
        fail("a second mapping reads %g where the first has %g", a, out[10]);
    b = 1234.5f;
    CK(cuMemcpyHtoD(va2 + 64, &b, 4));
    CK(cuMemcpyDtoH(&a, va + 64, 4));
    if (a != b)
        fail("a write through one mapping reads back %g through the other", a);

    /* A retained handle is the allocation at that address. */
    CUmemGenericAllocationHandle r;
    CK(cuMemRetainAllocationHandle(&r, (void *)(uintptr_t)(va + g + 100)));
    CUmemAllocationProp got;
    CK(cuMemGetAllocationPropertiesFromHandle(&got, r));
    if (got.type != CU_MEM_ALLOCATION_TYPE_PINNED || got.location.type != CU_MEM_LOCATION_TYPE_DEVICE || got.location.id != dev)
        fail("properties of the retained handle: type %d location %d/%d", (int)got.type, (int)got.location.type, got.location.id);
    CK(cuMemRelease(r));

    /* Grow: replace the tail (h2) by a larger allocation; the data in the
     * first allocation stays. */
    CK(cuMemUnmap(va + g, 2 * g));
    CK(cuMemRelease(h2));
    CUmemGenericAllocationHandle h3;
    CK(cuMemCreate(&h3, 4 * g, &prop, 0));
    CK(cuMemMap(va + g, 4 * g, 0, h3, 0));
    CK(cuMemSetAccess(va + g, 4 * g, &acc, 1));
    CK(cuMemsetD8(va + g, 0x5a, 4 * g));
    unsigned char tail = 0;
    CK(cuMemcpyDtoH(&tail, va + 5 * g - 1, 1));
    CK(cuMemcpyDtoH(&a, va + g - bytes / 2 + 40, 4));
    if (tail != 0x5a || a != out[10])
        fail("after growing: tail byte %#x, head value %g (want 0x5a, %g)", tail, a, out[10]);

    /* A shareable handle, as PyTorch's expandable segments ask for: an
     * allocation made exportable as a POSIX file descriptor, exported and
     * imported again in this process, maps the same memory; the imported
     * handle holds its own reference. */
    CUmemAllocationProp sprop = prop;
    sprop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle hs, hi;
    CK(cuMemCreate(&hs, g, &sprop, 0));
    int fd = -1;
    CK(cuMemExportToShareableHandle(&fd, hs, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    if (fd < 0)
        fail("exported file descriptor %d", fd);
    CK(cuMemImportFromShareableHandle(&hi, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CK(cuMemRelease(hs)); /* the imported handle keeps the memory */
    CUdeviceptr vs;
    CK(cuMemAddressReserve(&vs, g, 0, 0, 0));
    CK(cuMemMap(vs, g, 0, hi, 0));
    CK(cuMemSetAccess(vs, g, &acc, 1));
    CK(cuMemsetD8(vs, 0x3c, g));
    CK(cuMemcpyDtoH(&tail, vs + g - 1, 1));
    if (tail != 0x3c)
        fail("imported allocation reads %#x, want 0x3c", tail);
    CK(cuMemUnmap(vs, g));
    CK(cuMemRelease(hi));
    CK(cuMemAddressFree(vs, g));

    CK(cuMemUnmap(va2, g));
    CK(cuMemAddressFree(va2, g));
    CK(cuMemUnmap(va, g));
    CK(cuMemUnmap(va + g, 4 * g));
    CK(cuMemRelease(h1));
    CK(cuMemRelease(h3));
    CK(cuMemAddressFree(va, 8 * g));
    CK(cuModuleUnload(mod));
    free(h);
    free(out);
    printf("vmm: ok (granularity %zu; mappings back to back, aliases, retain, grow, shareable handles)\n", g);
    return 0;
}
