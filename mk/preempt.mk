# `make bench-preempt`: preemption on the emulated device, on loopback. A
# session of priority 10 takes the memory of one of priority 0 (its wait
# against the low session's checkpoint stall), and a labelled session is
# preempted on one gpud and resumed on another (the round trip). The GPU
# variant is e2e/gpu/bench-preempt.sh. BENCH_PREEMPT_MIB sizes the sessions.

BENCH_STEPS += bench-preempt
.PHONY: bench-preempt
BENCH_PREEMPT_MIB ?= 256

bench-preempt: $(BUILD)/bin/gpud $(BUILD)/bin/gpuctl $(BUILD)/lib/libcuda.so.1 $(BUILD)/include/cuda.h
	@mkdir -p $(BUILD)/bench
	$(CC) -O2 -Wall -I$(BUILD)/include -Ie2e/cprogs -o $(BUILD)/bench/memhold e2e/cprogs/memhold.c -L$(BUILD)/lib -lcuda
	$(GO) run ./e2e/harness/benchpreempt -root $(CURDIR) -memhold $(BUILD)/bench/memhold -mib $(BENCH_PREEMPT_MIB)
