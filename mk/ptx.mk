# `make bench-ptx`: the PTX emulator's throughput on nvcc output — thread-
# instructions per second (total and per core), a 1M-element saxpy and a
# 256x256 tiled matmul — printed as one table, then the Go benchmarks.
BENCH_STEPS += bench-ptx
.PHONY: bench-ptx
bench-ptx:
	GPUCTL_PTX_BENCH=1 $(GO) test -count=1 -run '^TestBenchReport$$' -v ./remoting/backend/emulated/ptx/ | grep -E '^\s*\|' | sed 's/^[[:space:]]*//'
	$(GO) test -count=1 -run '^$$' -bench 'Saxpy|Matmul|ALU' -benchtime 3x ./remoting/backend/emulated/ptx/
	$(GO) test -count=1 -run '^$$' -bench 'LaunchEmpty' ./remoting/backend/emulated/ptx/

# `make bench-ptx-compare [PTX_BENCH_BASE=COMMIT] [PTX_BENCH_ROUNDS=N]`: the
# bench-ptx workloads at an older commit against the working tree, in CPU
# time (getrusage), interleaved; median and spread per workload.
.PHONY: bench-ptx-compare
bench-ptx-compare:
	GO=$(GO) PTX_BENCH_BASE=$(PTX_BENCH_BASE) PTX_BENCH_ROUNDS=$(PTX_BENCH_ROUNDS) scripts/bench-ptx-compare.sh

# `make ptxgen-import RESULTS=DIR`: a recording gpu-collect.sh brought back
# (DIR/results.tar.gz, or its .partNN pieces) becomes the corpus: its
# h200.txt, h200.approx and h200-probes.bin.gz replace corpus/'s, the
# replay rewrites h200.refused, and a second replay (with the probes) must
# pass.
.PHONY: ptxgen-import
ptxgen-import:
	@test -n "$(RESULTS)" || { echo "usage: make ptxgen-import RESULTS=DIR (gpu-collect.sh's OUTDIR)"; exit 2; }
	e2e/ptxgen/import.sh "$(RESULTS)"
