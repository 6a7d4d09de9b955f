# gpuctl build. `make` builds everything README.md's "Build outputs" lists
# under build/: gpud, gpuctl, libcuda.so.1 and cuda.h.
# Each part of the tree keeps its own rules in mk/*.mk; this file only
# names the top-level targets.

GO        ?= go
BUILD     := $(CURDIR)/build
export GOFLAGS ?= -buildvcs=false

.PHONY: all build test bench demo deps clean generate check-generated
all: build

# Parts append their outputs to BUILD_OUTPUTS and their test steps to
# TEST_STEPS in their mk/*.mk fragment.
BUILD_OUTPUTS := $(BUILD)/bin/gpud $(BUILD)/bin/gpuctl
TEST_STEPS    :=
BENCH_STEPS   :=

include $(sort $(wildcard mk/*.mk))

build: $(BUILD_OUTPUTS)

$(BUILD)/bin/gpud $(BUILD)/bin/gpuctl: FORCE
	@mkdir -p $(BUILD)/bin
	$(GO) build -o $@ ./cmd/$(notdir $@)

FORCE:

# `make test` installs what it needs (CRIU >= 4.1 via `make deps`), then
# runs unit tests, fuzz seed corpora and the end-to-end suite.
test: deps build $(TEST_STEPS)
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 40m ./...

bench: deps build $(BENCH_STEPS)

clean:
	rm -rf $(BUILD)
