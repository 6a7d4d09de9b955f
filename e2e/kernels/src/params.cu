// Parameter passing: a struct by value (with padding and an array inside),
// scalars of every width in one signature (alignment and padding of the
// parameter block), many parameters, and __launch_bounds__ (.maxntid).

struct Config {
    float scale;       // offset 0
    int offset;        // 4
    double bias;       // 8
    short tag;         // 16
    signed char flag;  // 18
    float weights[4];  // 20
    long long big;     // 40; the struct is 48 bytes, 8-aligned
};

// struct_param: per element i:
//   out[i] = in[i]*cfg.scale + cfg.weights[i & 3] + cfg.offset   (float; one fma, then adds)
// and thread 0 copies the fields: fields[0..7] = bias, tag, flag, big, scale,
// offset, weights[0], weights[3] (as doubles).
extern "C" __global__ void struct_param(Config cfg, const float* in, float* out, double* fields, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        fields[0] = cfg.bias;
        fields[1] = cfg.tag;
        fields[2] = cfg.flag;
        fields[3] = (double)cfg.big;
        fields[4] = cfg.scale;
        fields[5] = cfg.offset;
        fields[6] = cfg.weights[0];
        fields[7] = cfg.weights[3];
    }
    if (i < n) {
        out[i] = in[i] * cfg.scale + cfg.weights[i & 3] + (float)cfg.offset;
    }
}

// mixed_params: every width in one signature. Thread 0 writes each parameter
// widened to 64 bits into out[0..7] (floats as their value times 1024);
// every thread i < n writes out[8 + i] = in[i] * i32 + l.
extern "C" __global__ void mixed_params(signed char c, unsigned char uc, short s, unsigned short us, int i32,
                                        long long l, float f, double d, const int* in, long long* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i == 0) {
        out[0] = c;
        out[1] = uc;
        out[2] = s;
        out[3] = us;
        out[4] = i32;
        out[5] = l;
        out[6] = (long long)(f * 1024.0f);
        out[7] = (long long)(d * 1024.0);
    }
    if (i < n) {
        out[8 + i] = (long long)in[i] * i32 + l;
    }
}

// many_params: 24 integer parameters; out[i] = in[i] + sum of p_k * (k + 1).
extern "C" __global__ void many_params(const int* in, int* out, int n, int p0, int p1, int p2, int p3, int p4,
                                       int p5, int p6, int p7, int p8, int p9, int p10, int p11, int p12, int p13,
                                       int p14, int p15, int p16, int p17, int p18, int p19, int p20)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int s = p0 * 1 + p1 * 2 + p2 * 3 + p3 * 4 + p4 * 5 + p5 * 6 + p6 * 7 + p7 * 8 + p8 * 9 + p9 * 10 + p10 * 11 +
            p11 * 12 + p12 * 13 + p13 * 14 + p14 * 15 + p15 * 16 + p16 * 17 + p17 * 18 + p18 * 19 + p19 * 20 +
            p20 * 21;
    out[i] = in[i] + s;
}

// bounded: __launch_bounds__(128, 2) puts .maxntid 128, 1, 1 in the PTX; the
// kernel itself is out[i] = in[i] * 2 + threadIdx.x.
extern "C" __global__ void __launch_bounds__(128, 2) bounded(const int* in, int* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = in[i] * 2 + (int)threadIdx.x;
    }
}
