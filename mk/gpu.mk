# The GPU suite (e2e/gpu/run.sh): runs on an NVIDIA host with build/ and the
# CRIU bundle (.deps/criu) carried from a build machine. It needs no Go, so
# it depends on nothing here; run `make build deps gpu-tools` first where Go
# is. OUT=DIR keeps its logs and table there.
.PHONY: gpu-test gpu-tools
gpu-test:
	bash e2e/gpu/run.sh

# gpu-tools adds what the suite uses when present: kernelcheck compares the
# kernel corpus's native and remote outputs with each case's tolerance
# (without it the suite requires byte-identical files); cuda-conformance.test
# runs the backend conformance suite (remoting/backend/backendtest) on the
# cuda backend; ptxgen records the generated-kernel corpus
# (e2e/ptxgen/gpu-record.sh); the test binaries under test/ and the
# benchmark are what e2e/gpu/tls.sh runs on a host without Go.
gpu-tools: $(BUILD)/bin/kernelcheck $(BUILD)/bin/cuda-conformance.test $(BUILD)/bin/ptxgen \
	$(BUILD)/test/tlsrec.test $(BUILD)/test/e2e.test $(BUILD)/bench/benchremote $(BUILD)/bench/remoting-bench

$(BUILD)/bin/kernelcheck: FORCE
	@mkdir -p $(BUILD)/bin
	$(GO) build -o $@ ./e2e/kernels/cmd/kernelcheck

$(BUILD)/bin/cuda-conformance.test: FORCE
	@mkdir -p $(BUILD)/bin
	$(GO) test -c -o $@ ./remoting/backend/cuda

$(BUILD)/bin/ptxgen: FORCE
	@mkdir -p $(BUILD)/bin
	CGO_ENABLED=0 $(GO) build -o $@ ./e2e/ptxgen/cmd/ptxgen
$(BUILD)/test/tlsrec.test $(BUILD)/test/e2e.test: FORCE
	@mkdir -p $(BUILD)/test
	$(GO) test -c -o $@ ./$(if $(findstring tlsrec,$@),remoting/tlsrec,e2e)

$(BUILD)/bench/benchremote: FORCE
	@mkdir -p $(BUILD)/bench
	$(GO) build -o $@ ./e2e/harness/benchremote

$(BUILD)/bench/remoting-bench: remoting/interposer/testdata/bench.c $(BUILD)/lib/libcuda.so.1 $(BUILD)/include/cuda.h
	@mkdir -p $(BUILD)/bench
	$(CC) -O2 -Wall -I$(BUILD)/include -o $@ $< -L$(BUILD)/lib -lcuda

# gpu-tls: TLS on the client data path on this host (e2e/gpu/tls.sh): kernel
# TLS offload, the record layer's and the end-to-end TLS tests, and the
# benchmark of plaintext against TLS.
.PHONY: gpu-tls
gpu-tls:
	bash e2e/gpu/tls.sh

# gpu-apps: real applications (NVIDIA's samples, Thrust, PyTorch) natively and
# through gpuctl, and a PyTorch training run migrated mid-run
# (e2e/gpu/apps.sh). NVIDIA's samples are read from .samples/ (see there).
.PHONY: gpu-apps
gpu-apps:
	bash e2e/gpu/apps.sh

# gpu-ckpt-bench: checkpoint stall and durability, restore, the second
# checkpoint of an idle session and migration downtime (idle, and a client
# rewriting 1 GB/s) at 1, 4, 8 and 32 GiB (as time and memory allow)
# against the driver's checkpoint plus CRIU by hand, every gpuctl row first
# and the by-hand rows last, with a plot in OUT/scaling.svg
# (e2e/gpu/ckpt-bench.sh). With
# build/bin/cuda-conformance.test (make gpu-tools) it first runs the cuda
# backend's tests of worker-mapped memory and the GPU hash kernel.
.PHONY: gpu-ckpt-bench
gpu-ckpt-bench:
	bash e2e/gpu/ckpt-bench.sh
