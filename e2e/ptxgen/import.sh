#!/usr/bin/env bash
# Makes a recording of gpu-collect.sh the corpus: unpacks RESULTS/results.tar.gz
# (joining results.tar.gz.partNN pieces first), copies h200.txt,
# h200.approx and h200-probes.bin.gz into e2e/ptxgen/corpus/, rewrites
# h200.refused from a replay, and replays again with the probes, which must
# pass: a kernel that differs fails it, until it is fixed, refused, or shown
# to be miscompiled by ptxas (h200.miscompiled, kept by hand with its
# evidence). Run from anywhere in the repository.
#
# Usage: e2e/ptxgen/import.sh RESULTS
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 RESULTS (gpu-collect.sh's OUTDIR)" >&2; exit 2; }
res=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -f "$res/results.tar.gz" ]; then
	tar -C "$tmp" -xzf "$res/results.tar.gz"
elif ls "$res"/results.tar.gz.part* >/dev/null 2>&1; then
	cat "$res"/results.tar.gz.part* | tar -C "$tmp" -xzf -
else
	echo "import.sh: no results.tar.gz (or .partNN pieces) in $res" >&2; exit 1
fi
for f in h200.txt h200.approx h200-probes.bin.gz; do
	[ -f "$tmp/$f" ] || { echo "import.sh: $res/results.tar.gz has no $f" >&2; exit 1; }
done
corpus=$root/e2e/ptxgen/corpus
head -n 2 "$tmp/h200.txt"
cp "$tmp/h200.txt" "$tmp/h200.approx" "$tmp/h200-probes.bin.gz" "$corpus/"
[ -f "$tmp/summary.txt" ] && sed -n '1,4p' "$tmp/summary.txt"
cd "$root"
# The first replay fails where the old refusals do not fit the new corpus;
# it rewrites them.
go test ./e2e/ptxgen -count=1 -run '^TestCorpusReplay$' -update-expect >/dev/null || true
go test ./e2e/ptxgen -count=1 -v -run '^(TestCorpusReplay|TestProbes)$' | grep -E 'kernels:|refused with|seed [0-9]+:|^(---|ok|FAIL|PASS)'
echo "import.sh: corpus/ updated; review git diff e2e/ptxgen/corpus and commit"
