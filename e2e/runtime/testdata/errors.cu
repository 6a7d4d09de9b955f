// Error codes as CUDA reports them: a launch with too many threads per
// block, an allocation larger than the device, an invalid device, and
// that the device still works after each.
#include "check.h"

__global__ void noop(int *x) { if (x) x[threadIdx.x] = 1; }

int main()
{
	noop<<<1, 4096>>>(nullptr);
	cudaError_t e = cudaGetLastError();
	EXPECT(e == cudaErrorInvalidConfiguration, "bad launch: %s, want cudaErrorInvalidConfiguration", cudaGetErrorName(e));
	EXPECT(cudaGetLastError() == cudaSuccess, "the launch error is not cleared");
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
