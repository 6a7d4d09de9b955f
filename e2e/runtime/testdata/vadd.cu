// Vector add: cudaMalloc, copies both ways, a <<<>>> launch, and the
// occupancy API choosing the block size.
#include "check.h"

__global__ void add(const float *a, const float *b, float *c, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		c[i] = a[i] + b[i];
}

int main()
{
	const int n = 100000;
	float *a = new float[n], *b = new float[n], *c = new float[n];
	for (int i = 0; i < n; i++) {
		a[i] = i * 0.5f;
		b[i] = 1000.0f - i;
	}
	int count = 0;
	CHECK(cudaGetDeviceCount(&count));
	EXPECT(count >= 1, "no device");
	cudaDeviceProp prop;
	CHECK(cudaGetDeviceProperties(&prop, 0));
	std::printf("device: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
	float *da, *db, *dc;
	CHECK(cudaMalloc(&da, n * sizeof(float)));
	CHECK(cudaMalloc(&db, n * sizeof(float)));
	CHECK(cudaMalloc(&dc, n * sizeof(float)));
	CHECK(cudaMemcpy(da, a, n * sizeof(float), cudaMemcpyHostToDevice));
	CHECK(cudaMemcpy(db, b, n * sizeof(float), cudaMemcpyHostToDevice));
	int minGrid = 0, block = 0;
	CHECK(cudaOccupancyMaxPotentialBlockSize(&minGrid, &block, add, 0, 0));
	EXPECT(block > 0 && block % 32 == 0 && block <= 1024 && minGrid > 0, "occupancy: block %d grid %d", block, minGrid);
	int active = 0;
	CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&active, add, block, 0));
	EXPECT(active >= 1, "active blocks %d", active);
	add<<<(n + block - 1) / block, block>>>(da, db, dc, n);
	CHECK(cudaGetLastError());
	CHECK(cudaDeviceSynchronize());
	CHECK(cudaMemcpy(c, dc, n * sizeof(float), cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++)
		EXPECT(c[i] == a[i] + b[i], "c[%d] = %f, want %f", i, c[i], a[i] + b[i]);
	cudaFuncAttributes fa;
	CHECK(cudaFuncGetAttributes(&fa, add));
	EXPECT(fa.maxThreadsPerBlock > 0, "maxThreadsPerBlock %d", fa.maxThreadsPerBlock);
	CHECK(cudaFree(da));
	CHECK(cudaFree(db));
	CHECK(cudaFree(dc));
	HASH("c", c, n * sizeof(float));
	std::printf("block %d, %d blocks/SM, checksum %.1f\n", block, active, c[n - 1]);
	std::printf("vadd ok\n");
	return 0;
}
