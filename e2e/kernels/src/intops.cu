// Integer operations: bit intrinsics (popc, clz, brev, byte_perm, funnel
// shifts, ffs, bfe/bfi), high multiplies, sad, halving adds, 24-bit multiply,
// rotates, 64-bit arithmetic, and signed/unsigned division and remainder by
// variables and by constants.

#define KBIT 20

__device__ __forceinline__ unsigned bfe_u32(unsigned x, unsigned pos, unsigned len)
{
    unsigned r;
    asm("bfe.u32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(pos), "r"(len));
    return r;
}

__device__ __forceinline__ int bfe_s32(int x, unsigned pos, unsigned len)
{
    int r;
    asm("bfe.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(x), "r"(pos), "r"(len));
    return r;
}

__device__ __forceinline__ unsigned bfi_b32(unsigned ins, unsigned base, unsigned pos, unsigned len)
{
    unsigned r;
    asm("bfi.b32 %0, %1, %2, %3, %4;" : "=r"(r) : "r"(ins), "r"(base), "r"(pos), "r"(len));
    return r;
}

// int_bitops: KBIT (20) results per element, in the order written below.
extern "C" __global__ void int_bitops(const unsigned* a, const unsigned* b, unsigned* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    unsigned x = a[i];
    unsigned y = b[i];
    unsigned* o = out + (size_t)i * KBIT;
    o[0] = __popc(x);
    o[1] = (unsigned)__clz((int)x);
    o[2] = __brev(x);
    o[3] = __byte_perm(x, y, y & 0x7777u);
    o[4] = __funnelshift_l(x, y, y >> 27);
    o[5] = __funnelshift_lc(x, y, y >> 26);
    o[6] = __funnelshift_r(x, y, y >> 27);
    o[7] = __funnelshift_rc(x, y, y >> 26);
    o[8] = (unsigned)__ffs((int)x);
    o[9] = bfe_u32(x, y & 31u, (y >> 5) & 31u);
    o[10] = (unsigned)bfe_s32((int)x, y & 31u, (y >> 5) & 31u);
    o[11] = bfi_b32(y, x, (y >> 10) & 31u, (y >> 15) & 31u);
    o[12] = __umulhi(x, y);
    o[13] = (unsigned)__mulhi((int)x, (int)y);
    o[14] = (unsigned)__sad((int)x, (int)y, 7u);
    o[15] = __usad(x, y, 3u);
    o[16] = (unsigned)__hadd((int)x, (int)y);
    o[17] = (unsigned)__rhadd((int)x, (int)y);
    o[18] = (unsigned)__mul24((int)x, (int)y);
    unsigned r = y & 31u;
    o[19] = ((x << r) | (x >> ((32u - r) & 31u))) + (unsigned)((int)x >> r);
}

#define K64 20

// int64_math: K64 (20) results per element, in the order written below.
extern "C" __global__ void int64_math(const unsigned long long* a, const unsigned long long* b, unsigned long long* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    unsigned long long x = a[i];
    unsigned long long y = b[i];
    unsigned s = (unsigned)(y & 63u);
    unsigned long long d = (y >> s) | 1ull;
    long long sd = (long long)((d >> 1) | 1ull);
    if (y & 2ull) {
        sd = -sd;
    }
    if (sd == -1) {
        sd = 3;
    }
    unsigned long long* o = out + (size_t)i * K64;
    o[0] = x + y;
    o[1] = x - y;
    o[2] = x * y;
    o[3] = __umul64hi(x, y);
    o[4] = (unsigned long long)__mul64hi((long long)x, (long long)y);
    o[5] = x << s;
    o[6] = x >> s;
    o[7] = (unsigned long long)((long long)x >> s);
    o[8] = x / d;
    o[9] = x % d;
    o[10] = (unsigned long long)((long long)x / sd);
    o[11] = (unsigned long long)((long long)x % sd);
    o[12] = (unsigned long long)__popcll(x);
    o[13] = (unsigned long long)__clzll((long long)x);
    o[14] = __brevll(x);
    o[15] = (unsigned long long)__ffsll((long long)x);
    o[16] = (unsigned long long)min((long long)x, (long long)y);
    o[17] = max(x, y);
    o[18] = (unsigned long long)(((long long)x < (long long)y) + 2 * (x < y));
    o[19] = (x ^ (y * 0x9e3779b97f4a7c15ull)) + ((x << 13) | (x >> 51));
}

#define KDIV 12

// divrem32: KDIV (12) results per element. The divisor d is derived from b[i]
// so that it spans every magnitude, is never zero, and never makes
// INT_MIN / -1.
extern "C" __global__ void divrem32(const int* a, const int* b, int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int x = a[i];
    unsigned ub = (unsigned)b[i];
    int d = (int)((ub >> (ub & 31u)) & 0x7fffffffu);
    if (ub & 0x20u) {
        d = -d;
    }
    if (d == 0 || (d == -1 && x == (int)0x80000000)) {
        d = 1;
    }
    int* o = out + (size_t)i * KDIV;
    o[0] = x / d;
    o[1] = x % d;
    o[2] = (int)((unsigned)x / (unsigned)d);
    o[3] = (int)((unsigned)x % (unsigned)d);
    o[4] = x / 7;
    o[5] = x % 7;
    o[6] = (int)((unsigned)x / 10u);
    o[7] = (int)((unsigned)x % 10u);
    o[8] = x / -3;
    o[9] = x / 16;
    o[10] = x % 16;
    o[11] = (int)((unsigned)x / 0x12345u);
}
