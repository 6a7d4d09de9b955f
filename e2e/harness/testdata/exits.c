/* exits: a CUDA driver-API client that ends in different ways, for the
 * tests of what becomes of its session. Modes (argv[1]):
 *   exit  allocates, queues asynchronous memsets and returns from main
 *         with them outstanding; prints "exits: exit ok"
 *   fork  a forked child exits normally while this process goes on; then
 *         checks that its session still serves it; prints "exits: fork ok"
 *   kill  allocates, then kills itself with SIGKILL (no exit handlers)
 * Exit status 0 on success; otherwise one line on stderr. */
#include <cuda.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(call)                                                                                      \
	do {                                                                                             \
		CUresult r_ = (call);                                                                    \
		if (r_ != CUDA_SUCCESS) {                                                                \
			const char *n_ = "?";                                                            \
			cuGetErrorName(r_, &n_);                                                         \
			fprintf(stderr, "exits: %s failed: %s (%d) at line %d\n", #call, n_, (int)r_, __LINE__); \
			exit(10);                                                                        \
		}                                                                                        \
	} while (0)

static CUdeviceptr setup(size_t n)
{
	CUdevice dev;
	CUcontext ctx;
	CUdeviceptr p;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuMemAlloc(&p, n));
	return p;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	const size_t n = 16 << 20;
	CUdeviceptr p = setup(n);
	if (!strcmp(mode, "exit")) {
		for (unsigned i = 0; i < 32; i++)
			CHECK(cuMemsetD32Async(p, i, n / 4, NULL));
		printf("exits: exit ok\n");
		return 0;
	}
	if (!strcmp(mode, "fork")) {
		CHECK(cuMemsetD32(p, 1, n / 4));
		fflush(stdout);
		pid_t pid = fork();
		if (pid == 0)
			exit(0); /* a normal exit, with the library's exit handling */
		int st = 0;
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "exits: the forked child did not exit 0 (status %#x)\n", st);
			return 11;
		}
		uint32_t v = 0;
		CHECK(cuMemsetD32(p, 7, n / 4));
		CHECK(cuMemcpyDtoH(&v, p + n - 4, 4));
		if (v != 7) {
			fprintf(stderr, "exits: read %u after the child's exit, want 7\n", v);
			return 11;
		}
		printf("exits: fork ok\n");
		return 0;
	}
	if (!strcmp(mode, "kill")) {
		CHECK(cuCtxSynchronize());
		printf("exits: killing myself\n");
		fflush(stdout);
		kill(getpid(), SIGKILL);
		pause();
	}
	fprintf(stderr, "usage: exits exit|fork|kill\n");
	return 2;
}
