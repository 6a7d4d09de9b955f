// Device-function calls that stay calls in PTX (.func with call/ret): scalar
// and struct returns, pointer parameters into local and constant memory, and
// recursion.

__constant__ float c_poly[5] = {1.0f, -0.5f, 0.25f, -0.125f, 0.0625f};

// collatz_steps counts Collatz steps from x until 1, at most limit.
__device__ __noinline__ int collatz_steps(unsigned x, int limit)
{
    int s = 0;
    while (x != 1u && s < limit) {
        x = (x & 1u) ? 3u * x + 1u : x >> 1;
        ++s;
    }
    return s;
}

// horner evaluates c[0] + c[1]*x + ... + c[deg]*x^deg (one fma per step).
__device__ __noinline__ float horner(const float* c, int deg, float x)
{
    float r = c[deg];
    for (int k = deg - 1; k >= 0; --k) {
        r = r * x + c[k];
    }
    return r;
}

// divmod_pair returns a struct, which PTX passes back in a .param byte array.
__device__ __noinline__ int2 divmod_pair(int a, int b)
{
    return make_int2(a / b, a % b);
}

// gcd_rec is recursive on purpose: the call stack must be real.
__device__ __noinline__ unsigned gcd_rec(unsigned a, unsigned b)
{
    if (b == 0u) {
        return a;
    }
    return gcd_rec(b, a % b);
}

// mix_into updates a value through a pointer; the caller passes the address of
// a local variable, so the pointer is a generic pointer into local memory.
__device__ __noinline__ void mix_into(unsigned long long* acc, unsigned v, unsigned salt)
{
    *acc = *acc * 6364136223846793005ull + (unsigned long long)(v ^ salt);
}

// devfunc_calls writes per element i:
//   iout[4i..4i+3] = collatz_steps((x & 0xffff) + 1, 500), x / d, x % d, gcd(x & 0xfffff, (x >> 12) + 1)
//     where x = in[i] as int and d = (int)((in[i] >> 24) | 1);
//   fout[i] = horner(c_poly, 4, (in[i] & 0xff) / 256);
//   uout[i] = i, then mix_into(in[i], 0x9e3779b9), then mix_into(steps, 7).
extern "C" __global__ void devfunc_calls(const unsigned* in, int* iout, float* fout, unsigned long long* uout, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) {
        return;
    }
    unsigned x = in[i];
    int steps = collatz_steps((x & 0xffffu) + 1u, 500);
    int2 dm = divmod_pair((int)x, (int)((x >> 24) | 1u));
    unsigned g = gcd_rec(x & 0xfffffu, (x >> 12) + 1u);
    iout[4 * i + 0] = steps;
    iout[4 * i + 1] = dm.x;
    iout[4 * i + 2] = dm.y;
    iout[4 * i + 3] = (int)g;
    fout[i] = horner(c_poly, 4, (float)(x & 0xffu) / 256.0f);
    unsigned long long acc = (unsigned long long)i;
    mix_into(&acc, x, 0x9e3779b9u);
    mix_into(&acc, (unsigned)steps, 7u);
    uout[i] = acc;
}
