// Shared by the runtime-API test programs: CHECK fails the program with
// the call, the error's name and the line; every program ends by printing
// "<name> ok" so that the test can tell a full run from a silent exit.
// HASH prints "hash LABEL HEX", the 64-bit FNV-1a of an output's bytes, so
// that a run's full results can be compared with a recording of the same
// program on a GPU (e2e/gpu/runtime-record.sh).
#pragma once
#include <cstddef>
#include <cstdio>
#include <cstdlib>

static inline void HASH(const char *label, const void *p, size_t n)
{
	unsigned long long h = 0xcbf29ce484222325ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= ((const unsigned char *)p)[i];
		h *= 0x100000001b3ULL;
	}
	std::printf("hash %s %016llx\n", label, h);
}

#define CHECK(call)                                                                      \
	do {                                                                             \
		cudaError_t e_ = (call);                                                 \
		if (e_ != cudaSuccess) {                                                 \
			std::printf("%s:%d: %s: %s\n", __FILE__, __LINE__, #call,        \
				    cudaGetErrorName(e_));                               \
			std::exit(1);                                                    \
		}                                                                        \
	} while (0)

#define EXPECT(cond, ...)                                                                \
	do {                                                                             \
		if (!(cond)) {                                                           \
			std::printf("%s:%d: ", __FILE__, __LINE__);                      \
			std::printf(__VA_ARGS__);                                        \
			std::printf("\n");                                               \
			std::exit(1);                                                    \
		}                                                                        \
	} while (0)
