/*
 * kernelrun: runs the kernel corpus's cases through the CUDA driver API.
 *
 *   kernelrun CASEFILE PTXFILE OUTDIR [CASE...]
 *
 * For each case of CASEFILE (or only the named ones) it loads PTXFILE with
 * cuModuleLoadData, allocates and fills the buffers exactly as the Go package
 * github.com/gpuctl/gpuctl/e2e/kernels does (README.md, "Init patterns"),
 * sets module globals, launches, and writes every checked output as raw
 * little-endian bytes to OUTDIR/<case>.<name>.bin. A case that expects an
 * error records the error's name in OUTDIR/<case>.error instead.
 *
 * The same binary runs natively on a GPU (golden outputs) and through
 * libcuda.so.1 from gpuctl against any gpud. It uses only the driver API as
 * NVIDIA's cuda.h declares it, so it builds against either header:
 *
 *   gcc -O2 -std=c11 -ffp-contract=off -I INCLUDE kernelrun.c -L LIB -lcuda
 *
 * Exit status: 0 when every case ran (and every expected error happened),
 * 1 when a case failed, 2 for bad usage or a bad case file.
 */
#define _POSIX_C_SOURCE 200809L

#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "casefile.h"

/* ---- running ---------------------------------------------------------- */

static const char *err_name(CUresult r)
{
    const char *s = NULL;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s)
        return "CUDA_ERROR_UNKNOWN";
    return s;
}

static char *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return NULL;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!buf || fread(buf, 1, (size_t)n, fp) != (size_t)n) {
        free(buf);
        fclose(fp);
        return NULL;
    }
    buf[n] = '\0'; /* PTX text must be NUL-terminated for cuModuleLoadData */
    fclose(fp);
    *len = (size_t)n;
    return buf;
}

static int write_file(const char *dir, const char *cname, const char *bname, const char *ext, const void *data, size_t len)
{
    char path[4096];
    if (bname)
        snprintf(path, sizeof path, "%s/%s.%s.%s", dir, cname, bname, ext);
    else
        snprintf(path, sizeof path, "%s/%s.%s", dir, cname, ext);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, len, fp) != len || fclose(fp) != 0) {
        fprintf(stderr, "kernelrun: write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define CK(call)                                                                               \
    do {                                                                                       \
        CUresult r_ = (call);                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                              \
            fprintf(stderr, "FAIL %s: %s: %s\n", c->name, #call, err_name(r_));               \
            goto out;                                                                          \
        }                                                                                      \
    } while (0)

/*
 * run_case returns 0 on success, 1 on failure, and 3 when the case ended with
 * its expected (sticky) error, after which the context is unusable.
 */
static int run_case(struct kcase *c, const char *image, const char *outdir)
{
    int status = 1;
    CUmodule mod = NULL;
    CUfunction fn;
    void *args[MAX_PARAMS];
    unsigned char *host = NULL;
    CUresult launch_err = CUDA_SUCCESS;
    CUdeviceptr pdev[MAX_PARAMS] = {0}, gdev[MAX_GLOBALS] = {0};
    CK(cuModuleLoadData(&mod, image));
    CK(cuModuleGetFunction(&fn, mod, c->kernel));

    for (int i = 0; i < c->nglobals; i++) {
        struct buffer *g = &c->globals[i];
        size_t bytes = 0;
        CK(cuModuleGetGlobal(&gdev[i], &bytes, mod, g->name));
        if (bytes != g->count * type_size(g->type)) {
            fprintf(stderr, "FAIL %s: global %s has %zu bytes, the case declares %zu\n", c->name, g->name, bytes,
                    g->count * type_size(g->type));
            goto out;
        }
        if (g->init.kind != I_KEEP) {
            host = malloc(bytes);
            if (!host)
                goto out;
            generate(&g->init, g->type, g->count, host);
            CK(cuMemcpyHtoD(gdev[i], host, bytes));
            free(host);
            host = NULL;
        }
    }
    for (int i = 0; i < c->nparams; i++) {
        struct buffer *b = &c->params[i];
        if (b->count == 0) {
            /* little-endian: the low bytes of scalar are the value */
            args[i] = b->type == T_RAW ? (void *)b->raw : (void *)&b->scalar;
            continue;
        }
        size_t bytes = b->count * type_size(b->type);
        CK(cuMemAlloc(&pdev[i], bytes));
        host = malloc(bytes);
        if (!host)
            goto out;
        generate(&b->init, b->type, b->count, host);
        CK(cuMemcpyHtoD(pdev[i], host, bytes));
        free(host);
        host = NULL;
        args[i] = &pdev[i];
    }

    double t0 = now_ms();
    for (unsigned k = 0; k < c->launches && launch_err == CUDA_SUCCESS; k++)
        launch_err = cuLaunchKernel(fn, c->grid[0], c->grid[1], c->grid[2], c->block[0], c->block[1], c->block[2],
                                    c->shared, NULL, args, NULL);
    if (launch_err == CUDA_SUCCESS)
        launch_err = cuCtxSynchronize();
    double ms = now_ms() - t0;

    if (c->expect[0]) {
        const char *got = launch_err == CUDA_SUCCESS ? "CUDA_SUCCESS" : err_name(launch_err);
        char rec[MAX_NAME + 2];
        snprintf(rec, sizeof rec, "%s\n", got);
        if (write_file(outdir, c->name, NULL, "error", rec, strlen(rec)) != 0)
            goto out;
        if (strcmp(got, c->expect) != 0) {
            fprintf(stderr, "FAIL %s: launch ended with %s, want %s\n", c->name, got, c->expect);
            goto out;
        }
        printf("ok   %-32s %s as expected\n", c->name, got);
        return 3; /* the context is gone: no cleanup calls */
    }
    if (launch_err != CUDA_SUCCESS) {
        fprintf(stderr, "FAIL %s: launch of %s: %s\n", c->name, c->kernel, err_name(launch_err));
        goto out;
    }

    for (int i = 0; i < c->nparams + c->nglobals; i++) {
        int is_param = i < c->nparams;
        struct buffer *b = is_param ? &c->params[i] : &c->globals[i - c->nparams];
        if (!b->checked)
            continue;
        size_t bytes = b->count * type_size(b->type);
        host = malloc(bytes);
        if (!host)
            goto out;
        CK(cuMemcpyDtoH(host, is_param ? pdev[i] : gdev[i - c->nparams], bytes));
        if (write_file(outdir, c->name, b->name, "bin", host, bytes) != 0)
            goto out;
        free(host);
        host = NULL;
    }
    printf("ok   %-32s %10.3f ms (%u launch%s)\n", c->name, ms, c->launches, c->launches == 1 ? "" : "es");
    status = 0;
out:
    free(host);
    for (int i = 0; i < c->nparams; i++)
        if (pdev[i])
            cuMemFree(pdev[i]);
    if (mod)
        cuModuleUnload(mod);
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: kernelrun CASEFILE PTXFILE OUTDIR [CASE...]\n"
                        "  runs the cases of CASEFILE with the module in PTXFILE and writes\n"
                        "  OUTDIR/<case>.<buffer>.bin for every checked output\n");
        return 2;
    }
    int ncases;
    struct kcase *cases = parse_cases(argv[1], &ncases);
    size_t len;
    char *image = read_file(argv[2], &len);
    if (!image) {
        fprintf(stderr, "kernelrun: cannot read PTX file %s: %s\n", argv[2], strerror(errno));
        return 2;
    }
    const char *base = strrchr(argv[2], '/');
    base = base ? base + 1 : argv[2];

    /* Select the cases to run; unknown names are an error. */
    int *selected = calloc((size_t)ncases + 1, sizeof *selected);
    for (int a = 4; a < argc; a++) {
        int found = 0;
        for (int i = 0; i < ncases; i++)
            if (strcmp(cases[i].name, argv[a]) == 0)
                selected[i] = found = 1;
        if (!found) {
            fprintf(stderr, "kernelrun: no case %s in %s\n", argv[a], argv[1]);
            return 2;
        }
    }
    if (argc == 4)
        for (int i = 0; i < ncases; i++)
            selected[i] = 1;

    CUdevice dev;
    CUcontext ctx;
    CUresult r = cuInit(0);
    if (r == CUDA_SUCCESS)
        r = cuDeviceGet(&dev, 0);
    if (r == CUDA_SUCCESS)
        r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r == CUDA_SUCCESS)
        r = cuCtxSetCurrent(ctx);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "kernelrun: no CUDA device: %s\n", err_name(r));
        return 1;
    }

    int failed = 0, ran = 0;
    for (int i = 0; i < ncases; i++) {
        if (!selected[i])
            continue;
        struct kcase *c = &cases[i];
        size_t mlen = strlen(c->module);
        if (strncmp(base, c->module, mlen) != 0 || base[mlen] != '.')
            fprintf(stderr, "kernelrun: note: case %s is for module %s, running it with %s\n", c->name, c->module, base);
        int st = run_case(c, image, argv[3]);
        ran++;
        if (st == 1)
            failed++;
        if (st == 3)
            break; /* a sticky error: the parser keeps such cases last */
    }
    printf("kernelrun: %d case(s) run, %d failed\n", ran, failed);
    if (failed == 0)
        cuDevicePrimaryCtxRelease(dev);
    free(selected);
    free(image);
    free(cases);
    return failed ? 1 : 0;
}
