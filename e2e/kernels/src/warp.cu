// Warp-synchronous operations: vote (ballot/any/all/activemask, including a
// partial member mask) and every shuffle mode, with and without a width.

#define FULL 0xffffffffu

// warp_vote: five words per warp. Every thread of the launch takes part; threads
// past n vote with v = 0.
extern "C" __global__ void warp_vote(const int* in, unsigned* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int warp = i >> 5;
    int v = i < n ? in[i] : 0;
    unsigned ballot = __ballot_sync(FULL, v > 0);
    int any = __any_sync(FULL, v < -900);
    int all = __all_sync(FULL, v > -990);
    unsigned active = __activemask();
    unsigned odd = 0;
    if (lane & 1) {
        odd = __ballot_sync(0xaaaaaaaau, v > 0 && (v & 2));
    }
    odd = __shfl_sync(FULL, odd, 1);
    if (lane == 0) {
        out[5 * warp + 0] = ballot;
        out[5 * warp + 1] = any != 0;
        out[5 * warp + 2] = all != 0;
        out[5 * warp + 3] = active;
        out[5 * warp + 4] = odd;
    }
}

// warp_shfl_modes: seven results per thread (out) and one 64-bit result
// (out64), covering shfl up/down/xor/idx, with widths 16 and 8.
extern "C" __global__ void warp_shfl_modes(const int* in, int* out, long long* out64, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int v = i < n ? in[i] : 0;
    int r0 = __shfl_up_sync(FULL, v, 3);
    int r1 = __shfl_down_sync(FULL, v, 5);
    int r2 = __shfl_xor_sync(FULL, v, 7);
    int r3 = __shfl_sync(FULL, v, (lane * 7 + 3) & 31);
    int r4 = __shfl_sync(FULL, v, lane * 3, 16);
    int r5 = __shfl_down_sync(FULL, v, 2, 8);
    int r6 = __shfl_up_sync(FULL, v, 1, 4);
    long long w = ((long long)v << 20) | lane;
    long long r7 = __shfl_xor_sync(FULL, w, 3);
    if (i < n) {
        out[7 * i + 0] = r0;
        out[7 * i + 1] = r1;
        out[7 * i + 2] = r2;
        out[7 * i + 3] = r3;
        out[7 * i + 4] = r4;
        out[7 * i + 5] = r5;
        out[7 * i + 6] = r6;
        out64[i] = r7;
    }
}

// warp_reduce_xor_f32: butterfly (xor) sum of each warp; every lane ends with
// the same value. Writes lane 0's and lane 31's result per warp.
extern "C" __global__ void warp_reduce_xor_f32(const float* in, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    int lane = threadIdx.x & 31;
    int warp = i >> 5;
    float v = i < n ? in[i] : 0.0f;
    for (int mask = 16; mask > 0; mask >>= 1) {
        v += __shfl_xor_sync(FULL, v, mask);
    }
    if (lane == 0) {
        out[2 * warp] = v;
    }
    if (lane == 31) {
        out[2 * warp + 1] = v;
    }
}
