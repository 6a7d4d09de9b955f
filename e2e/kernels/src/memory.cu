// Memory spaces and access widths: vector loads and stores (v2/v4), module
// globals in .const and .global with initializers (the host reads and writes
// them through cuModuleGetGlobal), and arrays indexed dynamically so that they
// live in .local memory.

// vec_load: per element i:
//   out4[i]  = (in4.w*2, in4.z+1, in4.y-in4.x, in4.x)
//   outi2[i] = (ini2.y, ini2.x+ini2.y)
//   outd2[i] = (ind2.y, ind2.x*0.5)
extern "C" __global__ void vec_load(const float4* in4, float4* out4, const int2* ini2, int2* outi2,
                                    const double2* ind2, double2* outd2, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    float4 v = in4[i];
    out4[i] = make_float4(v.w * 2.0f, v.z + 1.0f, v.y - v.x, v.x);
    int2 q = ini2[i];
    outi2[i] = make_int2(q.y, q.x + q.y);
    double2 d = ind2[i];
    outd2[i] = make_double2(d.y, d.x * 0.5);
}

__constant__ int c_table[16] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3};
__constant__ float c_scale[2] = {0.5f, 2.0f};
// c_offset has no initializer: the host sets it before the launch.
__constant__ int c_offset;
__device__ int g_counter = 1000;
__device__ unsigned g_lut[8] = {2, 3, 5, 7, 11, 13, 17, 19};
__device__ float g_bias = 0.25f;
__device__ unsigned long long g_sum64 = 0x100000000ull;

// use_globals: per element i, with v = in[i]:
//   out[i]  = v * c_table[v & 15] + g_lut[i & 7] + c_offset
//   fout[i] = v * c_scale[i & 1] + g_bias
// and g_counter += 1, g_sum64 += (unsigned)v (both atomically).
extern "C" __global__ void use_globals(const int* in, int* out, float* fout, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    int v = in[i];
    out[i] = v * c_table[v & 15] + (int)g_lut[i & 7] + c_offset;
    fout[i] = (float)v * c_scale[i & 1] + g_bias;
    atomicAdd(&g_counter, 1);
    atomicAdd(&g_sum64, (unsigned long long)(unsigned)v);
}

// local_array: a 32-entry per-thread table filled from in[i] and then read and
// written at data-dependent indices.
extern "C" __global__ void local_array(const unsigned* in, unsigned* out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    unsigned loc[32];
    unsigned x = in[i];
    for (int k = 0; k < 32; ++k) {
        loc[k] = x ^ ((unsigned)k * 0x9e3779b9u);
        x = x * 1664525u + 1013904223u;
    }
    unsigned acc = 0;
    unsigned idx = in[i] & 31u;
    for (int k = 0; k < 64; ++k) {
        acc += loc[idx];
        loc[(idx * 7u + (unsigned)k) & 31u] ^= acc;
        idx = (acc >> 3) & 31u;
    }
    out[i] = acc;
}
