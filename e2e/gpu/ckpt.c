// gpuckpt: runs the driver's checkpoint API on another process, one step
// at a time, for the suite's manual baseline and for diagnosis:
//
//   gpuckpt PID STEP...      STEP: state lock checkpoint restore unlock ctx
//
// ctx ignores PID: it retains GPU 0's primary context and allocates in it,
// which tells whether a new process can use the GPU (the driver refuses
// cuInit for a while after some checkpoint steps of other processes).
//
// restore maps GPUs when GPUCKPT_MAP is set, as "OLD:NEW,OLD:NEW" CUDA
// ordinals of this process (every GPU the target process saw must appear:
// the driver wants a full permutation). Each step prints
// "STEP rc=N ms=T"; the exit status is that of the first failing step.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static CUresult restore(int pid)
{
	CUcheckpointRestoreArgs args;
	CUcheckpointGpuPair pairs[64];
	unsigned n = 0;
	const char *map = getenv("GPUCKPT_MAP");
	memset(&args, 0, sizeof args);
	memset(pairs, 0, sizeof pairs);
	for (const char *p = map; p != NULL && *p && n < 64;) {
		int from, to;
		CUdevice a, b;
		CUresult r;
		if (sscanf(p, "%d:%d", &from, &to) != 2) {
			fprintf(stderr, "GPUCKPT_MAP %s: want OLD:NEW,...\n", map);
			return CUDA_ERROR_INVALID_VALUE;
		}
		if ((r = cuDeviceGet(&a, from)) || (r = cuDeviceGet(&b, to)) ||
		    (r = cuDeviceGetUuid(&pairs[n].oldUuid, a)) ||
		    (r = cuDeviceGetUuid(&pairs[n].newUuid, b)))
			return r;
		n++;
		p = strchr(p, ',');
		if (p)
			p++;
	}
	if (n > 0) {
		args.gpuPairs = pairs;
		args.gpuPairsCount = n;
	}
	return cuCheckpointProcessRestore(pid, &args);
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: gpuckpt PID state|lock|checkpoint|restore|unlock|ctx...\n");
		return 2;
	}
	int pid = atoi(argv[1]);
	CUresult r = cuInit(0);
	if (r != CUDA_SUCCESS) {
		printf("cuInit rc=%d\n", (int)r);
		return 1;
	}
	for (int i = 2; i < argc; i++) {
		const char *step = argv[i];
		double t = now_ms();
		if (!strcmp(step, "state")) {
			CUprocessState s;
			r = cuCheckpointProcessGetState(pid, &s);
			printf("state=%d ", (int)s);
		} else if (!strcmp(step, "lock")) {
			CUcheckpointLockArgs a;
			memset(&a, 0, sizeof a);
			a.timeoutMs = 10000;
			r = cuCheckpointProcessLock(pid, &a);
		} else if (!strcmp(step, "checkpoint")) {
			CUcheckpointCheckpointArgs a;
			memset(&a, 0, sizeof a);
			r = cuCheckpointProcessCheckpoint(pid, &a);
		} else if (!strcmp(step, "restore")) {
			r = restore(pid);
		} else if (!strcmp(step, "ctx")) {
			CUdevice d;
			CUcontext c;
			CUdeviceptr p;
			if ((r = cuDeviceGet(&d, 0)) == CUDA_SUCCESS &&
			    (r = cuDevicePrimaryCtxRetain(&c, d)) == CUDA_SUCCESS) {
				if ((r = cuCtxSetCurrent(c)) == CUDA_SUCCESS &&
				    (r = cuMemAlloc(&p, 1 << 20)) == CUDA_SUCCESS)
					r = cuMemFree(p);
				cuDevicePrimaryCtxRelease(d);
			}
		} else if (!strcmp(step, "unlock")) {
			CUcheckpointUnlockArgs a;
			memset(&a, 0, sizeof a);
			r = cuCheckpointProcessUnlock(pid, &a);
		} else {
			fprintf(stderr, "unknown step %s\n", step);
			return 2;
		}
		const char *name = "";
		cuGetErrorName(r, &name);
		printf("%s rc=%d %s ms=%.1f\n", step, (int)r, name, now_ms() - t);
		if (r != CUDA_SUCCESS)
			return 1;
	}
	return 0;
}
