// Stencils with shared-memory halos: a 7-point 1D stencil whose weights live
// in __constant__ memory, and a 5-point 2D stencil on 16x16 tiles. Edges are
// clamped (the nearest in-range element is used).

#define RADIUS 3
#define SBLOCK 256
#define T2 16

__constant__ float c_weights[2 * RADIUS + 1] = {0.0625f, 0.125f, 0.1875f, 0.25f, 0.1875f, 0.125f, 0.0625f};

__device__ __forceinline__ int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

// stencil1d: out[g] = sum_k c_weights[k+3] * in[clamp(g+k)], k = -3..3, summed
// in that order. blockDim.x <= 256.
extern "C" __global__ void stencil1d(const float* in, float* out, int n)
{
    __shared__ float s[SBLOCK + 2 * RADIUS];
    int g = blockIdx.x * blockDim.x + threadIdx.x;
    int l = threadIdx.x + RADIUS;
    s[l] = in[clampi(g, 0, n - 1)];
    if (threadIdx.x < RADIUS) {
        s[l - RADIUS] = in[clampi(g - RADIUS, 0, n - 1)];
        s[l + blockDim.x] = in[clampi(g + (int)blockDim.x, 0, n - 1)];
    }
    __syncthreads();
    if (g < n) {
        float acc = 0.0f;
        for (int k = -RADIUS; k <= RADIUS; ++k) {
            acc += c_weights[k + RADIUS] * s[l + k];
        }
        out[g] = acc;
    }
}

__device__ __forceinline__ float load_clamped(const float* in, int x, int y, int w, int h)
{
    return in[clampi(y, 0, h - 1) * w + clampi(x, 0, w - 1)];
}

// stencil2d: out = center*c + side*(up + down + left + right) on a w x h grid.
// Block (16,16), grid (ceil(w/16), ceil(h/16)).
extern "C" __global__ void stencil2d(const float* in, float* out, int w, int h, float center, float side)
{
    __shared__ float s[T2 + 2][T2 + 2];
    int tx = threadIdx.x;
    int ty = threadIdx.y;
    int x = blockIdx.x * T2 + tx;
    int y = blockIdx.y * T2 + ty;
    s[ty + 1][tx + 1] = load_clamped(in, x, y, w, h);
    if (tx == 0) {
        s[ty + 1][0] = load_clamped(in, x - 1, y, w, h);
    }
    if (tx == T2 - 1) {
        s[ty + 1][T2 + 1] = load_clamped(in, x + 1, y, w, h);
    }
    if (ty == 0) {
        s[0][tx + 1] = load_clamped(in, x, y - 1, w, h);
    }
    if (ty == T2 - 1) {
        s[T2 + 1][tx + 1] = load_clamped(in, x, y + 1, w, h);
    }
    __syncthreads();
    if (x < w && y < h) {
        float nb = s[ty][tx + 1] + s[ty + 2][tx + 1] + s[ty + 1][tx] + s[ty + 1][tx + 2];
        out[y * w + x] = center * s[ty + 1][tx + 1] + side * nb;
    }
}
