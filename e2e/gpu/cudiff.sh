#!/usr/bin/env bash
# cudiff.sh: runs one CUDA program natively and through gpuctl, both under
# the call tracer e2e/gpu/tools/cudiff.c, and prints where the answers the
# program got from the driver differ, in the order the program first asked
# (the first line is the first question gpuctl answered differently).
#
#   e2e/gpu/cudiff.sh PROGRAM [ARGS...]        on a GPU host, from build/
#   e2e/gpu/cudiff.sh --diff NATIVE REMOTE     compare two existing traces
#
# Without SERVER it starts its own gpud (--backend cuda, GPU 0) on
# 127.0.0.1:17600 for the run and stops it after. Variables: OUT (default
# /tmp/gpuctl-cudiff; traces, outputs, the full diff), SERVER and TOKEN
# (an existing gpud instead), DRVLIB (NVIDIA's libcuda.so.1; found with
# ldconfig otherwise), RT (seconds per run, default 300), MAXLINES (lines
# per section printed, default 40). Exit status 0 when the traces have no
# difference, 1 when they do, 2 when a run could not be made.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/gpuctl-cudiff}
MAXLINES=${MAXLINES:-40}
RT=${RT:-300}

# diff_traces NATIVE REMOTE [MAXLINES]: the report. A trace line is "= SEQ LINE"
# (first use) or "# COUNT LINE" (at exit); a LINE is "CALL ARGS -> ANSWER".
diff_traces() {
	awk -v maxlines="${3:-$MAXLINES}" '
	function key(line,   i) { i = index(line, " -> "); return i ? substr(line, 1, i - 1) : line }
	function answer(line,   i) { i = index(line, " -> "); return i ? substr(line, i + 4) : "" }
	FNR == 1 { side++ }
	/^= / {
		seq = $2; line = substr($0, length($1) + length($2) + 3)
		if (!((side, line) in first)) { first[side, line] = seq; lines[side, ++n[side]] = line }
		k = key(line); keys[side, k] = keys[side, k] (keys[side, k] == "" ? "" : " | ") answer(line)
		next
	}
	/^# [0-9]+ ET / { slot = $4; count[side, slot] = $2; slots[slot] = 1; next }
	END {
		# Native lines missing through gpuctl: a different answer to the
		# same question, or a question gpuctl never got.
		for (i = 1; i <= n[1]; i++) {
			line = lines[1, i]
			if ((2, line) in first) continue
			k = key(line)
			if ((2, k) in keys) {
				if (!(k in told)) { told[k] = 1; d++; dseq[d] = first[1, line]; dtext[d] = "  " k "\n      native:  " keys[1, k] "\n      gpuctl:  " keys[2, k] }
			} else { o1++; oseq[o1] = first[1, line]; otext[o1] = "  " line }
		}
		for (i = 1; i <= n[2]; i++) {
			line = lines[2, i]
			if ((1, line) in first || (1, key(line)) in keys) continue
			o2++; pseq[o2] = first[2, line]; ptext[o2] = "  " line
		}
		report("answers that differ (in the order the program first asked)", d, dseq, dtext)
		report("asked natively only", o1, oseq, otext)
		report("asked through gpuctl only", o2, pseq, ptext)
		for (s in slots) {
			if (count[1, s] + 0 > 0 && count[2, s] + 0 == 0) sl = sl "  " s " called " count[1, s] " times natively, never through gpuctl\n"
			if (count[2, s] + 0 > 0 && count[1, s] + 0 == 0) sl = sl "  " s " called " count[2, s] " times through gpuctl, never natively\n"
		}
		if (sl != "") { printf "== export-table slots only counted (not decoded), used on one side only\n%s", sl; total++ }
		if (d + o1 + o2 == 0 && sl == "") print "no difference: every question got the same answer natively and through gpuctl"
		exit (d + o1 + o2 > 0 || sl != "") ? 1 : 0
	}
	function report(title, cnt, seqs, texts,   i, j, t, order) {
		if (cnt == 0) return
		for (i = 1; i <= cnt; i++) order[i] = i
		for (i = 2; i <= cnt; i++)  # insertion sort by first use
			for (j = i; j > 1 && seqs[order[j - 1]] + 0 > seqs[order[j]] + 0; j--) { t = order[j]; order[j] = order[j - 1]; order[j - 1] = t }
		printf "== %s: %d\n", title, cnt
		for (i = 1; i <= cnt && i <= maxlines; i++) print texts[order[i]]
		if (cnt > maxlines) printf "  ... %d more\n", cnt - maxlines
	}' "$1" "$2"
}

if [[ ${1:-} == --diff ]]; then
	[[ $# == 3 ]] || { echo "usage: $0 --diff NATIVE_TRACE REMOTE_TRACE" >&2; exit 2; }
	diff_traces "$2" "$3"
	exit $?
fi
[[ $# -ge 1 ]] || { echo "usage: $0 PROGRAM [ARGS...]  (or $0 --diff NATIVE REMOTE)" >&2; exit 2; }

mkdir -p "$OUT"
rm -f "$OUT"/native.trace "$OUT"/remote.trace
WORK=$(mktemp -d /tmp/gpuctl-cudiff.XXXXXX)
GPUD_PID=
cleanup() {
	[[ -n $GPUD_PID ]] && { kill -TERM -- "-$GPUD_PID" 2>/dev/null || kill -TERM "$GPUD_PID" 2>/dev/null; wait "$GPUD_PID" 2>/dev/null; }
	rm -rf "$WORK"
}
trap cleanup EXIT

TRACER=$WORK/cudiff.so
gcc -O2 -shared -fPIC -o "$TRACER" "$ROOT/e2e/gpu/tools/cudiff.c" -ldl -lpthread || { echo "building the tracer failed" >&2; exit 2; }

# NVIDIA's driver for the native run and for gpud; gpuctl's library never.
if [[ -z ${DRVLIB:-} ]]; then
	DRVLIB=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ { print $NF; exit }')
	[[ -z $DRVLIB && -e /usr/local/nvidia/lib64/libcuda.so.1 ]] && DRVLIB=/usr/local/nvidia/lib64/libcuda.so.1
fi
[[ -n ${DRVLIB:-} && -e $DRVLIB ]] || { echo "NVIDIA's libcuda.so.1 not found: set DRVLIB" >&2; exit 2; }
NATIVE_LDPATH=$(dirname "$DRVLIB")
IFS=: read -ra ldparts <<<"${LD_LIBRARY_PATH:-}"
for d in "${ldparts[@]}"; do
	[[ -n $d && $(realpath -m "$d") != $(realpath -m "$ROOT/build/lib") ]] && NATIVE_LDPATH+=":$d"
done

if [[ -z ${SERVER:-} ]]; then
	SERVER=127.0.0.1:17600
	TOKEN=$WORK/token
	od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$TOKEN"
	chmod 600 "$TOKEN"
	env -u LD_PRELOAD LD_LIBRARY_PATH="$NATIVE_LDPATH" setsid "$ROOT/build/bin/gpud" --listen "$SERVER" \
		--api 127.0.0.1:17601 --state-dir "$WORK/state" --backend cuda --token-file "$TOKEN" >"$OUT/gpud.log" 2>&1 &
	GPUD_PID=$!
	for _ in $(seq 150); do grep -q "gpud ready" "$OUT/gpud.log" 2>/dev/null && break; sleep 0.1; done
	grep -q "gpud ready" "$OUT/gpud.log" || { echo "gpud did not start:" >&2; tail -n 5 "$OUT/gpud.log" >&2; exit 2; }
fi
[[ -n ${TOKEN:-} ]] || { echo "set TOKEN to the token file of SERVER" >&2; exit 2; }

echo "native: $*"
t0=$(date +%s%3N)
env -u LD_PRELOAD LD_LIBRARY_PATH="$NATIVE_LDPATH" CUDIFF_OUT="$OUT/native.trace" LD_PRELOAD="$TRACER" \
	timeout "$RT" "$@" >"$OUT/native.out" 2>"$OUT/native.err"
nrc=$?
echo "  exit $nrc in $(($(date +%s%3N) - t0)) ms; last output: $(tail -n 1 "$OUT/native.out" | cut -c1-120)"
echo "through gpuctl ($SERVER): $*"
t0=$(date +%s%3N)
timeout "$RT" "$ROOT/build/bin/gpuctl" run --server "$SERVER" --token-file "$TOKEN" -- \
	env CUDIFF_OUT="$OUT/remote.trace" LD_PRELOAD="$TRACER" "$@" >"$OUT/remote.out" 2>"$OUT/remote.err"
rrc=$?
echo "  exit $rrc in $(($(date +%s%3N) - t0)) ms; last output: $(tail -n 1 "$OUT/remote.out" | cut -c1-120)"
grep -h "^gpuctl: " "$OUT/remote.err" | sort | uniq -c | sort -rn | head -n 10 | sed 's/^/  /'
[[ -s $OUT/native.trace && -s $OUT/remote.trace ]] || { echo "a run left no trace (see $OUT/*.err)" >&2; exit 2; }
echo
diff_traces "$OUT/native.trace" "$OUT/remote.trace" 1000000 >"$OUT/diff.txt"
rc=$?
diff_traces "$OUT/native.trace" "$OUT/remote.trace"
echo
echo "traces, outputs and the whole report: $OUT/{native,remote}.{trace,out,err}, $OUT/diff.txt"
exit "$rc"
