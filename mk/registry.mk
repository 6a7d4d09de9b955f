# The cluster registry's load benchmark (registry/benchregistry): 50
# simulated gpuds heartbeating and 1,000 sessions changing owner against
# an embedded etcd; docs/cluster.md has the figures and the extrapolation.
.PHONY: bench-registry
bench-registry:
	$(GO) run ./registry/benchregistry -hosts 50 -sessions 1000 -duration 20s
