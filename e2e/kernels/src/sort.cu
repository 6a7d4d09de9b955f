// Bitonic sorting networks in shared memory. Each block sorts its own
// segment ascending; elements past n are padded with the maximum value and
// never written back.

#define SORT_MAX 1024

// bitonic_sort_u32: sorts segments of blockDim.x elements (a power of two,
// <= 1024) in place.
extern "C" __global__ void bitonic_sort_u32(unsigned* data, int n)
{
    __shared__ unsigned s[SORT_MAX];
    unsigned tid = threadIdx.x;
    unsigned base = blockIdx.x * blockDim.x;
    unsigned un = (unsigned)n;
    s[tid] = (base + tid < un) ? data[base + tid] : 0xffffffffu;
    __syncthreads();
    for (unsigned k = 2; k <= blockDim.x; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            unsigned p = tid ^ j;
            if (p > tid) {
                unsigned a = s[tid];
                unsigned b = s[p];
                bool up = (tid & k) == 0;
                if ((a > b) == up) {
                    s[tid] = b;
                    s[p] = a;
                }
            }
            __syncthreads();
        }
    }
    if (base + tid < un) {
        data[base + tid] = s[tid];
    }
}

// bitonic_sort_f32_dyn: sorts segments of 2*blockDim.x floats (blockDim.x a
// power of two) in dynamic shared memory of 2*blockDim.x*4 bytes; each thread
// runs one comparator per step. Inputs must not contain NaN.
extern "C" __global__ void bitonic_sort_f32_dyn(float* data, int n)
{
    extern __shared__ float sf[];
    unsigned tid = threadIdx.x;
    unsigned m = 2 * blockDim.x;
    unsigned base = blockIdx.x * m;
    unsigned un = (unsigned)n;
    sf[tid] = (base + tid < un) ? data[base + tid] : __int_as_float(0x7f800000);
    sf[tid + blockDim.x] = (base + tid + blockDim.x < un) ? data[base + tid + blockDim.x] : __int_as_float(0x7f800000);
    __syncthreads();
    for (unsigned k = 2; k <= m; k <<= 1) {
        for (unsigned j = k >> 1; j > 0; j >>= 1) {
            unsigned i = 2 * j * (tid / j) + (tid % j);
            unsigned p = i + j;
            float a = sf[i];
            float b = sf[p];
            bool up = (i & k) == 0;
            if ((a > b) == up) {
                sf[i] = b;
                sf[p] = a;
            }
            __syncthreads();
        }
    }
    if (base + tid < un) {
        data[base + tid] = sf[tid];
    }
    if (base + tid + blockDim.x < un) {
        data[base + tid + blockDim.x] = sf[tid + blockDim.x];
    }
}
