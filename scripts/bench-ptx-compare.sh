#!/usr/bin/env bash
# bench-ptx-compare.sh [BASE [ROUNDS]]: the PTX interpreter's throughput at
# BASE (a commit; default the interpreter before its operand-width and NaN
# rules) against the working tree, measured in CPU time rather than wall
# time so that a machine shared with other work still gives a comparison.
#
# Both trees' ptx packages are built as test binaries with
# remoting/backend/emulated/ptx/cpubench_test.go (copied into BASE's tree),
# then run in turn ROUNDS times (default 15), alternating which goes first.
# Each run times the bench-ptx workloads, one worker, by getrusage user
# time. The table gives per workload and build the median thread-
# instructions per CPU-second, the spread (min-max) over the rounds, and
# the change of the median.
set -euo pipefail

base=${1:-${PTX_BENCH_BASE:-c9ac90e}}
rounds=${2:-${PTX_BENCH_ROUNDS:-15}}
go=${GO:-go}
pkg=remoting/backend/emulated/ptx
root=$(git rev-parse --show-toplevel)
cd "$root"
basecommit=$(git rev-parse --verify --quiet "$base^{commit}") || {
	echo "bench-ptx-compare: $base is not a commit of this repository" >&2
	exit 2
}
case "$rounds" in '' | *[!0-9]* | 0)
	echo "bench-ptx-compare: rounds must be a positive number, not $rounds" >&2
	exit 2
	;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/base"
git archive "$basecommit" | tar -x -C "$tmp/base"
cp "$pkg/cpubench_test.go" "$tmp/base/$pkg/"
(cd "$tmp/base" && "$go" test -c -o "$tmp/base.test" "./$pkg")
"$go" test -c -o "$tmp/head.test" "./$pkg"

run() { # run NAME DIR: one round of one build, lines "NAME workload insts ns"
	(cd "$2/$pkg" && GPUCTL_PTX_CPUBENCH=1 "$tmp/$1.test" -test.run '^TestCPUBench$' -test.count=1) |
		awk -v b="$1" '$1 == "cpubench" { print b, $2, $3, $4 }' >>"$tmp/runs"
}
: >"$tmp/runs"
for ((i = 1; i <= rounds; i++)); do
	if ((i % 2)); then
		run base "$tmp/base"
		run head "$root"
	else
		run head "$root"
		run base "$tmp/base"
	fi
done

echo "base $(git log -1 --format='%h %s' "$basecommit" | cut -c1-80)"
echo "head $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- "$pkg" || echo ' (uncommitted changes)')"
echo "$rounds rounds, one worker, Minst per CPU-second (getrusage user time)"
echo
echo "| workload | base median | base min-max | head median | head min-max | change |"
echo "| --- | --- | --- | --- | --- | --- |"
for w in saxpy matmul alu; do
	med() { # med BUILD: "median min max" of thread-instructions per user-microsecond
		awk -v b="$1" -v w="$w" '$1 == b && $2 == w { print $3 / ($4 / 1000) }' "$tmp/runs" | sort -g |
			awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.0f %.0f %.0f\n", m, v[1], v[NR] }'
	}
	read -r bm bl bh <<<"$(med base)"
	read -r hm hl hh <<<"$(med head)"
	awk -v w="$w" -v bm="$bm" -v bl="$bl" -v bh="$bh" -v hm="$hm" -v hl="$hl" -v hh="$hh" \
		'BEGIN { printf "| %s | %d | %d-%d | %d | %d-%d | %+.1f%% |\n", w, bm, bl, bh, hm, hl, hh, (hm / bm - 1) * 100 }'
done
