/* stepreplay makes the driver calls of a PyTorch training process, with
 * the counts NVIDIA's driver recorded for three small training steps
 * (../shared/traces/cuda13/torch1.txt: Linear-ReLU-Linear with AdamW and a
 * Conv2d, cuBLAS, cuDNN), as far as this library serves them: the hot
 * questions (cuCtxGetDevice, cuDeviceGetAttribute,
 * cuDevicePrimaryCtxGetState, cuCtxGetCurrent), device queries, stream and
 * event creation, allocations, copies, memsets and launches. Run it with
 * GPUCTL_STATS to count the round trips, and with GPUCTL_NO_CACHE=1 for the
 * count without the client's caches.
 * Usage: stepreplay [REPEATS]   (default 1) */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CK(call)                                                                                  \
	do {                                                                                      \
		CUresult r_ = (call);                                                             \
		if (r_ != CUDA_SUCCESS) {                                                         \
			fprintf(stderr, "stepreplay: %s failed with %d\n", #call, (int)r_);       \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

static const char *ptx = ".version 7.0\n.target sm_52\n.address_size 64\n"
			 ".visible .entry nop(.param .u64 p)\n{\n  ret;\n}\n";

int main(int argc, char **argv)
{
	int repeats = argc > 1 ? atoi(argv[1]) : 1;
	CUdevice dev;
	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CK(cuCtxSetCurrent(ctx));
	CUmodule m;
	CUfunction f;
	CK(cuModuleLoadData(&m, ptx));
	CK(cuModuleGetFunction(&f, m, "nop"));
	for (int rep = 0; rep < repeats; rep++) {
		/* The counts of torch1.txt, in batches that interleave the
		 * way a step does. */
		CUstream s[33];
		CUevent e[38];
		CUdeviceptr p[15];
		for (int i = 0; i < 33; i++)
			CK(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING));
		for (int i = 0; i < 38; i++)
			CK(cuEventCreate(&e[i], CU_EVENT_DISABLE_TIMING));
		for (int i = 0; i < 15; i++)
			CK(cuMemAlloc(&p[i], 1 << 20));
		char name[128];
		size_t mem;
		CUuuid uuid;
		int v, n;
		for (int i = 0; i < 10; i++)
			CK(cuDeviceGet(&dev, 0));
		for (int i = 0; i < 6; i++) {
			CK(cuDriverGetVersion(&v));
			CK(cuDeviceGetName(name, sizeof name, dev));
		}
		for (int i = 0; i < 5; i++) {
			CK(cuDeviceTotalMem(&mem, dev));
			CK(cuDeviceGetUuid(&uuid, dev));
			CK(cuDeviceGetCount(&n));
		}
		int launches = 0;
		for (int i = 0; i < 953; i++) {
			CUdevice d;
			CK(cuCtxGetDevice(&d));
			if (i < 646) {
				CK(cuDeviceGetAttribute(&v, (CUdevice_attribute)(1 + i % 100), dev));
			}
			if (i < 286) {
				unsigned fl;
				int active;
				CK(cuDevicePrimaryCtxGetState(dev, &fl, &active));
			}
			if (i < 119) {
				CUcontext c;
				CK(cuCtxGetCurrent(&c));
			}
			if (i < 20) {
				CUstreamCaptureStatus st;
				CK(cuStreamIsCapturing(s[i % 33], &st));
			}
			if (i % 11 == 0 && launches < 86) {
				void *args[] = { &p[launches % 15] };
				CK(cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s[launches % 33], args, NULL));
				launches++;
			}
			if (i < 7) {
				CK(cuMemsetD8Async(p[i], 0, 1024, s[0]));
			}
			if (i < 6) {
				char buf[256] = { 0 };
				CK(cuMemcpyHtoDAsync(p[i], buf, sizeof buf, s[0]));
			}
		}
		for (int i = 0; i < 7; i++)
			CK(cuStreamSynchronize(s[i]));
		/* The trace frees 4 allocations and destroys one stream; the
		 * rest lives until the process ends. */
		for (int i = 0; i < 4; i++)
			CK(cuMemFree(p[i]));
		CK(cuStreamDestroy(s[32]));
	}
	CK(cuModuleUnload(m));
	printf("stepreplay: ok\n");
	return 0;
}
