// Shared by the runtime-API test programs: CHECK fails the program with
// the call, the error's name and the line; every program ends by printing
// "<name> ok" so that the test can tell a full run from a silent exit.
#pragma once
#include <cstdio>
#include <cstdlib>

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
