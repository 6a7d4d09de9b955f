# `make bench-remoting`: the remoting path end to end on loopback — the C
# benchmark client through build/lib/libcuda.so.1 and `gpuctl run`, against
# a real gpud and its worker on the emulated device — with raw-TCP
# baselines from the same run, printed as one table of ratios.

BENCH_STEPS += bench-remoting
.PHONY: bench-remoting

bench-remoting: $(BUILD)/bin/gpud $(BUILD)/bin/gpuctl $(BUILD)/lib/libcuda.so.1 $(BUILD)/include/cuda.h
	@mkdir -p $(BUILD)/bench
	$(CC) -O2 -Wall -I$(BUILD)/include -o $(BUILD)/bench/remoting-bench remoting/interposer/testdata/bench.c \
		-L$(BUILD)/lib -lcuda
	$(GO) run ./e2e/harness/benchremote -root $(CURDIR) -bench $(BUILD)/bench/remoting-bench
