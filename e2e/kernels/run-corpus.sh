#!/usr/bin/env bash
# Runs every case file of the corpus with kernelrun and writes the outputs to
# one directory, ready for `kernelcheck -out DIR` (CPU references) or
# `kernelcheck -out DIR -against OTHER` (e.g. the emulator against a GPU).
#
#   e2e/kernels/run-corpus.sh KERNELRUN TARGET OUTDIR
#
# TARGET is the PTX flavour, sm_75 or sm_90. PTX_DIR overrides the PTX
# directory (default: e2e/kernels/ptx). CASES_DIR overrides the case
# directory. Natively, KERNELRUN links NVIDIA's libcuda; through gpud, run this
# script under `gpuctl run --server HOST:PORT -- ...`.
#
# Each case file holds one module's cases and runs in its own process, so a
# sticky error in one (the oob_* files) cannot affect the others.
set -uo pipefail

if [[ $# -ne 3 ]]; then
	echo "usage: run-corpus.sh KERNELRUN TARGET OUTDIR" >&2
	exit 2
fi
kernelrun=$1 target=$2 out=$3
here=$(cd "$(dirname "$0")" && pwd)
ptx_dir=${PTX_DIR:-$here/ptx}
cases_dir=${CASES_DIR:-$here/cases}
mkdir -p "$out"

failed=()
for f in "$cases_dir"/*.case; do
	module=$(awk '$1 == "module" { print $2; exit }' "$f")
	ptx=$ptx_dir/$module.$target.ptx
	if [[ ! -f $ptx ]]; then
		echo "FAIL $(basename "$f"): no PTX file $ptx (run build-ptx.sh on a machine with nvcc)" >&2
		failed+=("$(basename "$f")")
		continue
	fi
	if ! "$kernelrun" "$f" "$ptx" "$out"; then
		failed+=("$(basename "$f")")
	fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
	echo "run-corpus.sh: failed: ${failed[*]}" >&2
	exit 1
fi
echo "run-corpus.sh: all case files ran; outputs in $out"
