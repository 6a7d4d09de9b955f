/*
 * casegen: writes the generated inputs of every case in a case file, without
 * CUDA, so that tests can compare the C generator with the Go one.
 *
 *   casegen CASEFILE OUTDIR
 *
 * writes OUTDIR/<case>.<name>.in for every buffer parameter and every global
 * that is not "keep", and OUTDIR/<case>.<name>.scalar holding a scalar
 * parameter's little-endian bytes.
 *
 *   gcc -O2 -std=c11 -ffp-contract=off casegen.c -o casegen
 */
#define _POSIX_C_SOURCE 200809L
#include "casefile.h"

static int dump(const char *dir, const char *cname, const char *bname, const char *ext, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s.%s", dir, cname, bname, ext);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(p, 1, n, fp) != n || fclose(fp) != 0) {
        fprintf(stderr, "casegen: write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: casegen CASEFILE OUTDIR\n");
        return 2;
    }
    int n;
    struct kcase *cases = parse_cases(argv[1], &n);
    for (int i = 0; i < n; i++) {
        struct kcase *c = &cases[i];
        for (int j = 0; j < c->nparams + c->nglobals; j++) {
            struct buffer *b = j < c->nparams ? &c->params[j] : &c->globals[j - c->nparams];
            size_t size = type_size(b->type);
            if (b->count == 0) { /* a scalar parameter */
                unsigned char v[8];
                store(v, b->type, b->scalar);
                if (dump(argv[2], c->name, b->name, "scalar", b->type == T_RAW ? b->raw : v,
                         b->type == T_RAW ? b->rawlen : size))
                    return 1;
                continue;
            }
            if (b->init.kind == I_KEEP)
                continue;
            unsigned char *p = malloc(b->count * size);
            if (!p)
                return 1;
            generate(&b->init, b->type, b->count, p);
            if (dump(argv[2], c->name, b->name, "in", p, b->count * size))
                return 1;
            free(p);
        }
    }
    free(cases);
    return 0;
}
