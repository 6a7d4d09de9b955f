#!/usr/bin/env bash
# Preemption on a real GPU: a session of priority 0 holds MIB (default
# 8 GiB) of device memory, one of priority 10 then allocates as much, which
# fits only if gpud preempts the first; then a labelled session is
# preempted on one gpud and resumed on another (both on this host's GPU).
# Prints benchpreempt's table (see e2e/harness/benchpreempt).
#
#   e2e/gpu/bench-preempt.sh          (MIB=8192 by default)
#
# Needs build/ (make build), the benchmark binary (BENCH, default
# build/bench/benchpreempt; built here when Go is installed, else build it
# beforehand with go build -o build/bench/benchpreempt ./e2e/harness/benchpreempt),
# the CRIU bundle at CRIU (default .deps/criu/criu), gcc and root. gpud is told the device holds 1.5 x MIB (--preempt-mem), so that
# two sessions of MIB do not fit whatever the GPU's size.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
MIB=${MIB:-8192}
CRIU=${CRIU:-$ROOT/.deps/criu/criu}
WORK=$(mktemp -d /tmp/gpuctl-bench-preempt.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

[ -x "$ROOT/build/bin/gpud" ] || { echo "bench-preempt: build first (make build)" >&2; exit 1; }
[ -x "$CRIU" ] || { echo "bench-preempt: no CRIU at $CRIU; set CRIU or run make deps" >&2; exit 1; }
cc -O2 -Wall -I"$ROOT/build/include" -I"$ROOT/e2e/cprogs" -o "$WORK/memhold" "$ROOT/e2e/cprogs/memhold.c" \
	-L"$ROOT/build/lib" -lcuda
BENCH=${BENCH:-$ROOT/build/bench/benchpreempt}
if [ ! -x "$BENCH" ]; then
	(cd "$ROOT" && go build -o "$BENCH" ./e2e/harness/benchpreempt)
fi
GPUCTL_CRIU=$CRIU "$BENCH" -root "$ROOT" -memhold "$WORK/memhold" -backend cuda -mib "$MIB"
