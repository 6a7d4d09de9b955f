#!/usr/bin/env bash
# Records the generated-kernel corpus on an NVIDIA GPU, with instruction
# traces of the kernels the emulator does not reproduce. Run it on the GPU
# machine from the repository root, with a ptxgen binary built elsewhere
# (make gpu-tools, or CGO_ENABLED=0 go build -o ptxgen ./e2e/ptxgen/cmd/ptxgen;
# no Go is needed here):
#
#   e2e/ptxgen/gpu-record.sh PTXGEN OUTDIR [COUNT [FROM]]
#
# It writes the batch of COUNT kernels (seeds FROM...), builds gpurun
# against NVIDIA's cuda.h, runs the batch natively in JOBS processes (the
# driver's JIT compiles each module's PTX; a kernel that faults or hangs
# ends its process, and the share goes on in a new one from the next
# kernel, so no seed is lost), and writes to OUTDIR:
#   h200.txt, h200.approx   the corpus (commit them as e2e/ptxgen/corpus/)
#   report.txt              the emulator against the device, per instruction
#   failing.txt             the seeds the emulator does not reproduce ("SEED OUTCOME")
#   diffs.bin               the device's outputs of some kernels that differ
#   h200-probes.bin         the probe kernels' outputs (commit it too, gzipped)
#   probes.txt              the emulator against the device on the probes
#   traces.bin              instruction traces of the failing kernels on the
#                           device (ptxgen tracereduce), and trace.txt, their
#                           comparison with this emulator (ptxgen trace)
#   bisect.txt              for kernels that fail on the device, the first
#                           statement with which a prefix of the kernel fails,
#                           and compute-sanitizer's report of the fault; for
#                           kernels whose instrumented form computed what the
#                           emulator does, the first prefix whose outputs differ
#   jit-o0.txt, jit-o0-report.txt  those kernels at JIT optimisation level 0,
#                           and the emulator against them
#   times.txt               how long each step took
# Variables: CUDA_INC (default /usr/local/cuda/include), CUDA_LIB (the
# driver's directory, default /usr/local/nvidia/lib64), CUDA_STUBS (a
# directory with libcuda.so to link against), JOBS (default 12), RUNNER (a
# command that prefixes every gpurun, e.g. `gpuctl run ... --`),
# TRACE_SEEDS (a file of seeds to trace in place of the failing ones),
# MAX_TRACES (default 1500), MAX_BISECT (default 8), BISECT_ALSO
# (VERSION:SEED of earlier corpora's kernels that failed on the device, to
# bisect too; default 1:1741).
set -uo pipefail

ptxgen=${1:?usage: gpu-record.sh PTXGEN OUTDIR [COUNT [FROM]]}
out=${2:?usage: gpu-record.sh PTXGEN OUTDIR [COUNT [FROM]]}
count=${3:-4096}
from=${4:-1}
here=$(cd "$(dirname "$0")" && pwd)
inc=${CUDA_INC:-/usr/local/cuda/include}
lib=${CUDA_LIB:-/usr/local/nvidia/lib64}
jobs=${JOBS:-12}
stubs=${CUDA_STUBS:-$(dirname "$(find /usr/local/cuda/ -path '*stubs/libcuda.so' 2>/dev/null | head -n 1)")}
read -ra runner <<<"${RUNNER:-}"
work=$(mktemp -d /tmp/ptxgen.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"
: >"$out/times.txt"
t_last=$(date +%s)
timed() { # timed STEP: note the seconds since the last note
	local now
	now=$(date +%s)
	echo "$1 $((now - t_last)) s" | tee -a "$out/times.txt"
	t_last=$now
}

gcc -O2 -std=gnu11 -Wall -I"$inc" -o "$work/gpurun" "$here/gpurun/gpurun.c" -L"$stubs" -lcuda || exit 1
export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUDA_CACHE_DISABLE=1

# runshare BATCH PREFIX I N: runs share I of N of BATCH into PREFIX.*.bin. A
# kernel that fails ends its process (the device state is lost), so the
# share goes on in a new one from the next kernel; so does a process that
# hangs (killed after 240 s) or dies, from the kernel after the one it was
# at, which then has no record.
runshare() {
	local batch=$1 res=$2 i=$3 n=$4 start=0 rc at
	while :; do
		timeout 240 "${runner[@]}" "$work/gpurun" "$batch" "$res.$i.$start.bin" "$i" "$n" "$start"
		rc=$?
		case $rc in
		0) return 0 ;;
		3) start=$(cat "$res.$i.$start.bin.next") ;;
		*)
			at=$(cat "$res.$i.$start.bin.cur" 2>/dev/null) || return $rc
			echo "gpu-record.sh: gpurun share $i of $batch ended with status $rc at kernel index $at; going on after it" >&2
			start=$((at + 1))
			;;
		esac
	done
}
# runbatch BATCH PREFIX: runs BATCH in JOBS processes.
runbatch() {
	local i pids=() rc=0
	for i in $(seq 0 $((jobs - 1))); do
		runshare "$1" "$2" "$i" "$jobs" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do
		wait "$i" || rc=1
	done
	return $rc
}

"$ptxgen" batch -dir "$work/batch" -from "$from" -count "$count" || exit 1
timed batch
runbatch "$work/batch" "$work/r" || echo "gpu-record.sh: a gpurun share failed" >&2
timed "device runs"
# The probe kernels (bit-field edges, NaNs, float atomics), kept raw.
"$ptxgen" probe -dir "$work/probe" && "${runner[@]}" "$work/gpurun" "$work/probe" "$work/probes.bin" && cp "$work/probes.bin" "$out/h200-probes.bin"
"$ptxgen" probecheck -results "$out/h200-probes.bin" >"$out/probes.txt" 2>&1
timed probes
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
cuda=$("${NVCC:-/usr/local/cuda/bin/nvcc}" --version 2>/dev/null | sed -n 's/^Cuda compilation tools, //p')
"$ptxgen" record -dir "$work/batch" -results "$work/r.*.bin" -corpus "$out/h200.txt" \
	-note "${gpu:-unknown GPU}; PTX compiled by the driver's JIT; toolkit ${cuda:-unknown}" \
	-report "$out/report.txt" -diffs "$out/diffs.bin" -maxdiffs 60 -failing "$out/failing.txt" >/dev/null
status=$?
grep -E '^[0-9]+ kernels' "$out/report.txt"
timed "record and emulator comparison"

# Instruction traces of the kernels the emulator does not reproduce.
if [[ -n ${TRACE_SEEDS:-} ]]; then
	cp "$TRACE_SEEDS" "$work/trace-seeds"
else
	grep -E ' (MISMATCH|ERROR_DIFFERS)$' "$out/failing.txt" | head -n "${MAX_TRACES:-1500}" >"$work/trace-seeds"
fi
if [[ -s $work/trace-seeds ]]; then
	"$ptxgen" batch -dir "$work/tbatch" -trace -seeds "$work/trace-seeds" || status=1
	runbatch "$work/tbatch" "$work/t" || echo "gpu-record.sh: a gpurun share of the traces failed" >&2
	"$ptxgen" tracereduce -dir "$work/tbatch" -results "$work/t.*.bin" -out "$out/traces.bin" || status=1
	if [[ -s $out/traces.bin ]]; then
		"$ptxgen" trace -traces "$out/traces.bin" -corpus "$out/h200.txt" >"$out/trace.txt" 2>&1 || status=1
		tail -n 20 "$out/trace.txt"
	fi
fi
timed traces

# Kernels that fail on the device: the first prefix that fails names the
# statement that makes it fail, and compute-sanitizer the thread, the
# instruction and the address.
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
bisect_one() { # VERSION SEED [nosan]
	local v=$1 seed=$2 d=$work/p$1-$2
	echo "$seed" >"$d.seed"
	"$ptxgen" batch -dir "$d" -prefixes -version "$v" -seeds "$d.seed" || return
	# One process: it stops at the first prefix that fails.
	timeout 240 "${runner[@]}" "$work/gpurun" "$d" "$d.bin"
	echo "== version $v" >>"$out/bisect.txt"
	"$ptxgen" bisect -dir "$d" -results "$d.bin" >>"$out/bisect.txt" 2>&1
	if [[ -z ${3:-} && -x $sanitizer && ${#runner[@]} == 0 ]] && "$ptxgen" batch -dir "$d.one" -version "$v" -seeds "$d.seed"; then
		echo "compute-sanitizer --tool memcheck on the whole kernel:" >>"$out/bisect.txt"
		timeout 120 "$sanitizer" --tool memcheck --print-limit 4 "$work/gpurun" "$d.one" "$d.one.bin" 2>&1 | head -n 60 >>"$out/bisect.txt"
	fi
}
: >"$out/bisect.txt"
grep -E ' ERROR_DIFFERS$' "$out/failing.txt" | head -n "${MAX_BISECT:-8}" | while read -r seed _; do
	bisect_one "$(cat "$work/batch/version")" "$seed"
done
# Kernels of earlier corpora that failed on the device (VERSION:SEED).
for vs in ${BISECT_ALSO-1:1741}; do
	bisect_one "${vs%%:*}" "${vs#*:}"
done
# Kernels whose instrumented form computed what the emulator does while
# the plain kernel did not: ptxas compiled the plain kernel otherwise.
# Their prefixes (each stores every register it wrote) find the statement
# from which the device's outputs differ, and the same kernels compiled
# at JIT optimisation level 0 show whether the optimiser did it
# (jit-o0.txt, jit-o0-report.txt: the emulator against them).
sed -n 's/^seed \([0-9]*\): instrumented, the kernel.*/\1/p' "$out/trace.txt" 2>/dev/null | head -n "${MAX_BISECT:-8}" >"$work/otherwise"
if [[ -s $work/otherwise ]]; then
	while read -r seed; do
		bisect_one "$(cat "$work/batch/version")" "$seed" nosan
	done <"$work/otherwise"
	"$ptxgen" batch -dir "$work/o0" -version "$(cat "$work/batch/version")" -seeds "$work/otherwise" &&
		GPURUN_JIT_O=0 timeout 240 "${runner[@]}" "$work/gpurun" "$work/o0" "$work/o0.bin" &&
		"$ptxgen" record -dir "$work/o0" -results "$work/o0.bin" -corpus "$out/jit-o0.txt" -note "JIT optimisation level 0" \
			-report "$out/jit-o0-report.txt" -diffs "$work/o0-diffs.bin" -failing "$work/o0-failing.txt" >/dev/null
	grep -E '^[0-9]+ kernels' "$out/jit-o0-report.txt" 2>/dev/null | sed 's/^/JIT level 0: /'
fi
cat "$out/bisect.txt"
timed bisection
exit $status
