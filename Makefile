# gpuctl build. `make` builds everything README.md's "Build outputs" lists
# under build/: gpud, gpuctl, libcuda.so.1 and cuda.h.
# Each part of the tree keeps its own rules in mk/*.mk; this file only
# names the top-level targets.

GO        ?= go
BUILD     := $(CURDIR)/build
export GOFLAGS ?= -buildvcs=false

# Tests run from binaries outside the checkout, where gpud's search for
# CRIU (criubin.Locate: --criu, GPUCTL_CRIU, the bundle beside the binary,
# the checkout's .deps for build/bin/gpud, PATH) does not reach: point them
# at the bundle `make deps` built, when there is one. Expanded when each
# recipe runs, so the bundle built by this very `make test` counts.
export GPUCTL_CRIU ?= $(if $(wildcard $(CURDIR)/.deps/criu/criu),$(CURDIR)/.deps/criu/criu)

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
