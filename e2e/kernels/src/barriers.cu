// Named barriers: a producer/consumer split with bar.arrive and bar.sync on
// barrier 1. Block size must be 128: warps 0-1 produce, warps 2-3 consume.

// named_barrier: per block b and k in 0..63:
//   out[64b + k] = 3*in[64b + k] + 3*in[64b + 63 - k]
extern "C" __global__ void named_barrier(const int* in, int* out)
{
    __shared__ int buf[64];
    int tid = threadIdx.x;
    int base = blockIdx.x * 64;
    if (tid < 64) {
        buf[tid] = in[base + tid] * 3;
        asm volatile("bar.arrive 1, 128;" ::: "memory");
    } else {
        asm volatile("bar.sync 1, 128;" ::: "memory");
        int k = tid - 64;
        out[base + k] = buf[k] + buf[63 - k];
    }
}
