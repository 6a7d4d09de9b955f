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
    CK(cuMemAlloc(&ds, (size_t)n * 4));
    CK(cuMemAlloc(&dsum, 8));
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
    CK(cuMemFree(ds));
    CK(cuMemFree(dsum));
    CK(cuModuleUnload(mod));
    free(cpu);
    printf("RESULT %016llx\n", sum);
    return 0;
}
