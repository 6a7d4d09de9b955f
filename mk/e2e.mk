# End-to-end tests: real gpuds in network namespaces (e2e/harness), clients
# built with gcc against build/include/cuda.h and build/lib. `make test`
# runs them with everything else; `make e2e` runs only them.

.PHONY: e2e
e2e: build
	$(GO) test -count=1 -timeout 20m ./e2e/...

# `make soak`: the chaos soak (e2e/soak_test.go) for SOAK_DURATION (10
# minutes by default): clients on three namespace hosts while checkpoints,
# migrations, preemptions, link cuts, gpud and worker SIGKILLs happen at
# random; it prints a table of what happened. SOAK_SEED replays the random
# choices of an earlier run. A 60-second soak is part of `make test`.
SOAK_DURATION ?= 10m
.PHONY: soak
soak: deps build
	@mkdir -p $(BUILD); log=$(BUILD)/soak.log; \
	GPUCTL_SOAK=$(SOAK_DURATION) $(if $(SOAK_SEED),GPUCTL_SOAK_SEED=$(SOAK_SEED)) \
		$(GO) test -count=1 -timeout 0 -run '^TestSoak$$' -v ./e2e/ >$$log 2>&1; rc=$$?; \
	grep -v '^    harness.go:[0-9]*: gpud\[' $$log; echo "soak: the full log, gpud's lines included, is $$log"; exit $$rc
