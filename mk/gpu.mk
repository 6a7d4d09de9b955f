# The GPU suite (e2e/gpu/run.sh): runs on an NVIDIA host with build/ and the
# CRIU bundle (.deps/criu) carried from a build machine. It needs no Go, so
# it depends on nothing here; `make build deps` first where Go is present.
# OUT=DIR keeps its logs and table there.
.PHONY: gpu-test
gpu-test:
	bash e2e/gpu/run.sh
