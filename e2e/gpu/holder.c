// holder: keeps MIB of incompressible data on the GPU and checks all of it
// on the GPU every PERIOD_MS, appending one line per check to LOG:
//
//   holder MIB LOG KERNELS.ptx [PERIOD_MS [idle|rewrite=MIB_PER_S]]
//
// Lines: "start ...", "ready ...", then "iter N ok t=MS" or "iter N BAD=K".
// A checkpoint, restore or migration must leave every later line "ok" with
// N still counting up; the gap in t across it is the client's stall.
// "idle" only checks: the data never changes after the fill, as in a
// session that holds memory and waits. "rewrite=R" changes about R MiB a
// second: each step adds 1 to the next window of R*PERIOD_MS/1000 MiB,
// cycling through the data, and the check knows how often each window
// was reached (a session that keeps writing part of its memory while it
// migrates).
#include "common.h"

#include <stdint.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: holder MIB LOG KERNELS.ptx [PERIOD_MS [idle|rewrite=MIB_PER_S]]\n");
		return 2;
	}
	uint64_t mib = strtoull(argv[1], NULL, 10), n = mib << 18; // 4-byte elements
	FILE *log = fopen(argv[2], "a");
	if (log == NULL) {
		perror(argv[2]);
		return 2;
	}
	setvbuf(log, NULL, _IOLBF, 0);
	int period = argc > 4 ? atoi(argv[4]) : 50;
	int idle = argc > 5 && strcmp(argv[5], "idle") == 0;
	uint64_t w = 0; // rewrite: elements a step bumps
	if (argc > 5 && strncmp(argv[5], "rewrite=", 8) == 0) {
		uint64_t rate = strtoull(argv[5] + 8, NULL, 10);
		w = (rate << 18) * (uint64_t)period / 1000;
		w = w < 1 ? 1 : w > n ? n : w;
	}
	uint32_t seed = 0x5eed0000u ^ (uint32_t)mib;

	CUdevice dev;
	CUmodule mod = open_device(argv[3], &dev);
	CUfunction fill, bump, check;
	CK(cuModuleGetFunction(&fill, mod, "fill"));
	CK(cuModuleGetFunction(&bump, mod, "bump"));
	CK(cuModuleGetFunction(&check, mod, "check"));
	CUfunction bumpw, checkw;
	CK(cuModuleGetFunction(&bumpw, mod, "bump_window"));
	CK(cuModuleGetFunction(&checkw, mod, "check_windows"));
	char name[128], bus[64];
	CK(cuDeviceGetName(name, sizeof name, dev));
	CK(cuDeviceGetPCIBusId(bus, sizeof bus, dev));
	fprintf(log, "start pid=%d dev=\"%s\" bus=%s mib=%llu\n", (int)getpid(), name, bus,
		(unsigned long long)mib);

	CUdeviceptr a, bad;
	CK(cuMemAlloc(&a, n * 4));
	CK(cuMemAlloc(&bad, 8));
	unsigned grid = 2048, block = 256;
	void *fa[] = {&a, &n, &seed};
	CK(cuLaunchKernel(fill, grid, 1, 1, block, 1, 1, 0, NULL, fa, NULL));
	CK(cuCtxSynchronize());
	fprintf(log, "ready t=%.1f\n", now_ms());

	for (uint32_t it = 1;; it++) {
		void *ba[] = {&a, &n};
		uint32_t want = idle ? 0 : it;
		void *ca[] = {&a, &n, &seed, &want, &bad};
		unsigned long long h = ~0ull;
		if (w) {
			uint64_t lo = (uint64_t)(it - 1) % (n / w) * w;
			void *bw[] = {&a, &lo, &w};
			void *cw[] = {&a, &n, &seed, &it, &w, &bad};
			CK(cuLaunchKernel(bumpw, grid, 1, 1, block, 1, 1, 0, NULL, bw, NULL));
			CK(cuMemsetD8(bad, 0, 8));
			CK(cuLaunchKernel(checkw, grid, 1, 1, block, 1, 1, 0, NULL, cw, NULL));
		} else {
			if (!idle)
				CK(cuLaunchKernel(bump, grid, 1, 1, block, 1, 1, 0, NULL, ba, NULL));
			CK(cuMemsetD8(bad, 0, 8));
			CK(cuLaunchKernel(check, grid, 1, 1, block, 1, 1, 0, NULL, ca, NULL));
		}
		CK(cuMemcpyDtoH(&h, bad, 8));
		if (h == 0)
			fprintf(log, "iter %u ok t=%.1f\n", it, now_ms());
		else
			fprintf(log, "iter %u BAD=%llu t=%.1f\n", it, h, now_ms());
		usleep(period * 1000);
	}
}
