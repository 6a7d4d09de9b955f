/*
 * casefile.h: the case-file parser and the input generator shared by
 * kernelrun.c and casegen.c. It follows README.md ("Case files", "Init
 * patterns") and the Go package github.com/gpuctl/gpuctl/e2e/kernels byte for
 * byte; casegen and the Go tests keep the two in step.
 *
 * Header-only (static functions): include it from exactly one C file per
 * program. Needs no CUDA.
 */
#ifndef GPUCTL_CASEFILE_H
#define GPUCTL_CASEFILE_H

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Inputs must be bit-identical to the Go generator's: no fused multiply-add. */
#pragma GCC optimize("fp-contract=off")

#define MAX_PARAMS  32
#define MAX_GLOBALS 16
#define MAX_CHECKS  32
#define MAX_NAME    64
#define MAX_LIST    256
#define MAX_BUFFER_BYTES (1 << 30) /* the Go package's limit too */
#define MAX_RAW_BYTES 4096          /* a struct passed by value */

enum type { T_NONE, T_I8, T_U8, T_I16, T_U16, T_I32, T_U32, T_I64, T_U64, T_F32, T_F64, T_RAW };
static const char *const type_names[] = {"", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f32", "f64", "raw"};

enum init_kind { I_ZERO, I_CONST, I_SEQ, I_LIST, I_RAND, I_RANDI, I_RANDF, I_KEEP };

struct init {
    enum init_kind kind;
    uint32_t seed;
    int nargs;
    char args[MAX_LIST][48]; /* const: 1, seq: 2, randi/randf: 2, list: n */
};

struct buffer {
    char name[MAX_NAME];
    enum type type;
    size_t count;
    struct init init;
    int is_global;
    int is_param;
    int checked;
    uint64_t scalar; /* scalars: the value's bit pattern */
    size_t rawlen;   /* raw scalars (structs by value): their bytes */
    unsigned char raw[MAX_RAW_BYTES];
};

struct kcase {
    char name[MAX_NAME];
    char module[MAX_NAME];
    char kernel[MAX_NAME];
    unsigned grid[3], block[3];
    unsigned shared;
    unsigned launches;
    char expect[MAX_NAME];
    int nparams, nglobals;
    struct buffer params[MAX_PARAMS];   /* in kernel parameter order */
    struct buffer globals[MAX_GLOBALS];
    int line;
};

static const char *case_file;
static int line_no;

static void die_parse(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "kernelrun: %s:%d: ", case_file, line_no);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static size_t type_size(enum type t)
{
    switch (t) {
    case T_I8: case T_U8: return 1;
    case T_I16: case T_U16: return 2;
    case T_I32: case T_U32: case T_F32: return 4;
    default: return 8;
    }
}

static int is_float(enum type t) { return t == T_F32 || t == T_F64; }

static enum type parse_type(const char *s)
{
    for (int t = T_I8; t <= T_RAW; t++)
        if (strcmp(s, type_names[t]) == 0)
            return (enum type)t;
    die_parse("unknown type \"%s\" (want i8 u8 i16 u16 i32 u32 i64 u64 f32 f64, or raw for a struct scalar)", s);
    return T_NONE;
}

/* parse_int accepts [-]decimal or [-]0xHEX and returns the two's-complement bits. */
static uint64_t parse_int(const char *s)
{
    int neg = *s == '-';
    const char *body = s + neg;
    char *end;
    uint64_t v;
    errno = 0;
    if (body[0] == '0' && (body[1] == 'x' || body[1] == 'X')) {
        if (body[2] == '\0' || body[2] == '+' || body[2] == '-' || body[2] == ' ')
            die_parse("\"%s\" is not a decimal or 0x hex integer", s);
        v = strtoull(body + 2, &end, 16);
    }
    else if (body[0] == '0' && body[1] != '\0')
        die_parse("\"%s\": leading zero (write decimal or 0x hex)", s);
    else
        v = strtoull(body, &end, 10);
    if (*body == '\0' || *end != '\0' || errno == ERANGE || body[0] == '+' || body[0] == '-')
        die_parse("\"%s\" is not a decimal or 0x hex integer", s);
    return neg ? (uint64_t)0 - v : v;
}

static uint64_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

/* parse_value turns a literal into the bit pattern of a value of type t. */
static uint64_t parse_value(enum type t, const char *s)
{
    if (is_float(t)) {
        char *end;
        if (strcasecmp(s, "nan") == 0)
            return t == T_F32 ? 0x7fc00000u : 0x7ff8000000000000ull;
        if (t == T_F32) {
            float f = strtof(s, &end);
            if (*s == '\0' || *end != '\0')
                die_parse("bad f32 literal \"%s\"", s);
            return f32_bits(f);
        }
        double d = strtod(s, &end);
        if (*s == '\0' || *end != '\0')
            die_parse("bad f64 literal \"%s\"", s);
        return f64_bits(d);
    }
    uint64_t v = parse_int(s);
    size_t n = type_size(t);
    return n < 8 ? v & ((1ull << (8 * n)) - 1) : v;
}

static double parse_double(const char *s)
{
    char *end;
    double d = strtod(s, &end);
    if (*s == '\0' || *end != '\0')
        die_parse("\"%s\" is not a number", s);
    return d;
}

static void copy_arg(char *dst, const char *src)
{
    if (strlen(src) >= 48)
        die_parse("value \"%s\" is too long", src);
    strcpy(dst, src);
}

static struct init parse_init(const char *s, enum type t, int is_global)
{
    struct init in;
    memset(&in, 0, sizeof in);
    char buf[4096];
    if (strlen(s) >= sizeof buf)
        die_parse("init pattern too long");
    strcpy(buf, s);
    char *rest = strchr(buf, ':');
    if (rest)
        *rest++ = '\0';
    const char *name = buf;
    char *parts[4];
    int nparts = 0;
    if (rest && strcmp(name, "list") != 0) {
        char *save, *p = strtok_r(rest, ":", &save);
        while (p && nparts < 4) {
            parts[nparts++] = p;
            p = strtok_r(NULL, ":", &save);
        }
        if (p)
            die_parse("init \"%s\": too many arguments", s);
    }
    if (strcmp(name, "zero") == 0 && !rest) {
        in.kind = I_ZERO;
    } else if (strcmp(name, "keep") == 0 && !rest) {
        if (!is_global)
            die_parse("keep is for globals only: a buffer has no initializer of its own");
        in.kind = I_KEEP;
    } else if (strcmp(name, "const") == 0 && nparts == 1) {
        in.kind = I_CONST;
        in.nargs = 1;
        copy_arg(in.args[0], parts[0]);
        (void)parse_value(t, parts[0]);
    } else if (strcmp(name, "seq") == 0 && (nparts == 2 || !rest)) {
        in.kind = I_SEQ;
        in.nargs = 2;
        copy_arg(in.args[0], rest ? parts[0] : "0");
        copy_arg(in.args[1], rest ? parts[1] : "1");
    } else if (strcmp(name, "list") == 0 && rest && *rest) {
        in.kind = I_LIST;
        char *save, *p = strtok_r(rest, ",", &save);
        while (p) {
            if (in.nargs == MAX_LIST)
                die_parse("list has more than %d values", MAX_LIST);
            copy_arg(in.args[in.nargs++], p);
            (void)parse_value(t, p);
            p = strtok_r(NULL, ",", &save);
        }
    } else if ((strcmp(name, "rand") == 0 && nparts == 1) ||
               ((strcmp(name, "randi") == 0 || strcmp(name, "randf") == 0) && nparts == 3)) {
        char *end;
        errno = 0;
        unsigned long long seed = strtoull(parts[0], &end, 10);
        if (*end != '\0' || seed == 0 || seed > 0xffffffffull || errno)
            die_parse("init \"%s\": seed must be a decimal integer in 1..4294967295", s);
        in.seed = (uint32_t)seed;
        if (name[4] == '\0') {
            in.kind = I_RAND;
            if (is_float(t))
                die_parse("init \"%s\": rand gives raw bits and is for integer types; use randf", s);
        } else {
            in.kind = name[4] == 'i' ? I_RANDI : I_RANDF;
            in.nargs = 2;
            copy_arg(in.args[0], parts[1]);
            copy_arg(in.args[1], parts[2]);
            if (in.kind == I_RANDF && !is_float(t))
                die_parse("init \"%s\": randf is for f32/f64; use randi", s);
            if (in.kind == I_RANDI) {
                int64_t lo = (int64_t)parse_int(parts[1]), hi = (int64_t)parse_int(parts[2]);
                if (lo > hi || (uint64_t)(hi - lo) > 0xffffffffull)
                    die_parse("init \"%s\": need LO <= HI and HI-LO < 2^32", s);
            } else if (!(parse_double(parts[1]) <= parse_double(parts[2]))) {
                die_parse("init \"%s\": need LO <= HI", s);
            }
        }
    } else {
        die_parse("unknown init pattern \"%s\"", s);
    }
    return in;
}

/* Marsaglia's xorshift32 (13, 17, 5); the first value is one step past the seed. */
static uint32_t xorshift32(uint32_t *x)
{
    uint32_t v = *x;
    v ^= v << 13;
    v ^= v >> 17;
    v ^= v << 5;
    *x = v;
    return v;
}

static void store(unsigned char *p, enum type t, uint64_t bits)
{
    for (size_t k = 0; k < type_size(t); k++)
        p[k] = (unsigned char)(bits >> (8 * k));
}

static uint64_t float_bits(enum type t, double v)
{
    return t == T_F32 ? f32_bits((float)v) : f64_bits(v);
}

/* generate fills count elements of type t per the init pattern. */
static void generate(const struct init *in, enum type t, size_t count, unsigned char *b)
{
    size_t size = type_size(t);
    uint32_t rng = in->seed;
    memset(b, 0, count * size);
    switch (in->kind) {
    case I_ZERO:
    case I_KEEP:
        break;
    case I_CONST: {
        uint64_t v = parse_value(t, in->args[0]);
        for (size_t i = 0; i < count; i++)
            store(b + i * size, t, v);
        break;
    }
    case I_LIST:
        for (size_t i = 0; i < count; i++)
            store(b + i * size, t, parse_value(t, in->args[i % (size_t)in->nargs]));
        break;
    case I_SEQ:
        if (is_float(t)) {
            double start = parse_double(in->args[0]), step = parse_double(in->args[1]);
            for (size_t i = 0; i < count; i++) {
                double p = (double)i * step;
                store(b + i * size, t, float_bits(t, start + p));
            }
        } else {
            uint64_t start = parse_int(in->args[0]), step = parse_int(in->args[1]);
            for (size_t i = 0; i < count; i++)
                store(b + i * size, t, start + (uint64_t)i * step);
        }
        break;
    case I_RAND:
        for (size_t i = 0; i < count; i++) {
            uint64_t v = xorshift32(&rng);
            if (size == 8)
                v |= (uint64_t)xorshift32(&rng) << 32;
            store(b + i * size, t, v);
        }
        break;
    case I_RANDI: {
        uint64_t lo = parse_int(in->args[0]), hi = parse_int(in->args[1]);
        uint64_t span = hi - lo + 1;
        for (size_t i = 0; i < count; i++) {
            uint64_t d = xorshift32(&rng);
            if (span != (1ull << 32))
                d %= span;
            int64_t v = (int64_t)(lo + d);
            uint64_t bits = t == T_F32 ? f32_bits((float)v) : t == T_F64 ? f64_bits((double)v) : (uint64_t)v;
            store(b + i * size, t, bits);
        }
        break;
    }
    case I_RANDF: {
        double lo = parse_double(in->args[0]), hi = parse_double(in->args[1]);
        double w = hi - lo;
        for (size_t i = 0; i < count; i++) {
            double u;
            if (t == T_F32) {
                u = (double)(xorshift32(&rng) >> 8) * 0x1p-24;
            } else {
                uint32_t a = xorshift32(&rng) >> 5;
                uint32_t c = xorshift32(&rng) >> 6;
                u = ((double)a * 0x1p26 + (double)c) * 0x1p-53;
            }
            double p = u * w;
            store(b + i * size, t, float_bits(t, lo + p));
        }
        break;
    }
    }
}

static int valid_name(const char *s)
{
    if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z')))
        return 0;
    for (; *s; s++)
        if (!(*s == '_' || (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
            return 0;
    return 1;
}

static void set_name(char *dst, const char *src)
{
    if (!valid_name(src) || strlen(src) >= MAX_NAME)
        die_parse("bad name \"%s\"", src);
    strcpy(dst, src);
}

static struct buffer *find_buffer(struct kcase *c, const char *name)
{
    for (int i = 0; i < c->nparams; i++)
        if (strcmp(c->params[i].name, name) == 0)
            return &c->params[i];
    for (int i = 0; i < c->nglobals; i++)
        if (strcmp(c->globals[i].name, name) == 0)
            return &c->globals[i];
    return NULL;
}

static void parse_dims(unsigned d[3], char **f, int n)
{
    d[0] = d[1] = d[2] = 1;
    if (n < 2 || n > 4)
        die_parse("%s takes 1 to 3 sizes", f[0]);
    for (int k = 1; k < n; k++) {
        char *end;
        unsigned long v = strtoul(f[k], &end, 10);
        if (*end || v == 0 || v > 0xffffffffUL)
            die_parse("%s: \"%s\" is not a positive integer", f[0], f[k]);
        d[k - 1] = (unsigned)v;
    }
}

static int check_is_valid(const char *s, enum type t)
{
    if (strcmp(s, "exact") == 0)
        return 1;
    if (strncmp(s, "ulp:", 4) == 0 || strncmp(s, "tol:", 4) == 0)
        return is_float(t);
    return 0;
}

/* directive applies one line of a case. It returns 1 at "end". */
static int directive(struct kcase *c, char **f, int n)
{
    if ((strcmp(f[0], "module") == 0 || strcmp(f[0], "kernel") == 0) && n == 2) {
        set_name(f[0][0] == 'm' ? c->module : c->kernel, f[1]);
    } else if (strcmp(f[0], "grid") == 0) {
        parse_dims(c->grid, f, n);
    } else if (strcmp(f[0], "block") == 0) {
        parse_dims(c->block, f, n);
    } else if ((strcmp(f[0], "shared") == 0 || strcmp(f[0], "launches") == 0) && n == 2) {
        char *end;
        unsigned long v = strtoul(f[1], &end, 10);
        if (*end || f[1][0] == '-')
            die_parse("%s: \"%s\" is not a non-negative integer", f[0], f[1]);
        if (f[0][0] == 's')
            c->shared = (unsigned)v;
        else
            c->launches = (unsigned)v;
    } else if ((strcmp(f[0], "buf") == 0 || strcmp(f[0], "global") == 0) && n == 5) {
        int global = f[0][0] == 'g';
        if (find_buffer(c, f[1]))
            die_parse("name \"%s\" used twice", f[1]);
        if (global ? c->nglobals == MAX_GLOBALS : c->nparams == MAX_PARAMS)
            die_parse("too many %s", global ? "globals" : "parameters");
        struct buffer *b = global ? &c->globals[c->nglobals++] : &c->params[c->nparams++];
        memset(b, 0, sizeof *b);
        set_name(b->name, f[1]);
        b->type = parse_type(f[2]);
        if (b->type == T_RAW)
            die_parse("raw is for scalar parameters (structs by value), not buffers");
        char *end;
        unsigned long long cnt = strtoull(f[3], &end, 10);
        if (*end || cnt == 0 || cnt > 0x7fffffffull)
            die_parse("count \"%s\" is not a positive integer", f[3]);
        b->count = (size_t)cnt;
        if (b->count * type_size(b->type) > MAX_BUFFER_BYTES)
            die_parse("%s %s is %zu bytes; a case buffer holds at most %d", f[0], b->name, b->count * type_size(b->type),
                      MAX_BUFFER_BYTES);
        b->is_global = global;
        b->is_param = !global;
        b->init = parse_init(f[4], b->type, global);
    } else if (strcmp(f[0], "scalar") == 0 && n == 4) {
        if (find_buffer(c, f[1]))
            die_parse("name \"%s\" used twice", f[1]);
        if (c->nparams == MAX_PARAMS)
            die_parse("too many parameters");
        struct buffer *b = &c->params[c->nparams++];
        memset(b, 0, sizeof *b);
        set_name(b->name, f[1]);
        b->type = parse_type(f[2]);
        if (b->type == T_RAW) {
            size_t len = strlen(f[3]);
            if (len == 0 || len % 2 != 0 || len / 2 > MAX_RAW_BYTES)
                die_parse("raw scalar \"%s\": want 1 to %d bytes as an even number of hex digits", f[1], MAX_RAW_BYTES);
            for (size_t k = 0; k < len / 2; k++) {
                unsigned v;
                char pair[3] = {f[3][2 * k], f[3][2 * k + 1], 0};
                char *end;
                v = (unsigned)strtoul(pair, &end, 16);
                if (*end != '\0' || pair[0] == '+' || pair[0] == '-' || pair[0] == ' ')
                    die_parse("raw scalar \"%s\": want 1 to %d bytes as an even number of hex digits", f[1], MAX_RAW_BYTES);
                b->raw[k] = (unsigned char)v;
            }
            b->rawlen = len / 2;
        } else {
            b->scalar = parse_value(b->type, f[3]);
        }
    } else if (strcmp(f[0], "check") == 0 && n == 3) {
        struct buffer *b = find_buffer(c, f[1]);
        if (!b || (!b->is_global && b->count == 0))
            die_parse("check \"%s\": no buffer or global of that name (declare it first)", f[1]);
        if (!check_is_valid(f[2], b->type))
            die_parse("check \"%s\": bad comparison \"%s\"", f[1], f[2]);
        b->checked = 1;
    } else if (strcmp(f[0], "expect") == 0 && n == 2 && strncmp(f[1], "CUDA_ERROR_", 11) == 0) {
        set_name(c->expect, f[1]);
    } else if (strcmp(f[0], "tags") == 0) {
        /* informational for the runners */
    } else if (strcmp(f[0], "end") == 0 && n == 1) {
        if (!c->module[0] || !c->kernel[0])
            die_parse("case %s: needs module and kernel", c->name);
        if (c->launches == 0)
            die_parse("case %s: launches must be at least 1", c->name);
        if ((unsigned long long)c->block[0] * c->block[1] * c->block[2] > 1024)
            die_parse("case %s: a block has at most 1024 threads", c->name);
        return 1;
    } else {
        die_parse("bad directive \"%s\" (or wrong number of fields)", f[0]);
    }
    return 0;
}

static struct kcase *parse_cases(const char *path, int *ncases)
{
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "kernelrun: cannot open case file %s: %s\n", path, strerror(errno));
        exit(2);
    }
    case_file = path;
    struct kcase *cases = NULL, *cur = NULL;
    int n = 0;
    char line[16384];
    while (fgets(line, sizeof line, fp)) {
        line_no++;
        if (!strchr(line, '\n') && !feof(fp))
            die_parse("line too long");
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *f[16];
        int nf = 0;
        char *save, *tok = strtok_r(line, " \t\r\n", &save);
        while (tok && nf < 16) {
            f[nf++] = tok;
            tok = strtok_r(NULL, " \t\r\n", &save);
        }
        if (nf == 0)
            continue;
        if (!cur) {
            if (strcmp(f[0], "case") != 0 || nf != 2)
                die_parse("expected 'case NAME'");
            if (n > 0 && cases[n - 1].expect[0])
                die_parse("case %s expects an error that leaves the context unusable, so it must be the last case of its file", cases[n - 1].name);
            cases = realloc(cases, sizeof *cases * (size_t)(n + 1));
            if (!cases) {
                fprintf(stderr, "kernelrun: out of memory\n");
                exit(2);
            }
            cur = &cases[n];
            memset(cur, 0, sizeof *cur);
            set_name(cur->name, f[1]);
            cur->grid[0] = cur->grid[1] = cur->grid[2] = 1;
            cur->block[0] = cur->block[1] = cur->block[2] = 1;
            cur->launches = 1;
            cur->line = line_no;
            continue;
        }
        if (directive(cur, f, nf)) {
            n++;
            cur = NULL;
        }
    }
    fclose(fp);
    if (cur)
        die_parse("case %s has no 'end'", cur->name);
    *ncases = n;
    return cases;
}

#endif
