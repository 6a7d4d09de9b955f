# `make bench-modules`: module upload once on loopback. A C client loads a
# large module (16 and 128 MiB; BENCH_MODULE_MIB) from a fresh process each
# time through `gpuctl run` against a real gpud on the emulated device:
# sent as bytes, first by hash (a miss), and by hash again (a hit).

BENCH_STEPS += bench-modules
.PHONY: bench-modules
BENCH_MODULE_MIB ?= 16,128

bench-modules: $(BUILD)/bin/gpud $(BUILD)/bin/gpuctl $(BUILD)/lib/libcuda.so.1 $(BUILD)/include/cuda.h
	@mkdir -p $(BUILD)/bench
	$(CC) -O2 -Wall -I$(BUILD)/include -o $(BUILD)/bench/modbench remoting/interposer/testdata/modbench.c \
		-L$(BUILD)/lib -lcuda
	$(GO) run ./e2e/harness/benchmodules -root $(CURDIR) -bench $(BUILD)/bench/modbench -mib $(BENCH_MODULE_MIB)
