// Reductions: shared-memory trees with bar.sync, warp shuffles, atomics,
// dynamic shared memory, the fence-and-ticket "last block" pattern and the
// block-wide vote barriers (bar.red).

#define RBLOCK 256

// reduce_sum_shared: grid-stride partial sums, a shared-memory tree per block,
// one global atomicAdd per block. blockDim.x must be a power of two <= 256.
extern "C" __global__ void reduce_sum_shared(const int* in, int* out, int n)
{
    __shared__ int s[RBLOCK];
    int sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        sum += in[i];
    }
    s[threadIdx.x] = sum;
    __syncthreads();
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            s[threadIdx.x] += s[threadIdx.x + stride];
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        atomicAdd(out, s[0]);
    }
}

// reduce_sum_dyn: each block sums 2*blockDim.x elements in dynamic shared
// memory (blockDim.x*4 bytes), finishing with a warp shuffle, and writes one
// partial sum per block. blockDim.x must be a power of two >= 32.
extern "C" __global__ void reduce_sum_dyn(const unsigned* in, unsigned* partial, int n)
{
    extern __shared__ unsigned sdata[];
    unsigned tid = threadIdx.x;
    unsigned un = (unsigned)n;
    unsigned i = blockIdx.x * (blockDim.x * 2) + tid;
    unsigned v = 0;
    if (i < un) {
        v = in[i];
    }
    if (i + blockDim.x < un) {
        v += in[i + blockDim.x];
    }
    sdata[tid] = v;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s >= 32; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid < 32) {
        v = sdata[tid];
        for (int off = 16; off > 0; off >>= 1) {
            v += __shfl_down_sync(0xffffffffu, v, off);
        }
        if (tid == 0) {
            partial[blockIdx.x] = v;
        }
    }
}

// reduce_warp_shfl: shuffle-down within each warp, warp sums through shared
// memory, a second shuffle in warp 0, one atomicAdd per block.
// blockDim.x must be a multiple of 32.
extern "C" __global__ void reduce_warp_shfl(const int* in, int* out, int n)
{
    __shared__ int warpsums[32];
    int sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        sum += in[i];
    }
    for (int off = 16; off > 0; off >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, off);
    }
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    if (lane == 0) {
        warpsums[warp] = sum;
    }
    __syncthreads();
    if (warp == 0) {
        int nwarps = (blockDim.x + 31) >> 5;
        sum = lane < nwarps ? warpsums[lane] : 0;
        for (int off = 16; off > 0; off >>= 1) {
            sum += __shfl_down_sync(0xffffffffu, sum, off);
        }
        if (lane == 0) {
            atomicAdd(out, sum);
        }
    }
}

// g_blocks_done counts finished blocks; atomicInc wraps it back to zero after
// the last block, so the module can be launched again without a reset.
__device__ unsigned int g_blocks_done = 0;

__device__ __forceinline__ unsigned block_tree_sum(unsigned* s)
{
    for (unsigned stride = blockDim.x / 2; stride > 0; stride >>= 1) {
        if (threadIdx.x < stride) {
            s[threadIdx.x] += s[threadIdx.x + stride];
        }
        __syncthreads();
    }
    return s[0];
}

// reduce_lastblock: each block writes its partial sum, fences, takes a ticket;
// the block that takes the last ticket sums all partials into result[0].
// blockDim.x must be a power of two <= 256.
extern "C" __global__ void reduce_lastblock(const unsigned* in, unsigned* partial, unsigned* result, int n)
{
    __shared__ unsigned s[RBLOCK];
    __shared__ bool is_last;
    unsigned sum = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        sum += in[i];
    }
    s[threadIdx.x] = sum;
    __syncthreads();
    unsigned total = block_tree_sum(s);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = total;
        __threadfence();
        unsigned ticket = atomicInc(&g_blocks_done, gridDim.x - 1);
        is_last = (ticket == gridDim.x - 1);
    }
    __syncthreads();
    if (is_last) {
        unsigned v = 0;
        for (unsigned b = threadIdx.x; b < gridDim.x; b += blockDim.x) {
            v += ((volatile unsigned*)partial)[b];
        }
        s[threadIdx.x] = v;
        __syncthreads();
        total = block_tree_sum(s);
        if (threadIdx.x == 0) {
            result[0] = total;
        }
    }
}

// block_sync_votes: __syncthreads_count/_and/_or (bar.red.popc/and/or).
// Writes three ints per block.
extern "C" __global__ void block_sync_votes(const int* in, int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int v = i < n ? in[i] : 0;
    int cnt = __syncthreads_count(v > 7);
    int all = __syncthreads_and(v != 0);
    int any = __syncthreads_or(v > 13);
    if (threadIdx.x == 0) {
        out[3 * blockIdx.x + 0] = cnt;
        out[3 * blockIdx.x + 1] = all != 0;
        out[3 * blockIdx.x + 2] = any != 0;
    }
}
