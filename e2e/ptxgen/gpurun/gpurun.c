// gpurun runs a batch of generated kernels natively through the CUDA
// driver API and records their outputs for `ptxgen record`.
//
//   gpurun BATCHDIR RESULTS [SLICE NSLICES [START]]
//
// BATCHDIR holds what `ptxgen batch` wrote: a manifest with one line per
// kernel ("SEED GRID BLOCK INLEN OUTLEN APPROXLEN SCALAR [TRACESTRIDE]")
// and, per seed, SEED.ptx, SEED.in and SEED.init. Kernel i runs when
// i % NSLICES == SLICE, so that several processes share the batch. The
// driver compiles each module's PTX (its JIT is ptxas). RESULTS receives
// one record per kernel, written through as it completes:
//
//   u64 seed, u32 status (0 ok, 1 compile error, 2 launch error),
//   u32 n, then n bytes: the output buffer followed by the approximate
//   buffer, or the error text.
//
// A kernel with a TRACESTRIDE (`ptxgen batch -trace`) takes a fifth
// parameter, a zeroed trace buffer of TRACESTRIDE bytes per thread, each
// thread's region starting with the number of 8-byte entries it wrote;
// the record then goes on with, per thread, a u32 count and the entries.
//
// A kernel that faults, or runs longer than GPURUN_TIMEOUT seconds
// (default 20; recorded as CUDA_ERROR_LAUNCH_TIMEOUT), leaves the
// process's device state unusable, so after recording it gpurun writes
// the index of the next kernel to RESULTS.next and exits with status 3;
// the caller runs it again from START = that index (gpu-record.sh does).
// Before each kernel it writes the kernel's index to RESULTS.cur, which
// tells a caller that had to kill it where it stopped.
//
// GPURUN_JIT_O (0 to 4) sets the JIT's optimisation level
// (CU_JIT_OPTIMIZATION_LEVEL; the driver's default is 4): a kernel whose
// outputs change with it is compiled into something other than its PTX
// says, which the level that agrees with the ISA shows.
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void die(const char *what, CUresult r) {
	const char *name = "?";
	cuGetErrorName(r, &name);
	fprintf(stderr, "gpurun: %s: %s\n", what, name);
	exit(1);
}

static void *slurp(const char *dir, unsigned long long seed, const char *ext, size_t *n, int nul) {
	char path[4096];
	snprintf(path, sizeof path, "%s/%llu.%s", dir, seed, ext);
	FILE *f = fopen(path, "rb");
	if (!f) {
		perror(path);
		exit(1);
	}
	fseek(f, 0, SEEK_END);
	long len = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc(len + 1);
	if (fread(b, 1, len, f) != (size_t)len) {
		perror(path);
		exit(1);
	}
	fclose(f);
	if (nul)
		b[len] = 0;
	*n = len;
	return b;
}

static void record(FILE *out, unsigned long long seed, uint32_t status, const void *a, uint32_t na, const void *b, uint32_t nb) {
	uint64_t s = seed;
	uint32_t n = na + nb;
	fwrite(&s, 8, 1, out);
	fwrite(&status, 4, 1, out);
	fwrite(&n, 4, 1, out);
	if (na)
		fwrite(a, 1, na, out);
	if (nb)
		fwrite(b, 1, nb, out);
	fflush(out);
}

// finish waits for the launch, polling so that a kernel that never ends
// is reported instead of hanging the batch.
static CUresult finish(double limit) {
	struct timespec t0, now, nap = {0, 200000};
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		CUresult r = cuStreamQuery(0);
		if (r != CUDA_ERROR_NOT_READY)
			return r == CUDA_SUCCESS ? cuCtxSynchronize() : r;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 > limit)
			return CUDA_ERROR_LAUNCH_TIMEOUT;
		nanosleep(&nap, NULL);
	}
}

static void errtext(FILE *out, unsigned long long seed, uint32_t status, CUresult r, const char *log) {
	const char *name = "?";
	cuGetErrorName(r, &name);
	char msg[8192];
	snprintf(msg, sizeof msg, "%s%s%s", name, log && *log ? "\n" : "", log ? log : "");
	record(out, seed, status, msg, (uint32_t)strlen(msg), NULL, 0);
}

int main(int argc, char **argv) {
	if (argc != 3 && argc != 5 && argc != 6) {
		fprintf(stderr, "usage: gpurun BATCHDIR RESULTS [SLICE NSLICES [START]]\n");
		return 2;
	}
	const char *dir = argv[1];
	int slice = argc >= 5 ? atoi(argv[3]) : 0, nslices = argc >= 5 ? atoi(argv[4]) : 1;
	int start = argc == 6 ? atoi(argv[5]) : 0;
	CUresult r;
	CUdevice dev;
	CUcontext ctx;
	(void)ctx;
	if ((r = cuInit(0)) != CUDA_SUCCESS)
		die("cuInit", r);
	if ((r = cuDeviceGet(&dev, 0)) != CUDA_SUCCESS)
		die("cuDeviceGet", r);
	if ((r = cuDevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS || (r = cuCtxSetCurrent(ctx)) != CUDA_SUCCESS)
		die("primary context", r);
	char mpath[4096];
	snprintf(mpath, sizeof mpath, "%s/manifest", dir);
	FILE *man = fopen(mpath, "r");
	if (!man) {
		perror(mpath);
		return 1;
	}
	FILE *out = fopen(argv[2], "wb");
	if (!out) {
		perror(argv[2]);
		return 1;
	}
	char cur[4096];
	snprintf(cur, sizeof cur, "%s.cur", argv[2]);
	const char *jo = getenv("GPURUN_JIT_O");
	int jitO = jo && *jo ? atoi(jo) : -1;
	if (jitO > 4) {
		fprintf(stderr, "gpurun: GPURUN_JIT_O=%s: want an optimisation level from 0 to 4\n", jo);
		return 2;
	}
	const char *lim = getenv("GPURUN_TIMEOUT");
	double limit = lim && atof(lim) > 0 ? atof(lim) : 20;
	unsigned long long seed;
	unsigned grid, block, inlen, outlen, alen, scalar, tstride;
	char line[512];
	int i = 0, ran = 0, failed = 0;
	while (fgets(line, sizeof line, man)) {
		tstride = 0;
		int nf = sscanf(line, "%llu %u %u %u %u %u %u %u", &seed, &grid, &block, &inlen, &outlen, &alen, &scalar, &tstride);
		if (nf < 7)
			continue;
		int idx = i++;
		if (idx % nslices != slice || idx < start)
			continue;
		// Where a process killed from outside (a hang in the driver)
		// stopped: the caller resumes after it.
		FILE *cf = fopen(cur, "w");
		if (cf)
			fprintf(cf, "%d\n", idx), fclose(cf);
		size_t n;
		char *ptx = slurp(dir, seed, "ptx", &n, 1);
		void *in = slurp(dir, seed, "in", &n, 0);
		void *init = slurp(dir, seed, "init", &n, 0);
		char log[4096] = "";
		CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_OPTIMIZATION_LEVEL};
		void *vals[] = {log, (void *)(uintptr_t)sizeof log, (void *)(uintptr_t)(jitO < 0 ? 0 : jitO)};
		CUmodule mod;
		ran++;
		if ((r = cuModuleLoadDataEx(&mod, ptx, jitO < 0 ? 2 : 3, opts, vals)) != CUDA_SUCCESS) {
			errtext(out, seed, 1, r, log);
			failed++;
			free(ptx), free(in), free(init);
			continue;
		}
		CUfunction fn;
		if ((r = cuModuleGetFunction(&fn, mod, "k")) != CUDA_SUCCESS)
			die("cuModuleGetFunction", r);
		CUdeviceptr din, dout, dap, dtr = 0;
		size_t asz = alen ? alen : 8;
		size_t threads = (size_t)grid * block, tsz = threads * tstride;
		if ((r = cuMemAlloc(&din, inlen)) || (r = cuMemAlloc(&dout, outlen)) || (r = cuMemAlloc(&dap, asz)))
			die("cuMemAlloc", r);
		if ((r = cuMemcpyHtoD(din, in, inlen)) || (r = cuMemcpyHtoD(dout, init, outlen)) || (r = cuMemsetD8(dap, 0, asz)))
			die("copy in", r);
		if (tsz && ((r = cuMemAlloc(&dtr, tsz)) || (r = cuMemsetD8(dtr, 0, tsz))))
			die("trace buffer", r);
		void *args[] = {&din, &dout, &dap, &scalar, &dtr};
		r = cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, 0, args, NULL);
		if (r == CUDA_SUCCESS)
			r = finish(limit);
		if (r != CUDA_SUCCESS) {
			errtext(out, seed, 2, r, NULL);
			fclose(out);
			char next[4096];
			snprintf(next, sizeof next, "%s.next", argv[2]);
			FILE *nf = fopen(next, "w");
			if (!nf) {
				perror(next);
				return 1;
			}
			fprintf(nf, "%d\n", idx + 1);
			fclose(nf);
			fprintf(stderr, "gpurun slice %d/%d: kernel %llu failed; run again from %d\n", slice, nslices, seed, idx + 1);
			return 3;
		}
		// The record: outputs, approximate outputs, then the trace in
		// its compact form (each thread's count and entries).
		size_t rest = (size_t)outlen + alen, tlen = 0;
		unsigned char *ho = malloc(outlen + asz), *ht = NULL, *tc = NULL;
		if ((r = cuMemcpyDtoH(ho, dout, outlen)) || (r = cuMemcpyDtoH(ho + outlen, dap, asz)))
			die("copy out", r);
		if (tsz) {
			ht = malloc(tsz), tc = malloc(tsz);
			if ((r = cuMemcpyDtoH(ht, dtr, tsz)))
				die("copy out the trace", r);
			for (size_t t = 0; t < threads; t++) {
				uint64_t cnt;
				memcpy(&cnt, ht + t * tstride, 8);
				if (cnt > tstride / 8 - 1)
					cnt = tstride / 8 - 1; // cannot happen: ptxgen sizes regions for every path
				uint32_t c32 = (uint32_t)cnt;
				memcpy(tc + tlen, &c32, 4);
				memcpy(tc + tlen + 4, ht + t * tstride + 8, 8 * cnt);
				tlen += 4 + 8 * cnt;
			}
		}
		record(out, seed, 0, ho, (uint32_t)rest, tc, (uint32_t)tlen);
		cuMemFree(din), cuMemFree(dout), cuMemFree(dap);
		if (dtr)
			cuMemFree(dtr);
		cuModuleUnload(mod);
		free(ho), free(ht), free(tc), free(ptx), free(in), free(init);
	}
	fclose(out);
	fprintf(stderr, "gpurun slice %d/%d: %d kernels, %d failed\n", slice, nslices, ran, failed);
	return 0;
}
