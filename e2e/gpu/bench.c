// bench: the driver-API microbenchmarks of the GPU suite. Built twice,
// against NVIDIA's libcuda (native) and gpuctl's (through gpud), and run
// the same way; it prints one "key value" line per measurement:
//
//   bench KERNELS.ptx [COPY_MIB]
//
//   rtt_us          median of one synchronous call (cuStreamQuery) in µs
//   launch_us       mean cost of one asynchronous empty launch in µs
//   launches_per_s  the same as a rate, including the final synchronise
//   htod_gbs        cuMemcpyHtoD from pageable (malloc'd, touched) memory
//   dtoh_gbs        cuMemcpyDtoH into pageable memory
//   htod_pinned_gbs, dtoh_pinned_gbs   the same through cuMemAllocHost
//                   memory, or "NA" when the library does not provide it
#include "common.h"

#include <stdint.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

// copy_gbs times reps copies of size bytes each way and returns the best
// rate of each direction.
static void copy_gbs(CUdeviceptr d, void *h, size_t size, int reps, double *htod, double *dtoh)
{
	*htod = *dtoh = 0;
	for (int i = 0; i < reps; i++) {
		double t = now_ms();
		CK(cuMemcpyHtoD(d, h, size));
		double r = size / ((now_ms() - t) * 1e6);
		if (r > *htod)
			*htod = r;
		t = now_ms();
		CK(cuMemcpyDtoH(h, d, size));
		r = size / ((now_ms() - t) * 1e6);
		if (r > *dtoh)
			*dtoh = r;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench KERNELS.ptx [COPY_MIB]\n");
		return 2;
	}
	size_t size = (size_t)(argc > 2 ? atoi(argv[2]) : 256) << 20;
	CUdevice dev;
	CUmodule mod = open_device(argv[1], &dev);
	CUfunction noop;
	CK(cuModuleGetFunction(&noop, mod, "noop"));

	// Synchronous round trip: cuStreamQuery must ask the device every time.
	enum { RTT = 20000 };
	static double lat[RTT];
	for (int i = 0; i < 2000; i++)
		cuStreamQuery(NULL);
	for (int i = 0; i < RTT; i++) {
		double t = now_ms();
		CUresult r = cuStreamQuery(NULL);
		lat[i] = (now_ms() - t) * 1e3;
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY)
			CK(r);
	}
	qsort(lat, RTT, sizeof lat[0], cmp);
	printf("rtt_us %.2f\n", lat[RTT / 2]);
	printf("rtt_p99_us %.2f\n", lat[RTT * 99 / 100]);

	// Asynchronous launches of an empty kernel, then one synchronise.
	enum { LAUNCHES = 200000 };
	for (int i = 0; i < 2000; i++)
		CK(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	CK(cuCtxSynchronize());
	double t = now_ms();
	for (int i = 0; i < LAUNCHES; i++)
		CK(cuLaunchKernel(noop, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	double issued = now_ms() - t;
	CK(cuCtxSynchronize());
	double total = now_ms() - t;
	printf("launch_us %.3f\n", issued * 1e3 / LAUNCHES);
	printf("launches_per_s %.0f\n", LAUNCHES / (total / 1e3));

	CUdeviceptr d;
	CK(cuMemAlloc(&d, size));
	void *h = malloc(size);
	memset(h, 0x5a, size);
	double up, down;
	copy_gbs(d, h, size, 5, &up, &down);
	printf("htod_gbs %.2f\n", up);
	printf("dtoh_gbs %.2f\n", down);
	free(h);

	void *p = NULL;
	if (cuMemAllocHost(&p, size) == CUDA_SUCCESS) {
		memset(p, 0x5a, size);
		copy_gbs(d, p, size, 5, &up, &down);
		printf("htod_pinned_gbs %.2f\n", up);
		printf("dtoh_pinned_gbs %.2f\n", down);
		cuMemFreeHost(p);
	} else {
		printf("htod_pinned_gbs NA\ndtoh_pinned_gbs NA\n");
	}
	CK(cuMemFree(d));
	return 0;
}
