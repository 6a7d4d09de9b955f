# `make deps` installs what tests, the demo and the benchmarks need: CRIU
# >= 4.1 (a private bundle under .deps/criu/ when the system lacks one),
# iproute2, gcc and zstd, Slurm and munge (for the Slurm end-to-end test),
# and a private nvcc (CUDA 12.4) under .deps/nvcc/ for the runtime-API
# end-to-end tests. See scripts/deps.sh and docs/checkpoint.md.
deps:
	@bash scripts/deps.sh
