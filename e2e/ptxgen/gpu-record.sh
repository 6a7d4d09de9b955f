#!/usr/bin/env bash
# Records the generated-kernel corpus on an NVIDIA GPU. Run it on the GPU
# machine from the repository root, with a ptxgen binary built elsewhere
# (CGO_ENABLED=0 go build -o ptxgen ./e2e/ptxgen/cmd/ptxgen; no Go is
# needed here):
#
#   e2e/ptxgen/gpu-record.sh PTXGEN OUTDIR [COUNT [FROM]]
#
# It writes the batch of COUNT kernels (seeds FROM...), builds gpurun
# against NVIDIA's cuda.h, runs the batch natively in JOBS processes (the
# driver's JIT compiles each module's PTX), and writes to OUTDIR:
#   h200.txt, h200.approx   the corpus (commit them as e2e/ptxgen/corpus/)
#   report.txt              the emulator against the device, per instruction
#   diffs.bin               the device's outputs of kernels that differ
#   h200-probes.bin         the probe kernels' outputs (commit it too)
#   probes.txt              the emulator against the device on the probes
# Variables: CUDA_INC (default /usr/local/cuda/include), CUDA_LIB (the
# driver's directory, default /usr/local/nvidia/lib64), JOBS (default 12).
set -uo pipefail

ptxgen=${1:?usage: gpu-record.sh PTXGEN OUTDIR [COUNT [FROM]]}
out=${2:?usage: gpu-record.sh PTXGEN OUTDIR [COUNT [FROM]]}
count=${3:-4096}
from=${4:-1}
here=$(cd "$(dirname "$0")" && pwd)
inc=${CUDA_INC:-/usr/local/cuda/include}
lib=${CUDA_LIB:-/usr/local/nvidia/lib64}
jobs=${JOBS:-12}
stubs=$(dirname "$(find /usr/local/cuda/ -path '*stubs/libcuda.so' 2>/dev/null | head -n 1)")
work=$(mktemp -d /tmp/ptxgen.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

gcc -O2 -std=gnu11 -Wall -I"$inc" -o "$work/gpurun" "$here/gpurun/gpurun.c" -L"$stubs" -lcuda || exit 1
t0=$(date +%s)
"$ptxgen" batch -dir "$work/batch" -from "$from" -count "$count" || exit 1
t1=$(date +%s)
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUDA_CACHE_DISABLE=1
# slice I: a kernel that faults ends its process (the device state is
# lost), so the slice goes on in a new one from the next kernel.
slice() {
	local i=$1 start=0 rc
	while :; do
		"$work/gpurun" "$work/batch" "$work/r$i.$start.bin" "$i" "$jobs" "$start"
		rc=$?
		[[ $rc == 3 ]] || return $rc
		start=$(cat "$work/r$i.$start.bin.next")
	done
}
for i in $(seq 0 $((jobs - 1))); do
	slice "$i" &
done
wait
# The probe kernels (bit-field edges, NaNs, float atomics), kept raw.
"$ptxgen" probe -dir "$work/probe" && "$work/gpurun" "$work/probe" "$out/h200-probes.bin"
t2=$(date +%s)
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
cuda=$("${NVCC:-/usr/local/cuda/bin/nvcc}" --version 2>/dev/null | sed -n 's/^Cuda compilation tools, //p')
"$ptxgen" record -dir "$work/batch" -results "$work/r*.bin" -corpus "$out/h200.txt" \
	-note "${gpu:-unknown GPU}; PTX compiled by the driver's JIT; toolkit ${cuda:-unknown}" \
	-report "$out/report.txt" -diffs "$out/diffs.bin"
status=$?
"$ptxgen" probecheck -results "$out/h200-probes.bin" >"$out/probes.txt" 2>&1
t3=$(date +%s)
echo "gpu-record.sh: batch $((t1 - t0)) s, device runs $((t2 - t1)) s, record and emulator comparison $((t3 - t2)) s"
exit $status
