# `make demo`: two hosts, a CUDA workload migrated back and forth while it
# runs (e2e/demo/demo.sh); exits 0 when the workload's result checks out.
# DEMO_MIB, DEMO_STEPS, DEMO_SLEEP_MS and DEMO_MIGRATIONS tune it.
demo: deps build
	@bash e2e/demo/demo.sh

# `make bench` runs bench-checkpoint too: checkpoint, restore and migration
# timings and bytes for sessions of 16 MiB, 256 MiB and 1 GiB (BENCH_SIZES),
# checkpoint stall against durability, migration downtime against a
# stop-and-copy checkpoint, and a plot of them in build/bench-checkpoint.svg.
BENCH_STEPS += bench-checkpoint
.PHONY: bench-checkpoint
bench-checkpoint: deps build
	@bash e2e/demo/bench.sh

# bench-criu: CRIU alone (dump leaving the process running, restore beside
# it) for worker-shaped processes of 16 MiB, 256 MiB and 1 GiB: the floor
# under the pipelines' times.
BENCH_STEPS += bench-criu
.PHONY: bench-criu
bench-criu: deps
	$(GO) test -count=1 -run '^$$' -bench CRIU -benchtime 1x ./checkpoint/
