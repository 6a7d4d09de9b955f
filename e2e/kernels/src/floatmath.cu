// Floating-point math in single and double precision. Each kernel writes two
// buffers: "exact" holds results that IEEE 754 defines to the bit (basic ops,
// sqrt, fma, rounding functions, directed-rounding intrinsics), "approx" holds
// the approximations (hardware intrinsics and the math library), which are
// compared with a tolerance.

#define KF_EXACT 22
#define KF_APPROX 16

// float_math: x in a moderate range, y away from zero.
extern "C" __global__ void float_math(const float* xs, const float* ys, float* exact, float* approx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float x = xs[i];
    float y = ys[i];
    float ax = fabsf(x);
    float* e = exact + (size_t)i * KF_EXACT;
    e[0] = __fadd_rn(x, y);
    e[1] = __fsub_rn(x, y);
    e[2] = __fmul_rn(x, y);
    e[3] = x / y;
    e[4] = sqrtf(ax);
    e[5] = fmaf(x, y, x);
    e[6] = fminf(x, y);
    e[7] = fmaxf(x, y);
    e[8] = floorf(x);
    e[9] = ceilf(x);
    e[10] = truncf(x);
    e[11] = rintf(x);
    e[12] = roundf(x);
    e[13] = copysignf(ax, y);
    e[14] = __fadd_rz(x, y);
    e[15] = __fmul_rd(x, y);
    e[16] = __fmul_ru(x, y);
    e[17] = __fdiv_rz(x, y);
    e[18] = __frcp_rn(x);
    e[19] = __fsqrt_rd(ax);
    e[20] = __fmaf_ru(x, y, 1.0f);
    e[21] = __saturatef(x);
    float* a = approx + (size_t)i * KF_APPROX;
    a[0] = __expf(x);
    a[1] = __logf(ax + 1.0f);
    a[2] = __sinf(x);
    a[3] = __cosf(x);
    a[4] = rsqrtf(ax + 0.25f);
    a[5] = __fdividef(x, y);
    a[6] = exp2f(x);
    a[7] = __log2f(ax + 1.0f);
    a[8] = tanhf(x);
    a[9] = expf(x);
    a[10] = logf(ax + 1.0f);
    a[11] = sinf(x);
    a[12] = cosf(x);
    a[13] = powf(ax + 0.5f, y);
    a[14] = atan2f(y, x);
    a[15] = erff(x);
}

#define KD_EXACT 20
#define KD_APPROX 10

extern "C" __global__ void double_math(const double* xs, const double* ys, double* exact, double* approx, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    double x = xs[i];
    double y = ys[i];
    double ax = fabs(x);
    double* e = exact + (size_t)i * KD_EXACT;
    e[0] = __dadd_rn(x, y);
    e[1] = __dsub_rn(x, y);
    e[2] = __dmul_rn(x, y);
    e[3] = x / y;
    e[4] = sqrt(ax);
    e[5] = fma(x, y, x);
    e[6] = fmin(x, y);
    e[7] = fmax(x, y);
    e[8] = floor(x);
    e[9] = ceil(x);
    e[10] = trunc(x);
    e[11] = rint(x);
    e[12] = round(x);
    e[13] = __dadd_rz(x, y);
    e[14] = __dmul_ru(x, y);
    e[15] = __ddiv_rd(x, y);
    e[16] = __drcp_rn(x);
    e[17] = __dsqrt_ru(ax);
    e[18] = (double)__double2float_rn(x);
    e[19] = (double)__double2float_rz(x);
    double* a = approx + (size_t)i * KD_APPROX;
    a[0] = exp(x);
    a[1] = log(ax + 1.0);
    a[2] = sin(x);
    a[3] = cos(x);
    a[4] = tanh(x);
    a[5] = rsqrt(ax + 0.25);
    a[6] = pow(ax + 0.5, y);
    a[7] = atan2(y, x);
    a[8] = cbrt(x);
    a[9] = erf(x);
}
