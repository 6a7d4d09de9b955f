# `make bench-store`: the image store on 1 GiB of realistic checkpoint data
# (zero, incompressible and repetitive pages), put and get against the zstd
# command line (-T0 -1) over the same bytes in the same run, then a second
# put with 5% of the pages changed; prints one table of ratios.
# BENCH_STORE_SIZE (bytes) and BENCH_STORE_DIR (scratch space) tune it.

BENCH_STEPS += bench-store
.PHONY: bench-store

BENCH_STORE_SIZE ?= 1073741824
BENCH_STORE_DIR  ?=

bench-store:
	@command -v zstd >/dev/null || apt-get install -y zstd
	$(GO) run ./images/internal/benchstore -size $(BENCH_STORE_SIZE) $(if $(BENCH_STORE_DIR),-dir $(BENCH_STORE_DIR))
