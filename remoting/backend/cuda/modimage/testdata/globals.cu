// Module-scope state of both kinds: __device__ globals and a __constant__
// array, all used by the kernel so that nvcc keeps them.
__device__ int counter;
__device__ float arr[16];
__constant__ int k[4];

extern "C" __global__ void touch(float *out)
{
	int i = threadIdx.x;
	atomicAdd(&counter, 1);
	arr[i % 16] += out[i];
	out[i] = arr[i % 16] * k[i % 4];
}
