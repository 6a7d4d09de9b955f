// gpurun runs a batch of generated kernels natively through the CUDA
// driver API and records their outputs for `ptxgen record`.
//
//   gpurun BATCHDIR RESULTS [SLICE NSLICES [START]]
//
// BATCHDIR holds what `ptxgen batch` wrote: a manifest with one line per
// kernel ("SEED GRID BLOCK INLEN OUTLEN APPROXLEN SCALAR") and, per seed,
// SEED.ptx, SEED.in and SEED.init. Kernel i runs when i % NSLICES == SLICE,
// so that several processes share the batch. The driver compiles each
// module's PTX (its JIT is ptxas). RESULTS receives one record per kernel:
//
//   u64 seed, u32 status (0 ok, 1 compile error, 2 launch error),
//   u32 n, then n bytes: the output buffer followed by the approximate
//   buffer, or the error text.
//
// A kernel that faults leaves the process's device state unusable, so
// after recording it gpurun writes the index of the next kernel to
// RESULTS.next and exits with status 3; the caller runs it again from
// START = that index (gpu-record.sh does).
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	unsigned long long seed;
	unsigned grid, block, inlen, outlen, alen, scalar;
	int i = 0, ran = 0, failed = 0;
	while (fscanf(man, "%llu %u %u %u %u %u %u", &seed, &grid, &block, &inlen, &outlen, &alen, &scalar) == 7) {
		int idx = i++;
		if (idx % nslices != slice || idx < start)
			continue;
		size_t n;
		char *ptx = slurp(dir, seed, "ptx", &n, 1);
		void *in = slurp(dir, seed, "in", &n, 0);
		void *init = slurp(dir, seed, "init", &n, 0);
		char log[4096] = "";
		CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
		void *vals[] = {log, (void *)(uintptr_t)sizeof log};
		CUmodule mod;
		ran++;
		if ((r = cuModuleLoadDataEx(&mod, ptx, 2, opts, vals)) != CUDA_SUCCESS) {
			errtext(out, seed, 1, r, log);
			failed++;
			free(ptx), free(in), free(init);
			continue;
		}
		CUfunction fn;
		if ((r = cuModuleGetFunction(&fn, mod, "k")) != CUDA_SUCCESS)
			die("cuModuleGetFunction", r);
		CUdeviceptr din, dout, dap;
		size_t asz = alen ? alen : 8;
		if ((r = cuMemAlloc(&din, inlen)) || (r = cuMemAlloc(&dout, outlen)) || (r = cuMemAlloc(&dap, asz)))
			die("cuMemAlloc", r);
		if ((r = cuMemcpyHtoD(din, in, inlen)) || (r = cuMemcpyHtoD(dout, init, outlen)) || (r = cuMemsetD8(dap, 0, asz)))
			die("copy in", r);
		void *args[] = {&din, &dout, &dap, &scalar};
		r = cuLaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, 0, args, NULL);
		if (r == CUDA_SUCCESS)
			r = cuCtxSynchronize();
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
			fprintf(stderr, "gpurun slice %d/%d: kernel %llu faulted; run again from %d\n", slice, nslices, seed, idx + 1);
			return 3;
		}
		void *ho = malloc(outlen), *ha = malloc(asz);
		if ((r = cuMemcpyDtoH(ho, dout, outlen)) || (r = cuMemcpyDtoH(ha, dap, asz)))
			die("copy out", r);
		record(out, seed, 0, ho, outlen, ha, alen);
		cuMemFree(din), cuMemFree(dout), cuMemFree(dap);
		cuModuleUnload(mod);
		free(ho), free(ha), free(ptx), free(in), free(init);
	}
	fclose(out);
	fprintf(stderr, "gpurun slice %d/%d: %d kernels, %d failed\n", slice, nslices, ran, failed);
	return 0;
}
