// __constant__ and __device__ symbols written and read with
// cudaMemcpyToSymbol / cudaMemcpyFromSymbol and cudaGetSymbolAddress.
#include <cmath>
#include "check.h"

__constant__ float coeff[4];
__device__ int counter;
__device__ float table[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };

__global__ void poly(const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n) {
		float v = x[i];
		y[i] = coeff[0] + v * (coeff[1] + v * (coeff[2] + v * coeff[3])) + table[i % 8];
		atomicAdd(&counter, 1);
	}
}

int main()
{
	const int n = 1000;
	float c[4] = { 1.0f, 0.5f, 0.25f, 0.125f };
	CHECK(cudaMemcpyToSymbol(coeff, c, sizeof c));
	int zero = 0;
	CHECK(cudaMemcpyToSymbol(counter, &zero, sizeof zero));
	float x[n], y[n];
	for (int i = 0; i < n; i++)
		x[i] = (i % 10) * 0.1f;
	float *dx, *dy;
	CHECK(cudaMalloc(&dx, sizeof x));
	CHECK(cudaMalloc(&dy, sizeof y));
	CHECK(cudaMemcpy(dx, x, sizeof x, cudaMemcpyHostToDevice));
	poly<<<(n + 127) / 128, 128>>>(dx, dy, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(y, dy, sizeof y, cudaMemcpyDeviceToHost));
	for (int i = 0; i < n; i++) {
		float v = x[i], want = c[0] + v * (c[1] + v * (c[2] + v * c[3])) + (float)(i % 8 + 1);
		// The device may fuse the multiply-adds, the host does not.
		EXPECT(std::fabs(y[i] - want) <= 1e-5f * std::fabs(want), "y[%d] = %f, want %f", i, y[i], want);
	}
	HASH("y", y, sizeof y);
	int count = 0;
	CHECK(cudaMemcpyFromSymbol(&count, counter, sizeof count));
	EXPECT(count == n, "counter %d, want %d", count, n);
	float *tp;
	CHECK(cudaGetSymbolAddress((void **)&tp, table));
	float t[8];
	CHECK(cudaMemcpy(t, tp, sizeof t, cudaMemcpyDeviceToHost));
	EXPECT(t[7] == 8.0f, "table[7] = %f", t[7]);
	HASH("table", t, sizeof t);
	size_t size = 0;
	CHECK(cudaGetSymbolSize(&size, coeff));
	EXPECT(size == sizeof c, "coeff size %zu", size);
	std::printf("symbols ok\n");
	return 0;
}
