/*
 * memhold: allocates, frees and checks device memory on command, so that a
 * test can hold memory in one session while another allocates (device
 * memory quotas). It reads one command per line on stdin and answers each
 * with one line on stdout:
 *
 *   alloc NAME MIB   "alloc NAME ok" or "alloc NAME <CUDA error name>"
 *   pool NAME MIB    the same through cuMemAllocAsync (the device's pool)
 *   vmm NAME MIB     the same through cuMemCreate (a physical allocation,
 *                    held by its handle and not mapped)
 *   check NAME       fills NAME (alloc or pool) with a pattern on the
 *                    device, reads it back: "check NAME ok" or a FAIL line
 *                    (and exit 1)
 *   free NAME        "free NAME ok" (or the error's name): cuMemFree,
 *                    cuMemFreeAsync and a synchronisation, or cuMemRelease
 *   info             "info FREE TOTAL", in bytes (cuMemGetInfo)
 *   quit             "bye", and exit 0
 *
 * It needs no kernels. An allocation that fails leaves the context usable:
 * that is what the checks after one prove.
 */
#include "common.h"

#define MAX_BUFS 16

enum kind { NONE, ALLOC, POOL, VMM };

struct buf {
    enum kind kind;
    char name[32];
    CUdeviceptr p;                  /* ALLOC, POOL */
    CUmemGenericAllocationHandle h; /* VMM */
    size_t n;
};

static struct buf bufs[MAX_BUFS];

static struct buf *find(const char *name)
{
    for (int i = 0; i < MAX_BUFS; i++)
        if (bufs[i].kind != NONE && strcmp(bufs[i].name, name) == 0)
            return &bufs[i];
    return NULL;
}

static void check(struct buf *b)
{
    if (b->kind == VMM)
        fail("check %s: a VMM allocation is not mapped", b->name);
    size_t words = b->n / 4;
    uint32_t pattern = 0x5eed0000u ^ (uint32_t)b->n;
    CK(cuMemsetD32(b->p, pattern, words));
    uint32_t *host = malloc(b->n);
    if (!host)
        fail("out of host memory");
    CK(cuMemcpyDtoH(host, b->p, b->n));
    for (size_t i = 0; i < words; i++)
        if (host[i] != pattern)
            fail("check %s: word %zu is %08x, want %08x", b->name, i, host[i], pattern);
    free(host);
    printf("check %s ok\n", b->name);
}

/* hold allocates bytes the way kind does. */
static CUresult hold(CUdevice dev, enum kind kind, size_t bytes, CUdeviceptr *p, CUmemGenericAllocationHandle *h)
{
    switch (kind) {
    case ALLOC:
        return cuMemAlloc(p, bytes);
    case POOL:
        return cuMemAllocAsync(p, bytes, 0);
    default: {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = dev;
        return cuMemCreate(h, bytes, &prop, 0);
    }
    }
}

/* release frees b the way it was allocated. */
static CUresult release(struct buf *b)
{
    switch (b->kind) {
    case ALLOC:
        return cuMemFree(b->p);
    case POOL: {
        CUresult r = cuMemFreeAsync(b->p, 0);
        return r != CUDA_SUCCESS ? r : cuStreamSynchronize(0);
    }
    default:
        return cuMemRelease(b->h);
    }
}

int main(int argc, char **argv)
{
    init_args("memhold", &argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    CUdevice dev = setup();
    char line[256], cmd[16], name[32];
    long mib;
    while (fgets(line, sizeof line, stdin)) {
        int n = sscanf(line, "%15s %31s %ld", cmd, name, &mib);
        if (n < 1)
            continue;
        if (strcmp(cmd, "quit") == 0) {
            printf("bye\n");
            return 0;
        } else if (strcmp(cmd, "info") == 0) {
            size_t free_b, total_b;
            CK(cuMemGetInfo(&free_b, &total_b));
            printf("info %zu %zu\n", free_b, total_b);
        } else if ((strcmp(cmd, "alloc") == 0 || strcmp(cmd, "pool") == 0 || strcmp(cmd, "vmm") == 0) && n == 3 && mib > 0) {
            enum kind kind = cmd[0] == 'a' ? ALLOC : cmd[0] == 'p' ? POOL : VMM;
            struct buf *slot = NULL;
            for (int i = 0; i < MAX_BUFS && !slot; i++)
                if (bufs[i].kind == NONE)
                    slot = &bufs[i];
            if (!slot || find(name))
                fail("%s %s: no free slot, or the name is taken", cmd, name);
            CUdeviceptr p = 0;
            CUmemGenericAllocationHandle h = 0;
            CUresult r = hold(dev, kind, (size_t)mib << 20, &p, &h);
            if (r != CUDA_SUCCESS) {
                printf("%s %s %s\n", cmd, name, cu_name(r));
                continue;
            }
            snprintf(slot->name, sizeof slot->name, "%s", name);
            slot->kind = kind;
            slot->p = p;
            slot->h = h;
            slot->n = (size_t)mib << 20;
            printf("%s %s ok\n", cmd, name);
        } else if (strcmp(cmd, "check") == 0 && n >= 2) {
            struct buf *b = find(name);
            if (!b)
                fail("check %s: no such buffer", name);
            check(b);
        } else if (strcmp(cmd, "free") == 0 && n >= 2) {
            struct buf *b = find(name);
            if (!b)
                fail("free %s: no such buffer", name);
            CUresult r = release(b);
            b->kind = NONE;
            printf("free %s %s\n", name, r == CUDA_SUCCESS ? "ok" : cu_name(r));
        } else {
            fail("unknown command: %s", line);
        }
    }
    return 0;
}
