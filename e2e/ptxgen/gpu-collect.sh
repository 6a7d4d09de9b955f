#!/usr/bin/env bash
# Everything the PTX emulator is held to on a real GPU, in one run: the
# generated-kernel corpus recorded again (gpu-record.sh: 4096 kernels,
# probes, instruction traces of the kernels the emulator does not
# reproduce, bisection of kernels that fail on the device) and the backend
# conformance suite on the cuda backend. Run it on the GPU machine from
# the repository root, with build/bin/ptxgen and
# build/bin/cuda-conformance.test made by `make gpu-tools` where Go is:
#
#   e2e/ptxgen/gpu-collect.sh OUTDIR
#
# OUTDIR receives two files, small enough to bring back (one over 15 MB is
# split into FILE.part00, FILE.part01, ...):
#   results.tar.gz   the corpus (h200.txt, h200.approx, h200-probes.bin.gz),
#                    report.txt, failing.txt, trace.txt, bisect.txt,
#                    probes.txt, diffs.bin, conformance.log, the logs and
#                    times.txt
#   traces.bin.gz    the device's instruction traces (ptxgen trace -traces)
# and prints a summary (also summary.txt in the archive). Variables: as
# gpu-record.sh's, and COUNT (default 4096).
set -uo pipefail

out=${1:?usage: gpu-collect.sh OUTDIR}
root=$(cd "$(dirname "$0")/../.." && pwd)
ptxgen=$root/build/bin/ptxgen
conf=$root/build/bin/cuda-conformance.test
[[ -x $ptxgen ]] || { echo "gpu-collect.sh: no $ptxgen: run make gpu-tools where Go is and carry build/bin"; exit 2; }
res=$(mktemp -d /tmp/gpu-collect.XXXXXX)
trap 'rm -rf "$res"' EXIT
mkdir -p "$out"
t0=$(date +%s)

"$root/e2e/ptxgen/gpu-record.sh" "$ptxgen" "$res" "${COUNT:-4096}" 1 >"$res/record.log" 2>&1
rec=$?

conf_rc=skipped
if [[ -x $conf ]]; then
	lib=${CUDA_LIB:-/usr/local/nvidia/lib64}
	LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 120 "$conf" -test.run '^TestConformance$' -test.v >"$res/conformance.log" 2>&1
	conf_rc=$?
else
	echo "no $conf (make gpu-tools)" >"$res/conformance.log"
fi

[[ -f $res/h200-probes.bin ]] && gzip -9 "$res/h200-probes.bin"
[[ -f $res/traces.bin ]] && gzip -9 -c "$res/traces.bin" >"$out/traces.bin.gz" && rm "$res/traces.bin"
{
	echo "gpu-collect.sh on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1), $(($(date +%s) - t0)) s"
	echo "gpu-record.sh exit status $rec; conformance test exit status $conf_rc"
	grep -E '^[0-9]+ kernels' "$res/report.txt" 2>/dev/null
	echo "failing seeds by outcome:"
	awk '{ n[$2]++ } END { for (o in n) print "  " o, n[o] }' "$res/failing.txt" 2>/dev/null
	tail -n 1 "$res/probes.txt" 2>/dev/null
	echo "first differing instructions (trace.txt):"
	sed -n '/the first differing instruction, by opcode/,$p' "$res/trace.txt" 2>/dev/null | head -n 30
	grep -E '^[0-9]+ kernels' "$res/jit-o0-report.txt" 2>/dev/null | sed 's/^/at JIT optimisation level 0, the kernels ptxas compiled otherwise: /'
	echo "bisection (bisect.txt):"
	head -c 3000 "$res/bisect.txt" 2>/dev/null
	echo "conformance:"
	grep -E -- '^(--- |    --- )(FAIL|SKIP)|^(ok|FAIL|PASS)' "$res/conformance.log" | head -n 20
	cat "$res/times.txt" 2>/dev/null
} >"$res/summary.txt" 2>&1
tar -C "$res" -czf "$out/results.tar.gz" .
# No file may pass 16 MB on the way back: split what does (cat the parts).
for f in "$out"/*.gz; do
	if (($(stat -c %s "$f") > 15000000)); then
		split -b 15000000 -d "$f" "$f.part" && rm "$f"
	fi
done
cat "$res/summary.txt"
ls -l "$out"
