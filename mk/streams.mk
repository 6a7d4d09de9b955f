# `make bench-streams`: the shape of NVIDIA's simpleStreams sample (upload,
# kernel, download in four chunks) through `gpuctl run` against a real gpud
# on the emulated device: synchronous copies against asynchronous ones from
# pageable and from page-locked memory (BENCH_STREAMS_MIB per pass).

BENCH_STEPS += bench-streams
.PHONY: bench-streams
BENCH_STREAMS_MIB ?= 32

bench-streams: $(BUILD)/bin/gpud $(BUILD)/bin/gpuctl $(BUILD)/lib/libcuda.so.1 $(BUILD)/lib/libcuda.so $(BUILD)/include/cuda.h
	@mkdir -p $(BUILD)/bench
	$(CC) -O2 -Wall -I$(BUILD)/include -o $(BUILD)/bench/streambench remoting/interposer/testdata/streambench.c \
		-L$(BUILD)/lib -lcuda
	$(GO) run ./e2e/harness/benchstreams -root $(CURDIR) -bench $(BUILD)/bench/streambench -mib $(BENCH_STREAMS_MIB)
