/* Benchmark of libcuda.so.1 against gpuctl-testserver on loopback, each
 * figure next to its raw-TCP baseline measured in the same run.
 * Usage: bench RAW_HOST:PORT (GPUCTL_SERVER names the gpuctl server). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <cuda.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CK(call)                                                                        \
	do {                                                                            \
		CUresult r_ = (call);                                                   \
		if (r_ != CUDA_SUCCESS) {                                               \
			fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #call, (int)r_); \
			exit(1);                                                        \
		}                                                                       \
	} while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static int raw_dial(const char *addr, char cmd, uint64_t n)
{
	char host[64];
	const char *c = strrchr(addr, ':');
	memcpy(host, addr, c - addr);
	host[c - addr] = 0;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(atoi(c + 1)) };
	inet_pton(AF_INET, host, &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		perror("connect");
		exit(1);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	unsigned char b[9] = { (unsigned char)cmd };
	memcpy(b + 1, &n, 8);
	if (write(fd, b, cmd == 'p' ? 1 : 9) < 0)
		exit(1);
	return fd;
}

static void full(int fd, void *p, size_t n, int wr)
{
	char *b = p;
	while (n > 0) {
		ssize_t m = wr ? write(fd, b, n) : read(fd, b, n);
		if (m <= 0) {
			perror("raw");
			exit(1);
		}
		b += m;
		n -= m;
	}
}

enum { ITERS = 20000, LAUNCHES = 200000, REPS = 3 };
static double lat[ITERS];

static void pct(double *v, int n, double *med, double *p99)
{
	qsort(v, n, sizeof *v, cmp);
	*med = v[n / 2] * 1e6;
	*p99 = v[n * 99 / 100] * 1e6;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: bench RAW_HOST:PORT\n");
		return 2;
	}
	const char *raw = argv[1];
	size_t big = (size_t)256 << 20;
	char *buf = malloc(big);
	memset(buf, 1, big);

	/* Raw ping-pong. */
	int fd = raw_dial(raw, 'p', 0);
	char m[64] = { 0 };
	for (int i = 0; i < 1000; i++) {
		full(fd, m, 64, 1);
		full(fd, m, 64, 0);
	}
	for (int i = 0; i < ITERS; i++) {
		double t = now();
		full(fd, m, 64, 1);
		full(fd, m, 64, 0);
		lat[i] = now() - t;
	}
	close(fd);
	double raw_med, raw_p99;
	pct(lat, ITERS, &raw_med, &raw_p99);

	/* Raw stream both ways; throughputs are the best of REPS runs, as
	 * the copies are. */
	double t, raw_up = 0, raw_down = 0;
	for (int rep = 0; rep < REPS; rep++) {
		fd = raw_dial(raw, 's', big);
		t = now();
		full(fd, buf, big, 1);
		full(fd, m, 1, 0);
		double v = big / (now() - t) / 1e9;
		raw_up = v > raw_up ? v : raw_up;
		close(fd);
		fd = raw_dial(raw, 'r', big);
		t = now();
		full(fd, buf, big, 0);
		v = big / (now() - t) / 1e9;
		raw_down = v > raw_down ? v : raw_down;
		close(fd);
	}

	/* gpuctl. */
	CUdevice dev;
	CUcontext ctx;
	CK(cuInit(0));
	CK(cuDeviceGet(&dev, 0));
	CK(cuCtxCreate(&ctx, NULL, 0, dev));
	for (int i = 0; i < 1000; i++)
		CK(cuStreamQuery(NULL));
	for (int i = 0; i < ITERS; i++) {
		t = now();
		CK(cuStreamQuery(NULL));
		lat[i] = now() - t;
	}
	double rt_med, rt_p99;
	pct(lat, ITERS, &rt_med, &rt_p99);

	static const char *ptx = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry empty()\n{\n  ret;\n}\n";
	CUmodule mod;
	CUfunction f;
	CK(cuModuleLoadData(&mod, ptx));
	CK(cuModuleGetFunction(&f, mod, "empty"));
	for (int i = 0; i < 10000; i++)
		CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	CK(cuCtxSynchronize());
	t = now();
	for (int i = 0; i < LAUNCHES; i++)
		CK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	double tq = now() - t;
	CK(cuCtxSynchronize());
	double tl = now() - t;

	CUdeviceptr d;
	CK(cuMemAlloc(&d, big));
	CK(cuMemcpyHtoD(d, buf, big));
	CK(cuMemcpyDtoH(buf, d, big));
	double up = 0, down = 0;
	for (int rep = 0; rep < REPS; rep++) {
		t = now();
		CK(cuMemcpyHtoD(d, buf, big));
		double v = big / (now() - t) / 1e9;
		up = v > up ? v : up;
		t = now();
		CK(cuMemcpyDtoH(buf, d, big));
		v = big / (now() - t) / 1e9;
		down = v > down ? v : down;
	}

	printf("| measurement | gpuctl | raw TCP baseline | ratio | target |\n");
	printf("| --- | --- | --- | --- | --- |\n");
	printf("| sync round trip, median | %.1f us | %.1f us | %.2fx | <= 2x and <= 30 us |\n", rt_med, raw_med, rt_med / raw_med);
	printf("| sync round trip, p99 | %.1f us | %.1f us | %.2fx | |\n", rt_p99, raw_p99, rt_p99 / raw_p99);
	printf("| async empty launches (queue) | %.0f /s | | | |\n", LAUNCHES / tq);
	printf("| async empty launches (executed) | %.0f /s | | | >= 200k/s |\n", LAUNCHES / tl);
	printf("| HtoD 256 MiB (best of 3) | %.2f GB/s | %.2f GB/s | %.0f%% | >= 70%% |\n", up, raw_up, 100 * up / raw_up);
	printf("| DtoH 256 MiB (best of 3) | %.2f GB/s | %.2f GB/s | %.0f%% | >= 70%% |\n", down, raw_down, 100 * down / raw_down);
	/* For a driver that compares runs (e2e/harness/benchremote). */
	printf("BENCH rt_med_us=%.2f rt_p99_us=%.2f launches_per_s=%.0f htod_gbs=%.3f dtoh_gbs=%.3f raw_htod_gbs=%.3f raw_dtoh_gbs=%.3f\n",
	       rt_med, rt_p99, LAUNCHES / tl, up, down, raw_up, raw_down);
	return 0;
}
