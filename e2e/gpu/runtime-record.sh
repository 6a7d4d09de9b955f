#!/usr/bin/env bash
# Records what e2e/runtime/testdata's CUDA runtime programs compute on
# this machine's GPU, for TestRuntimeAPIPrograms to hold the emulated
# device to: builds each with the host's nvcc (static cudart, SASS for the
# GPU plus PTX), runs it natively, and writes its "hash LABEL HEX" lines,
# prefixed with the program's name, to OUT/runtime-h200.txt (copy it to
# e2e/testdata/runtime-h200.txt). Needs no gpuctl build.
#
# Usage: e2e/gpu/runtime-record.sh OUT
# Environment: NVCC (default /usr/local/cuda/bin/nvcc), ARCH (default 90),
# DRVLIB (directory of NVIDIA's libcuda.so.1).
set -u
[ $# -eq 1 ] || { echo "usage: $0 OUT" >&2; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=$1
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
ARCH=${ARCH:-90}
DRVLIB=${DRVLIB:-/usr/local/nvidia/lib64}
WORK=$(mktemp -d /tmp/gpuctl-rtrec.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$OUT"
src=$ROOT/e2e/runtime/testdata
gen="-gencode arch=compute_$ARCH,code=sm_$ARCH -gencode arch=compute_$ARCH,code=compute_$ARCH"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
rec=$OUT/runtime-h200.txt
{
	echo "# e2e/gpu/runtime-record.sh: ${gpu:-unknown GPU}, $("$NVCC" --version | tail -1)"
	echo "# PROGRAM hash LABEL HEX (FNV-1a of an output's bytes; e2e/runtime/testdata/check.h)"
} >"$rec"
fail=0
for p in vadd reduce streams symbols dynshared thrust; do
	b=$WORK/$p
	# shellcheck disable=SC2086
	if ! "$NVCC" -O2 $gen -cudart static -o "$b" "$src/$p.cu" >"$OUT/$p.build" 2>&1; then
		echo "FAIL build $p: $(tail -3 "$OUT/$p.build")"; fail=1; continue
	fi
	if ! env LD_LIBRARY_PATH="$DRVLIB" timeout 120 "$b" >"$OUT/$p.native" 2>&1 || ! grep -q "^$p ok" "$OUT/$p.native"; then
		echo "FAIL run $p: $(tail -2 "$OUT/$p.native" | tr '\n' '|')"; fail=1; continue
	fi
	grep '^hash ' "$OUT/$p.native" | sed "s/^/$p /" >>"$rec"
	echo "ok   $p: $(grep -c '^hash ' "$OUT/$p.native") outputs"
done
echo "wrote $rec"
exit $fail
