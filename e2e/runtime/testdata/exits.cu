// Exits: a runtime-API program whose last device work happens at exit.
// argv[1]:
//   teardown  leaves its memory allocated and returns from main; an atexit
//             handler it registers reads the memory back and frees part of
//             it, then cudart's own exit-time teardown releases the rest
//   reset     calls cudaDeviceReset before returning
// Both end with "exits ok"; the atexit handler prints "exits: at exit ok"
// or exits with status 3.
#include "check.h"
#include <cstring>
#include <unistd.h>

__global__ void fill(int *p, int v, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		p[i] = v;
}

static int *kept;
static const int n = 1 << 20;

static void at_exit()
{
	int h[256];
	cudaError_t e = cudaMemcpy(h, kept + n - 256, sizeof h, cudaMemcpyDeviceToHost);
	if (e == cudaSuccess)
		e = cudaFree(kept);
	if (e != cudaSuccess || h[255] != 7) {
		std::printf("exits: at exit: %s, last value %d\n", cudaGetErrorName(e), h[255]);
		std::fflush(stdout);
		_exit(3);
	}
	std::printf("exits: at exit ok\n");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int *other;
	CHECK(cudaMalloc(&kept, n * sizeof(int)));
	CHECK(cudaMalloc(&other, n * sizeof(int)));
	fill<<<(n + 255) / 256, 256>>>(kept, 7, n);
	fill<<<(n + 255) / 256, 256>>>(other, 9, n);
	CHECK(cudaGetLastError());
	CHECK(cudaDeviceSynchronize());
	if (!std::strcmp(mode, "teardown")) {
		std::atexit(at_exit); // runs before cudart's own exit handlers
	} else if (!std::strcmp(mode, "reset")) {
		CHECK(cudaDeviceReset());
	} else {
		std::printf("usage: exits teardown|reset\n");
		return 2;
	}
	std::printf("exits ok\n");
	return 0;
}
