// Kernels for the GPU suite's helper programs (holder, bench). Compiled to
// PTX with nvcc on the GPU host and loaded with cuModuleLoadData, so the
// same PTX runs natively and through gpud.
#include <stdint.h>

// mix is an integer hash: it makes the held data incompressible, so that
// checkpoint timings are not flattered by the store's compression.
__device__ __forceinline__ uint32_t mix(uint64_t i, uint32_t seed)
{
	uint32_t x = (uint32_t)((i * 0x9E3779B97F4A7C15ull) >> 32) ^ seed;
	x ^= x >> 16;
	x *= 0x7feb352du;
	x ^= x >> 15;
	x *= 0x846ca68bu;
	x ^= x >> 16;
	return x;
}

#define GRID_STRIDE(i, n) \
	for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < (n); i += (uint64_t)gridDim.x * blockDim.x)

extern "C" __global__ void fill(uint32_t *a, uint64_t n, uint32_t seed)
{
	GRID_STRIDE(i, n) a[i] = mix(i, seed);
}

extern "C" __global__ void bump(uint32_t *a, uint64_t n)
{
	GRID_STRIDE(i, n) a[i] += 1;
}

// check counts the elements that differ from fill's value plus iter.
extern "C" __global__ void check(const uint32_t *a, uint64_t n, uint32_t seed, uint32_t iter,
				 unsigned long long *bad)
{
	unsigned long long b = 0;
	GRID_STRIDE(i, n) b += a[i] != mix(i, seed) + iter;
	if (b)
		atomicAdd(bad, b);
}

// bump_window adds 1 to the w elements from lo: a client that rewrites a
// part of its memory at each step.
extern "C" __global__ void bump_window(uint32_t *a, uint64_t lo, uint64_t w)
{
	GRID_STRIDE(i, w) a[lo + i] += 1;
}

// check_windows counts the elements that differ from fill's value plus
// the times bump_window reached them after iter steps, step j bumping
// window (j - 1) mod (n / w) of w elements (the tail past the last whole
// window is never bumped).
extern "C" __global__ void check_windows(const uint32_t *a, uint64_t n, uint32_t seed, uint32_t iter, uint64_t w,
					 unsigned long long *bad)
{
	unsigned long long b = 0;
	uint64_t c = n / w;
	GRID_STRIDE(i, n)
	{
		uint64_t k = i / w;
		uint32_t times = k < c && iter > k ? (uint32_t)((iter - 1 - k) / c + 1) : 0;
		b += a[i] != mix(i, seed) + times;
	}
	if (b)
		atomicAdd(bad, b);
}

extern "C" __global__ void noop(void) {}
