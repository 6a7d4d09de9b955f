// Error codes as CUDA reports them: a launch with too many threads per
// block, a launch with more dynamic shared memory than the kernel
// allows, an allocation larger than the device, an invalid device, and
// that the device still works after each.
#include "check.h"

__global__ void noop(int *x) { if (x) x[threadIdx.x] = 1; }

__global__ void dyn(int *x)
{
	extern __shared__ int buf[];
	buf[threadIdx.x] = 1;
	if (x)
		x[threadIdx.x] = buf[threadIdx.x];
}

int main()
{
	// CUDA 12's cudart checks the configuration itself and reports
	// cudaErrorInvalidConfiguration; CUDA 13's leaves it to the driver,
	// which refuses it with CUDA_ERROR_INVALID_VALUE. Never success.
#if CUDART_VERSION >= 13000
	const cudaError_t badLaunch = cudaErrorInvalidValue;
#else
	const cudaError_t badLaunch = cudaErrorInvalidConfiguration;
#endif
	noop<<<1, 4096>>>(nullptr);
	cudaError_t e = cudaGetLastError();
	EXPECT(e == badLaunch, "bad launch: %s, want %s", cudaGetErrorName(e), cudaGetErrorName(badLaunch));
	EXPECT(cudaGetLastError() == cudaSuccess, "the launch error is not cleared");
	// 64 KiB of dynamic shared memory without raising the kernel's
	// 48 KiB default (cudaFuncSetAttribute): the driver's invalid value.
	dyn<<<1, 32, 64 << 10>>>(nullptr);
	e = cudaGetLastError();
	EXPECT(e == cudaErrorInvalidValue, "launch past the shared memory limit: %s, want cudaErrorInvalidValue", cudaGetErrorName(e));
	size_t freeB = 0, total = 0;
	CHECK(cudaMemGetInfo(&freeB, &total));
	void *p = nullptr;
	e = cudaMalloc(&p, total * 4);
	EXPECT(e == cudaErrorMemoryAllocation, "huge malloc: %s, want cudaErrorMemoryAllocation", cudaGetErrorName(e));
	cudaGetLastError();
	e = cudaSetDevice(99);
	EXPECT(e == cudaErrorInvalidDevice, "cudaSetDevice(99): %s", cudaGetErrorName(e));
	cudaGetLastError();
	int *d;
	CHECK(cudaMalloc(&d, 32 * sizeof(int)));
	noop<<<1, 32>>>(d);
	CHECK(cudaDeviceSynchronize());
	int h[32];
	CHECK(cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost));
	EXPECT(h[31] == 1, "device unusable after errors");
	std::printf("%s / %s\n", cudaGetErrorString(cudaErrorInvalidConfiguration), cudaGetErrorString(cudaErrorMemoryAllocation));
	std::printf("errors ok\n");
	return 0;
}
