// nvcc-flags: --use_fast_math
// Built with --use_fast_math, so the library calls below become the hardware
// approximations (ex2/lg2/sin/cos/tanh/rsqrt/sqrt .approx, div.approx or
// div.full) with flush-to-zero.

#define KFAST 12

extern "C" __global__ void fast_math(const float* xs, const float* ys, float* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float x = xs[i];
    float y = ys[i];
    float ax = fabsf(x);
    float* o = out + (size_t)i * KFAST;
    o[0] = expf(x);
    o[1] = logf(ax + 1.0f);
    o[2] = sinf(x);
    o[3] = cosf(x);
    o[4] = tanhf(x);
    o[5] = x / y;
    o[6] = sqrtf(ax);
    o[7] = 1.0f / sqrtf(ax + 0.25f);
    o[8] = powf(ax + 0.5f, y);
    o[9] = exp2f(x);
    o[10] = log2f(ax + 1.0f);
    o[11] = exp10f(x * 0.25f);
}
