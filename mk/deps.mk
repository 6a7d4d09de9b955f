# `make deps` installs what tests, the demo and the benchmarks need: CRIU
# >= 4.1 (a private bundle under .deps/criu/ when the system lacks one),
# iproute2, gcc and zstd. See scripts/deps.sh and docs/checkpoint.md.
deps:
	@bash scripts/deps.sh
