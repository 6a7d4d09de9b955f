/*
 * common.h: what the test programs share. Each program is one .c file that
 * includes this header and links only -lcuda (and -lm): it builds against
 * gpuctl's build/include/cuda.h or NVIDIA's, and runs natively on a GPU or
 * through gpuctl's libcuda.so.1 against any gpud.
 *
 * PTX modules come from the kernel corpus (e2e/kernels/ptx). The directory is
 * taken, in order, from "--ptx DIR" on the command line, the GPUCTL_PTX_DIR
 * environment variable, or e2e/kernels/ptx under the current directory. The
 * flavour is GPUCTL_PTX_TARGET (default sm_75, which every GPU from sm_75 on
 * and the emulator can run).
 */
#ifndef GPUCTL_CPROGS_COMMON_H
#define GPUCTL_CPROGS_COMMON_H

#define _GNU_SOURCE
#include <cuda.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *prog_name = "cprog";

static inline const char *cu_name(CUresult r)
{
    const char *s = NULL;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
        return "CUDA_ERROR_UNKNOWN";
    return s;
}

/* CK stops the program with one line naming the call and its error. */
#define CK(call)                                                                                      \
    do {                                                                                              \
        CUresult ck_r_ = (call);                                                                      \
        if (ck_r_ != CUDA_SUCCESS) {                                                                  \
            fprintf(stderr, "%s: FAIL: %s returned %s (%d) at line %d\n", prog_name, #call,            \
                    cu_name(ck_r_), (int)ck_r_, __LINE__);                                            \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

/* fail stops the program with one line saying what went wrong. */
static inline void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static inline void fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: FAIL: ", prog_name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static const char *ptx_dir;

/*
 * init_args sets the program name and removes "--ptx DIR" (or --ptx=DIR)
 * from argv, so that the programs' own arguments stay positional.
 */
static inline void init_args(const char *name, int *argc, char **argv)
{
    prog_name = name;
    int out = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--ptx") == 0 && i + 1 < *argc) {
            ptx_dir = argv[++i];
        } else if (strncmp(argv[i], "--ptx=", 6) == 0) {
            ptx_dir = argv[i] + 6;
        } else {
            argv[out++] = argv[i];
        }
    }
    *argc = out;
    argv[out] = NULL;
    if (!ptx_dir)
        ptx_dir = getenv("GPUCTL_PTX_DIR");
    if (!ptx_dir || !*ptx_dir)
        ptx_dir = "e2e/kernels/ptx";
}

/* setup initialises the driver and makes device 0's primary context current. */
static inline CUdevice setup(void)
{
    CUdevice dev;
    CUcontext ctx;
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    return dev;
}

/* load_module loads <ptx dir>/<stem>.<target>.ptx as PTX text. */
static inline CUmodule load_module(const char *stem)
{
    const char *target = getenv("GPUCTL_PTX_TARGET");
    if (!target || !*target)
        target = "sm_75";
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s.ptx", ptx_dir, stem, target);
    FILE *fp = fopen(path, "rb");
    if (!fp)
        fail("cannot open %s: %s (set GPUCTL_PTX_DIR or pass --ptx DIR)", path, strerror(errno));
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, fp) != (size_t)n)
        fail("cannot read %s", path);
    text[n] = '\0';
    fclose(fp);
    CUmodule mod;
    CK(cuModuleLoadData(&mod, text));
    free(text);
    return mod;
}

static inline CUfunction get_function(CUmodule mod, const char *name)
{
    CUfunction f;
    CK(cuModuleGetFunction(&f, mod, name));
    return f;
}

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* xorshift32 gives the programs deterministic inputs. */
static inline uint32_t xorshift32(uint32_t *x)
{
    uint32_t v = *x;
    v ^= v << 13;
    v ^= v >> 17;
    v ^= v << 5;
    *x = v;
    return v;
}

/* arg_long parses argv[i] as a positive number, or returns def when absent. */
static inline long arg_long(int argc, char **argv, int i, long def, const char *what)
{
    if (i >= argc)
        return def;
    char *end;
    long v = strtol(argv[i], &end, 10);
    if (*end != '\0' || v <= 0)
        fail("%s must be a positive integer, got \"%s\"", what, argv[i]);
    return v;
}

#endif
