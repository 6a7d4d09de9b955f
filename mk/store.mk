# `make bench-store`: the image store on 1 GiB of realistic checkpoint data
# (zero, incompressible and repetitive pages), put and get against the zstd
# command line (-T0 -1) over the same bytes in the same run, then a second
# put with 5% of the pages changed; prints one table of ratios.
# BENCH_STORE_SIZE (bytes) and BENCH_STORE_DIR (scratch space) tune it;
# BENCH_STORE_PROCS="1 2 4 8 16 32" runs it once per GOMAXPROCS value, to
# see how put, get and export+import scale with cores.

BENCH_STEPS += bench-store
.PHONY: bench-store

BENCH_STORE_SIZE ?= 1073741824
BENCH_STORE_DIR  ?=
BENCH_STORE_PROCS ?=
BENCH_STORE_ARGS = -size $(BENCH_STORE_SIZE) $(if $(BENCH_STORE_DIR),-dir $(BENCH_STORE_DIR))

bench-store:
	@command -v zstd >/dev/null || apt-get install -y zstd
ifeq ($(strip $(BENCH_STORE_PROCS)),)
	$(GO) run ./images/internal/benchstore $(BENCH_STORE_ARGS)
else
	$(GO) build -o $(or $(TMPDIR),/tmp)/gpuctl-benchstore ./images/internal/benchstore
	for p in $(BENCH_STORE_PROCS); do GOMAXPROCS=$$p $(or $(TMPDIR),/tmp)/gpuctl-benchstore $(BENCH_STORE_ARGS) || exit 1; done
	rm -f $(or $(TMPDIR),/tmp)/gpuctl-benchstore
endif
