// Prefix sums: block-segmented inclusive (Hillis-Steele, double-buffered
// shared memory), exclusive (Blelloch up/down sweep in dynamic shared memory)
// and a warp-level inclusive scan with shfl.up.

#define SCAN_BLOCK 256

// scan_inclusive_block: inclusive scan of each blockDim.x-element segment.
// blockDim.x <= 256.
extern "C" __global__ void scan_inclusive_block(const int* in, int* out, int n)
{
    __shared__ int buf[2][SCAN_BLOCK];
    int tid = threadIdx.x;
    int i = blockIdx.x * blockDim.x + tid;
    int pout = 0;
    buf[pout][tid] = i < n ? in[i] : 0;
    __syncthreads();
    for (int off = 1; off < (int)blockDim.x; off <<= 1) {
        pout = 1 - pout;
        int pin = 1 - pout;
        int v = buf[pin][tid];
        if (tid >= off) {
            v += buf[pin][tid - off];
        }
        buf[pout][tid] = v;
        __syncthreads();
    }
    if (i < n) {
        out[i] = buf[pout][tid];
    }
}

// scan_exclusive_blelloch: exclusive scan of each 2*blockDim.x-element
// segment; dynamic shared memory of 2*blockDim.x*4 bytes. blockDim.x must be
// a power of two.
extern "C" __global__ void scan_exclusive_blelloch(const unsigned* in, unsigned* out, int n)
{
    extern __shared__ unsigned temp[];
    int tid = threadIdx.x;
    int m = 2 * blockDim.x;
    int base = blockIdx.x * m;
    temp[2 * tid] = (base + 2 * tid < n) ? in[base + 2 * tid] : 0u;
    temp[2 * tid + 1] = (base + 2 * tid + 1 < n) ? in[base + 2 * tid + 1] : 0u;
    int offset = 1;
    for (int d = m >> 1; d > 0; d >>= 1) {
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1;
            int bi = offset * (2 * tid + 2) - 1;
            temp[bi] += temp[ai];
        }
        offset <<= 1;
    }
    if (tid == 0) {
        temp[m - 1] = 0;
    }
    for (int d = 1; d < m; d <<= 1) {
        offset >>= 1;
        __syncthreads();
        if (tid < d) {
            int ai = offset * (2 * tid + 1) - 1;
            int bi = offset * (2 * tid + 2) - 1;
            unsigned t = temp[ai];
            temp[ai] = temp[bi];
            temp[bi] += t;
        }
    }
    __syncthreads();
    if (base + 2 * tid < n) {
        out[base + 2 * tid] = temp[2 * tid];
    }
    if (base + 2 * tid + 1 < n) {
        out[base + 2 * tid + 1] = temp[2 * tid + 1];
    }
}

// scan_warp_inclusive: inclusive scan of each 32-element warp segment.
// blockDim.x must be a multiple of 32.
extern "C" __global__ void scan_warp_inclusive(const int* in, int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = i < n ? in[i] : 0;
    for (int off = 1; off < 32; off <<= 1) {
        int t = __shfl_up_sync(0xffffffffu, v, off);
        if (lane >= off) {
            v += t;
        }
    }
    if (i < n) {
        out[i] = v;
    }
}
