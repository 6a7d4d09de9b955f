// Streams and events with pinned host memory: work split over streams,
// asynchronous copies both ways, an event the second stream waits for,
// and timing between events.
#include "check.h"

__global__ void scale(float *x, float f, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		x[i] *= f;
}

int main()
{
	const int n = 1 << 16, parts = 4, chunk = n / parts;
	float *h;
	CHECK(cudaMallocHost(&h, n * sizeof(float)));
	float *mapped;
	CHECK(cudaHostAlloc(&mapped, 64, cudaHostAllocMapped));
	for (int i = 0; i < n; i++)
		h[i] = (float)i;
	float *d;
	CHECK(cudaMalloc(&d, n * sizeof(float)));
	cudaStream_t s[parts];
	for (int p = 0; p < parts; p++)
		CHECK(cudaStreamCreateWithFlags(&s[p], cudaStreamNonBlocking));
	cudaEvent_t start, stop, ready;
	CHECK(cudaEventCreate(&start));
	CHECK(cudaEventCreate(&stop));
	CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
	CHECK(cudaEventRecord(start, s[0]));
	for (int p = 0; p < parts; p++) {
		float *dp = d + p * chunk, *hp = h + p * chunk;
		CHECK(cudaMemcpyAsync(dp, hp, chunk * sizeof(float), cudaMemcpyHostToDevice, s[p]));
		scale<<<chunk / 256, 256, 0, s[p]>>>(dp, 2.0f, chunk);
	}
	// Stream 1 scales stream 0's part again once stream 0 is done with it.
	CHECK(cudaEventRecord(ready, s[0]));
	CHECK(cudaStreamWaitEvent(s[1], ready, 0));
	scale<<<chunk / 256, 256, 0, s[1]>>>(d, 3.0f, chunk);
	for (int p = 0; p < parts; p++)
		CHECK(cudaMemcpyAsync(h + p * chunk, d + p * chunk, chunk * sizeof(float), cudaMemcpyDeviceToHost, s[p]));
	CHECK(cudaEventRecord(stop, s[1]));
	for (int p = 0; p < parts; p++)
		CHECK(cudaStreamSynchronize(s[p]));
	CHECK(cudaEventSynchronize(stop));
	EXPECT(cudaEventQuery(stop) == cudaSuccess, "event not complete after synchronize");
	float ms = -1;
	CHECK(cudaEventElapsedTime(&ms, start, stop));
	EXPECT(ms >= 0, "elapsed %f ms", ms);
	for (int i = 0; i < n; i++) {
		float want = (float)i * (i < chunk ? 6.0f : 2.0f);
		EXPECT(h[i] == want, "h[%d] = %f, want %f", i, h[i], want);
	}
	HASH("h", h, n * sizeof(float));
	unsigned int flags = 0;
	CHECK(cudaHostGetFlags(&flags, h));
	for (int p = 0; p < parts; p++)
		CHECK(cudaStreamDestroy(s[p]));
	CHECK(cudaEventDestroy(start));
	CHECK(cudaEventDestroy(stop));
	CHECK(cudaEventDestroy(ready));
	CHECK(cudaFreeHost(h));
	CHECK(cudaFreeHost(mapped));
	CHECK(cudaFree(d));
	std::printf("streams ok\n");
	return 0;
}
