# End-to-end tests: real gpuds in network namespaces (e2e/harness), clients
# built with gcc against build/include/cuda.h and build/lib. `make test`
# runs them with everything else; `make e2e` runs only them.

.PHONY: e2e
e2e: build
	$(GO) test -count=1 -timeout 20m ./e2e/...
