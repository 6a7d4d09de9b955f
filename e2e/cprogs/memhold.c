/*
 * memhold: allocates, frees and checks device memory on command, so that a
 * test can hold memory in one session while another allocates (device
 * memory quotas). It reads one command per line on stdin and answers each
 * with one line on stdout:
 *
 *   alloc NAME MIB   "alloc NAME ok" or "alloc NAME <CUDA error name>"
 *   check NAME       fills NAME with a pattern on the device, reads it back:
 *                    "check NAME ok" or a FAIL line (and exit 1)
 *   free NAME        "free NAME ok" (or the error's name)
 *   info             "info FREE TOTAL", in bytes (cuMemGetInfo)
 *   quit             "bye", and exit 0
 *
 * It needs no kernels. An allocation that fails leaves the context usable:
 * that is what the checks after one prove.
 */
#include "common.h"

#define MAX_BUFS 16

struct buf {
    char name[32];
    CUdeviceptr p;
    size_t n;
};

static struct buf bufs[MAX_BUFS];

static struct buf *find(const char *name)
{
    for (int i = 0; i < MAX_BUFS; i++)
        if (bufs[i].p && strcmp(bufs[i].name, name) == 0)
            return &bufs[i];
    return NULL;
}

static void check(struct buf *b)
{
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

int main(int argc, char **argv)
{
    init_args("memhold", &argc, argv);
    setvbuf(stdout, NULL, _IOLBF, 0);
    setup();
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
        } else if (strcmp(cmd, "alloc") == 0 && n == 3 && mib > 0) {
            struct buf *slot = NULL;
            for (int i = 0; i < MAX_BUFS && !slot; i++)
                if (!bufs[i].p)
                    slot = &bufs[i];
            if (!slot || find(name))
                fail("alloc %s: no free slot, or the name is taken", name);
            CUdeviceptr p;
            CUresult r = cuMemAlloc(&p, (size_t)mib << 20);
            if (r != CUDA_SUCCESS) {
                printf("alloc %s %s\n", name, cu_name(r));
                continue;
            }
            snprintf(slot->name, sizeof slot->name, "%s", name);
            slot->p = p;
            slot->n = (size_t)mib << 20;
            printf("alloc %s ok\n", name);
        } else if (strcmp(cmd, "check") == 0 && n >= 2) {
            struct buf *b = find(name);
            if (!b)
                fail("check %s: no such buffer", name);
            check(b);
        } else if (strcmp(cmd, "free") == 0 && n >= 2) {
            struct buf *b = find(name);
            if (!b)
                fail("free %s: no such buffer", name);
            CUresult r = cuMemFree(b->p);
            b->p = 0;
            printf("free %s %s\n", name, r == CUDA_SUCCESS ? "ok" : cu_name(r));
        } else {
            fail("unknown command: %s", line);
        }
    }
    return 0;
}
