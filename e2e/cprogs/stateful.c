/*
 * stateful: a long-running program whose result is identical whether or not
 * its session was checkpointed, restored or migrated while it ran.
 *
 * It holds MiB mebibytes of device memory, initialises them deterministically
 * (state_init), then runs STEPS iterations: a deterministic update of every
 * element (state_step), a 64-bit checksum computed on the device
 * (state_checksum) and copied back, one progress line, and a sleep of
 * SLEEP_MS milliseconds. The last line is "RESULT <checksum>".
 *
 *   stateful [MiB [STEPS [SLEEP_MS]]]      (default 16 MiB, 100 steps, 10 ms)
 *
 * When MiB*STEPS is at most 2048 (or STATEFUL_VERIFY=1), it also replays the
 * whole computation on the CPU and fails unless every checksum matches;
 * STATEFUL_VERIFY=0 turns that off.
 *
 * STATEFUL_MEMORY picks where the state lives: "plain" (cuMemAlloc, the
 * default), "pool" (cuMemAllocFromPoolAsync from a pool of its own), "vmm"
 * (2 MiB physical allocations mapped back to back into one reservation, as
 * PyTorch's expandable segments do) or "vmm+pool" (the state in VMM memory,
 * the checksum in pool memory). The result does not depend on it.
 * STATEFUL_LOAD=STEM also loads and unloads module STEM at every step.
 * STATEFUL_STACK=BYTES sets the context's per-thread stack limit
 * (CU_LIMIT_STACK_SIZE) before the first launch and fails any step that
 * reads back another value: a checkpoint may shrink the driver's
 * reservation while the session is paused, never what the program sees.
 */
#include "common.h"

#include <unistd.h>

static uint32_t mix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

static uint64_t cpu_step_and_sum(uint32_t *s, uint64_t n, uint32_t iter)
{
    uint64_t sum = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t x = s[i];
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x += iter * 0x9e3779b9u + (uint32_t)i;
        s[i] = x;
        sum += (uint64_t)x * (2 * i + 1);
    }
    return sum;
}

int main(int argc, char **argv)
{
    init_args("stateful", &argc, argv);
    long mib = arg_long(argc, argv, 1, 16, "MiB");
    long steps = arg_long(argc, argv, 2, 100, "STEPS");
    long sleep_ms = argc > 3 ? strtol(argv[3], NULL, 10) : 10;
    if (sleep_ms < 0)
        fail("SLEEP_MS must not be negative");
    const char *v = getenv("STATEFUL_VERIFY");
    int verify = v && *v ? strcmp(v, "0") != 0 : mib * steps <= 2048;

    setup();
    CUmodule mod = load_module("stateful");
    CUfunction init_fn = get_function(mod, "state_init");
    CUfunction step_fn = get_function(mod, "state_step");
    CUfunction sum_fn = get_function(mod, "state_checksum");

    unsigned long long n = (unsigned long long)mib << 18; /* 4-byte elements */
    const unsigned seed = 0x5eed1234u;
    CUdeviceptr ds, dsum;
    const char *where = getenv("STATEFUL_MEMORY");
    if (!where || !*where)
        where = "plain";
    int use_vmm = strcmp(where, "vmm") == 0 || strcmp(where, "vmm+pool") == 0;
    int use_pool = strcmp(where, "pool") == 0 || strcmp(where, "vmm+pool") == 0;
    if (!use_vmm && !use_pool && strcmp(where, "plain") != 0)
        fail("STATEFUL_MEMORY=%s: want plain, pool, vmm or vmm+pool", where);
    CUmemoryPool pool = NULL;
    if (use_pool) {
        CUmemPoolProps pp;
        memset(&pp, 0, sizeof pp);
        pp.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        pp.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        pp.location.id = 0;
        CK(cuMemPoolCreate(&pool, &pp));
    }
    size_t vmm_size = 0, chunk = 0;
    CUmemGenericAllocationHandle *chunks = NULL;
    if (use_vmm) {
        CUmemAllocationProp prop;
        memset(&prop, 0, sizeof prop);
        prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = 0;
        CK(cuMemGetAllocationGranularity(&chunk, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
        vmm_size = ((size_t)n * 4 + chunk - 1) / chunk * chunk;
        CK(cuMemAddressReserve(&ds, vmm_size, 0, 0, 0));
        chunks = calloc(vmm_size / chunk, sizeof *chunks);
        for (size_t i = 0; i < vmm_size / chunk; i++) {
            CK(cuMemCreate(&chunks[i], chunk, &prop, 0));
            CK(cuMemMap(ds + i * chunk, chunk, 0, chunks[i], 0));
        }
        CUmemAccessDesc acc = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CK(cuMemSetAccess(ds, vmm_size, &acc, 1));
    } else if (use_pool) {
        CK(cuMemAllocFromPoolAsync(&ds, (size_t)n * 4, pool, NULL));
    } else {
        CK(cuMemAlloc(&ds, (size_t)n * 4));
    }
    if (use_pool)
        CK(cuMemAllocFromPoolAsync(&dsum, 8, pool, NULL));
    else
        CK(cuMemAlloc(&dsum, 8));
    const char *reload = getenv("STATEFUL_LOAD");
    const char *stack_env = getenv("STATEFUL_STACK");
    size_t stack = stack_env && *stack_env ? (size_t)strtoull(stack_env, NULL, 10) : 0;
    if (stack)
        CK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack));
    unsigned block = 256;
    unsigned grid = (unsigned)((n + block - 1) / block < 4096 ? (n + block - 1) / block : 4096);

    uint32_t *cpu = NULL;
    if (verify) {
        cpu = malloc((size_t)n * 4);
        if (!cpu)
            fail("out of host memory for the CPU replay (set STATEFUL_VERIFY=0)");
        for (uint64_t i = 0; i < n; i++)
            cpu[i] = mix32((uint32_t)i ^ seed);
    }

    printf("stateful: %ld MiB, %ld steps, %ld ms sleep%s\n", mib, steps, sleep_ms, verify ? ", CPU replay on" : "");
    fflush(stdout);
    void *pi[] = {&ds, &n, (void *)&seed};
    CK(cuLaunchKernel(init_fn, grid, 1, 1, block, 1, 1, 0, NULL, pi, NULL));

    unsigned long long sum = 0;
    for (long k = 1; k <= steps; k++) {
        unsigned iter = (unsigned)k;
        void *ps[] = {&ds, &n, &iter};
        CK(cuLaunchKernel(step_fn, grid, 1, 1, block, 1, 1, 0, NULL, ps, NULL));
        CK(cuMemsetD32(dsum, 0, 2));
        void *pc[] = {&ds, &n, &dsum};
        CK(cuLaunchKernel(sum_fn, grid, 1, 1, block, 1, 1, 0, NULL, pc, NULL));
        CK(cuMemcpyDtoH(&sum, dsum, sizeof sum));
        if (reload && *reload)
            CK(cuModuleUnload(load_module(reload)));
        if (stack) {
            size_t got = 0;
            CK(cuCtxGetLimit(&got, CU_LIMIT_STACK_SIZE));
            if (got != stack)
                fail("step %ld: the stack limit reads %zu bytes, the program set %zu", k, got, stack);
        }
        if (verify) {
            uint64_t want = cpu_step_and_sum(cpu, n, iter);
            if (sum != want)
                fail("step %ld: device checksum %016llx, CPU %016llx", k, sum, (unsigned long long)want);
        }
        printf("step %ld/%ld checksum %016llx\n", k, steps, sum);
        fflush(stdout);
        if (sleep_ms > 0)
            usleep((useconds_t)sleep_ms * 1000);
    }
    if (use_vmm) {
        CK(cuMemUnmap(ds, vmm_size));
        for (size_t i = 0; i < vmm_size / chunk; i++)
            CK(cuMemRelease(chunks[i]));
        CK(cuMemAddressFree(ds, vmm_size));
        free(chunks);
    } else if (use_pool) {
        CK(cuMemFreeAsync(ds, NULL));
    } else {
        CK(cuMemFree(ds));
    }
    if (use_pool) {
        CK(cuMemFreeAsync(dsum, NULL));
        CK(cuCtxSynchronize());
        CK(cuMemPoolDestroy(pool));
    } else {
        CK(cuMemFree(dsum));
    }
    CK(cuModuleUnload(mod));
    free(cpu);
    printf("RESULT %016llx\n", sum);
    return 0;
}
