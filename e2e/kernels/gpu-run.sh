#!/usr/bin/env bash
# Runs the kernel corpus and the C test programs natively on an NVIDIA GPU and
# packs the outputs for the golden record. Run it on the GPU machine from the
# repository root:
#
#   e2e/kernels/gpu-run.sh OUTDIR
#
# It needs gcc, NVIDIA's cuda.h (CUDA_INC, default /usr/local/cuda/include)
# and the driver's libcuda (CUDA_LIB, default /usr/local/nvidia/lib64). It
# writes to OUTDIR:
#   kernels-golden.tar.gz   golden-sm_75/ and golden-sm_90/: every case's outputs
#   corpus.log              kernelrun's lines (per-case launch times included)
#   cprogs.log              the C programs' lines
#   summary.txt             one line per step
# Back on a machine with Go:
#   tar xzf kernels-golden.tar.gz -C /tmp/g
#   go run ./e2e/kernels/cmd/kernelcheck -out /tmp/g/golden-sm_90 \
#       -write-golden e2e/kernels/golden/sm_90 -note "$(head -1 OUTDIR/summary.txt)"
# (and the same for sm_75), then commit e2e/kernels/golden/.
set -uo pipefail

out=${1:?usage: gpu-run.sh OUTDIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
inc=${CUDA_INC:-/usr/local/cuda/include}
lib=${CUDA_LIB:-/usr/local/nvidia/lib64}
work=$(mktemp -d /tmp/gpuctl-kernels.XXXXXX)
mkdir -p "$out"
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
nvcc_v=$(sed -n 's/^Cuda compilation tools, //p' "$root/e2e/kernels/ptx/NVCC_VERSION" 2>/dev/null)
note "GPU: ${gpu:-unknown}; PTX from ${nvcc_v:-unknown nvcc}"

export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if ! "$root/e2e/cprogs/build.sh" "$inc" "$lib" "$work/bin" >"$out/build.log" 2>&1; then
	note "build: FAILED (see build.log)"
	exit 1
fi
note "build: ok"

status=0
: >"$out/corpus.log"
for target in sm_75 sm_90; do
	if "$root/e2e/kernels/run-corpus.sh" "$work/bin/kernelrun" "$target" "$work/golden-$target" >>"$out/corpus.log" 2>&1; then
		note "corpus $target: ok ($(ls "$work/golden-$target" | wc -l) output files)"
	else
		note "corpus $target: FAILED (see corpus.log)"
		status=1
	fi
done
tar czf "$out/kernels-golden.tar.gz" -C "$work" golden-sm_75 golden-sm_90

export GPUCTL_PTX_DIR=$root/e2e/kernels/ptx
: >"$out/cprogs.log"
for run in "vecadd" "reduction" "matmul" "matmul 256 256 256" "warpreduce" "pipeline" "pipeline 16777216 16" "errors" "stateful 16 100 0"; do
	# shellcheck disable=SC2086
	if timeout 300 "$work/bin/"$run >>"$out/cprogs.log" 2>&1; then
		note "$run: ok"
	else
		note "$run: FAILED (see cprogs.log)"
		status=1
	fi
done
result=$(sed -n 's/^RESULT //p' "$out/cprogs.log" | tail -1)
if [[ $result == 37c1c2d9bc145459 ]]; then
	note "stateful RESULT $result: equals the value every other run prints"
else
	note "stateful RESULT ${result:-none}: want 37c1c2d9bc145459"
	status=1
fi
rm -rf "$work"
exit $status
