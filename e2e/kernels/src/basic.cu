// Basic kernels: the smallest launches, element-wise arithmetic and the
// saxpy pair used by the benchmarks.

// empty does nothing; launch-rate benchmarks use it.
extern "C" __global__ void empty(void) {}

extern "C" __global__ void vecadd(const float* a, const float* b, float* c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        c[i] = a[i] + b[i];
    }
}

// scale_offset updates x in place: x = x*s + o (contracted to one fma).
extern "C" __global__ void scale_offset(float* x, float s, float o, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        x[i] = x[i] * s + o;
    }
}

// saxpy is the grid-stride form, so any grid size covers any n.
extern "C" __global__ void saxpy(int n, float a, const float* __restrict__ x, float* __restrict__ y)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        y[i] = a * x[i] + y[i];
    }
}

// saxpy_iter repeats a dependent update iters times per element: a loop-heavy
// kernel whose cost is dominated by arithmetic, not memory.
extern "C" __global__ void saxpy_iter(int n, float a, const float* __restrict__ x, float* __restrict__ y, int iters)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
        float xv = x[i];
        float yv = y[i];
        for (int k = 0; k < iters; ++k) {
            yv = a * yv + xv;
        }
        y[i] = yv;
    }
}
