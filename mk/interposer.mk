# The client interposer: build/lib/libcuda.so.1 (+ libcuda.so link) and
# build/include/cuda.h, built with gcc from remoting/interposer. The
# generated parts (remoting/interposer/gen, remoting/wire/ops_gen.go,
# remoting/dispatch/dispatch_gen.go, remoting/cu/result_gen.go) come from
# remoting/spec.

CC ?= gcc
INTERPOSER_DIR    := remoting/interposer
INTERPOSER_SRCS   := $(sort $(wildcard $(INTERPOSER_DIR)/src/*.c $(INTERPOSER_DIR)/gen/*.c))
INTERPOSER_DEPS   := $(INTERPOSER_SRCS) $(wildcard $(INTERPOSER_DIR)/src/*.h $(INTERPOSER_DIR)/gen/*.h) \
                     $(INTERPOSER_DIR)/include/cuda.h $(INTERPOSER_DIR)/gen/libcuda.map
INTERPOSER_CFLAGS := -O2 -g -fPIC -std=gnu11 -pthread -Wall -Wextra -Wno-unused-parameter \
                     -I$(INTERPOSER_DIR)/include -I$(INTERPOSER_DIR)/src -I$(INTERPOSER_DIR)/gen

BUILD_OUTPUTS += $(BUILD)/lib/libcuda.so.1 $(BUILD)/lib/libcuda.so $(BUILD)/include/cuda.h
TEST_STEPS    += check-generated
BENCH_STEPS   += bench-interposer

$(BUILD)/lib/libcuda.so.1: $(INTERPOSER_DEPS)
	@mkdir -p $(dir $@)
	$(CC) $(INTERPOSER_CFLAGS) -shared -Wl,-soname,libcuda.so.1 \
		-Wl,--version-script=$(INTERPOSER_DIR)/gen/libcuda.map -Wl,-z,defs -o $@ $(INTERPOSER_SRCS) -ldl

$(BUILD)/lib/libcuda.so: $(BUILD)/lib/libcuda.so.1
	ln -sfn libcuda.so.1 $@

$(BUILD)/include/cuda.h: $(INTERPOSER_DIR)/include/cuda.h
	@mkdir -p $(dir $@)
	cp $< $@

# `make generate` rewrites the generated files from remoting/spec.
.PHONY: generate check-generated bench-interposer
generate::
	$(GO) generate ./remoting/spec

# `make check-generated` regenerates into a scratch tree and fails when any
# checked-in generated file differs.
GEN_FILES := remoting/wire/ops_gen.go remoting/dispatch/dispatch_gen.go remoting/cu/result_gen.go \
             $(wildcard $(INTERPOSER_DIR)/gen/*)
check-generated::
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	$(GO) run ./remoting/spec/gen -root $$tmp && \
	ok=1 && for f in $(GEN_FILES); do \
		if ! cmp -s $$f $$tmp/$$f; then echo "$$f is stale: run make generate" >&2; ok=0; fi; \
	done && \
	n=$$(cd $$tmp && find . -type f | wc -l) && \
	if [ $$n -ne $(words $(GEN_FILES)) ]; then echo "the generator writes $$n files, $(words $(GEN_FILES)) are checked in: run make generate" >&2; ok=0; fi && \
	[ $$ok = 1 ]

# `make bench-interposer`: the C benchmark against the in-process test
# server on loopback, next to raw-TCP baselines from the same run; once
# with real (emulated) kernel execution and once with launches that run
# nothing, which isolates the transport.
bench-interposer: $(BUILD)/lib/libcuda.so.1 $(BUILD)/include/cuda.h
	@mkdir -p $(BUILD)/bench
	$(GO) build -o $(BUILD)/bench/gpuctl-testserver ./remoting/interposer/testserver/gpuctl-testserver
	$(CC) -O2 -Wall -I$(BUILD)/include -o $(BUILD)/bench/interposer-bench $(INTERPOSER_DIR)/testdata/bench.c \
		-L$(BUILD)/lib -l:libcuda.so.1 -Wl,-rpath,$(BUILD)/lib
	@bash $(INTERPOSER_DIR)/testdata/bench.sh $(BUILD)/bench
