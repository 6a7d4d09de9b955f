#!/bin/bash
# Runs the interposer benchmark (bench.c) against gpuctl-testserver, with
# emulated kernel execution and with null launches. $1: the directory
# holding both binaries.
set -euo pipefail
dir=$1
run() {
	local fifo out
	fifo=$(mktemp -u) out=$(mktemp)
	mkfifo "$fifo"
	"$dir/gpuctl-testserver" "$@" <"$fifo" >"$out" &
	local pid=$!
	exec 3>"$fifo"
	for _ in $(seq 50); do [ "$(wc -l <"$out")" -ge 2 ] && break; sleep 0.1; done
	GPUCTL_SERVER=$(sed -n 1p "$out") GPUCTL_TOKEN=bench "$dir/interposer-bench" "$(sed -n 2p "$out")"
	exec 3>&-
	wait "$pid"
	rm -f "$fifo" "$out"
}
echo "interposer, emulated kernels:"
run
echo
echo "interposer, null launches (transport only):"
run -null-launch
