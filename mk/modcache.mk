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

# `make bench-roundtrips`: the round trips of a PyTorch process's driver
# calls (the counts of ../shared/traces/cuda13/torch1.txt, replayed by
# stepreplay.c) without and with the client's caches, per op.
BENCH_STEPS += bench-roundtrips
.PHONY: bench-roundtrips

bench-roundtrips: $(BUILD)/bin/gpud $(BUILD)/bin/gpuctl $(BUILD)/lib/libcuda.so.1 $(BUILD)/include/cuda.h
	@mkdir -p $(BUILD)/bench
	$(CC) -O2 -Wall -I$(BUILD)/include -o $(BUILD)/bench/stepreplay remoting/interposer/testdata/stepreplay.c \
		-L$(BUILD)/lib -lcuda
	$(GO) run ./e2e/harness/benchsteps -root $(CURDIR) -bench $(BUILD)/bench/stepreplay
