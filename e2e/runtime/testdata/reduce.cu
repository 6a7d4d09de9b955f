// Reduction with __shared__ memory, __syncthreads and atomicAdd, checked
// against the sum computed on the host.
#include "check.h"

__global__ void sum(const int *in, unsigned long long *out, int n)
{
	__shared__ int part[256];
	int t = threadIdx.x, i = blockIdx.x * blockDim.x + t;
	part[t] = i < n ? in[i] : 0;
	__syncthreads();
	for (int s = blockDim.x / 2; s > 0; s >>= 1) {
		if (t < s)
			part[t] += part[t + s];
		__syncthreads();
	}
	if (t == 0)
		atomicAdd(out, (unsigned long long)part[0]);
}

__global__ void histogram(const int *in, int *bins, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		atomicAdd(&bins[in[i] % 16], 1);
}

int main()
{
	const int n = 1 << 16;
	int *h = new int[n];
	unsigned long long want = 0;
	int wantBins[16] = { 0 };
	for (int i = 0; i < n; i++) {
		h[i] = (i * 7919) % 1000;
		want += h[i];
		wantBins[h[i] % 16]++;
	}
	int *d, *bins;
	unsigned long long *out, got = 0;
	CHECK(cudaMalloc(&d, n * sizeof(int)));
	CHECK(cudaMalloc(&out, sizeof *out));
	CHECK(cudaMalloc(&bins, 16 * sizeof(int)));
	CHECK(cudaMemcpy(d, h, n * sizeof(int), cudaMemcpyHostToDevice));
	CHECK(cudaMemset(out, 0, sizeof *out));
	CHECK(cudaMemset(bins, 0, 16 * sizeof(int)));
	sum<<<n / 256, 256>>>(d, out, n);
	histogram<<<n / 128, 128>>>(d, bins, n);
	CHECK(cudaGetLastError());
	CHECK(cudaMemcpy(&got, out, sizeof got, cudaMemcpyDeviceToHost));
	EXPECT(got == want, "sum %llu, want %llu", got, want);
	int gotBins[16];
	CHECK(cudaMemcpy(gotBins, bins, sizeof gotBins, cudaMemcpyDeviceToHost));
	for (int b = 0; b < 16; b++)
		EXPECT(gotBins[b] == wantBins[b], "bin %d: %d, want %d", b, gotBins[b], wantBins[b]);
	HASH("sum", &got, sizeof got);
	HASH("bins", gotBins, sizeof gotBins);
	std::printf("sum %llu\n", got);
	std::printf("reduce ok\n");
	return 0;
}
