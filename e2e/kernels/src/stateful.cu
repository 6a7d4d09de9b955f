// Kernels of the long-running stateful program (checkpoint and migration
// tests): a deterministic per-element update and a 64-bit checksum that does
// not depend on the order of the atomics.

__device__ __forceinline__ unsigned mix32(unsigned x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// state_init: s[i] = mix32((unsigned)i ^ seed).
extern "C" __global__ void state_init(unsigned* s, unsigned long long n, unsigned seed)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)blockDim.x * gridDim.x) {
        s[i] = mix32((unsigned)i ^ seed);
    }
}

// state_step: one xorshift round plus iter*0x9e3779b9 + i, per element.
extern "C" __global__ void state_step(unsigned* s, unsigned long long n, unsigned iter)
{
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)blockDim.x * gridDim.x) {
        unsigned x = s[i];
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x += iter * 0x9e3779b9u + (unsigned)i;
        s[i] = x;
    }
}

// state_checksum: out[0] += sum over i of s[i] * (2i + 1) (mod 2^64). Warp
// shuffles reduce within a warp, one atomic per warp. blockDim.x must be a
// multiple of 32.
extern "C" __global__ void state_checksum(const unsigned* s, unsigned long long n, unsigned long long* out)
{
    unsigned long long sum = 0;
    for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
         i += (unsigned long long)blockDim.x * gridDim.x) {
        sum += (unsigned long long)s[i] * (2ull * i + 1ull);
    }
    for (int off = 16; off > 0; off >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, off);
    }
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(out, sum);
    }
}
