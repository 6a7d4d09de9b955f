#!/usr/bin/env bash
# make demo: two GPU hosts, one CUDA workload, migrated back and forth
# while it runs. Exits 0 when the workload's result checks out.
#
# As root it puts host A, host B and the client into their own network
# namespaces joined by a bridge; otherwise all three share loopback on
# different ports. On a machine with an NVIDIA GPU the hosts use the cuda
# backend (gpud --backend auto), elsewhere the emulated device.
#
# Environment: DEMO_MIB (device memory the workload uses, default 8),
# DEMO_STEPS (default 60), DEMO_SLEEP_MS (between steps, default 150),
# DEMO_MIGRATIONS (default 4), DEMO_KEEP=1 keeps the work directory.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=$root/build/bin
mib=${DEMO_MIB:-8}
steps=${DEMO_STEPS:-60}
sleep_ms=${DEMO_SLEEP_MS:-150}
migrations=${DEMO_MIGRATIONS:-4}

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuctl-demo.XXXXXX")
id=$$
pids=()
nets=()

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
say() { printf '[demo] %s\n' "$*"; }
die() { printf '[demo] FAILED: %s\n' "$*" >&2; exit 1; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

cleanup() {
	local rc=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for n in "${nets[@]}"; do ip netns del "$n" 2>/dev/null || true; done
	if [ $rc -ne 0 ]; then
		for f in "$work"/*.log; do
			[ -f "$f" ] || continue
			echo "---- tail of $(basename "$f")" >&2
			tail -n 15 "$f" >&2
		done
	fi
	if [ "${DEMO_KEEP:-}" = 1 ]; then say "work directory kept: $work"; else rm -rf "$work"; fi
	exit $rc
}
trap cleanup EXIT INT TERM

[ -x "$bin/gpud" ] && [ -x "$bin/gpuctl" ] && [ -f "$root/build/lib/libcuda.so.1" ] ||
	die "build/ is incomplete; run 'make demo' (it builds first)"

# The workload, compiled against our cuda.h and linked to our libcuda.
gcc -O2 -o "$work/workload" "$root/e2e/demo/workload.c" -I"$root/build/include" \
	-L"$root/build/lib" -lcuda -Wl,-rpath,"$root/build/lib" ||
	die "could not compile e2e/demo/workload.c"

# Topology.
in_a=() in_b=() in_c=()
if [ "$(id -u)" -eq 0 ] && ip netns add "gdemo$id-sw" 2>/dev/null; then
	nets+=("gdemo$id-sw")
	sw=(ip netns exec "gdemo$id-sw")
	"${sw[@]}" ip link set lo up
	"${sw[@]}" ip link add br0 type bridge
	"${sw[@]}" ip link set br0 up
	n=0
	for h in a b c; do
		n=$((n + 1))
		ns="gdemo$id-$h"
		ip netns add "$ns"
		nets+=("$ns")
		ip link add "gd$id$h" type veth peer name "gs$id$h"
		ip link set "gd$id$h" netns "$ns"
		ip link set "gs$id$h" netns "gdemo$id-sw"
		"${sw[@]}" ip link set "gs$id$h" master br0 up
		ip -n "$ns" link set lo up
		ip -n "$ns" addr add "10.77.$((id % 200)).$((n + 1))/24" dev "gd$id$h"
		ip -n "$ns" link set "gd$id$h" up
	done
	net="10.77.$((id % 200))"
	addr_a=$net.2 addr_b=$net.3
	in_a=(ip netns exec "gdemo$id-a")
	in_b=(ip netns exec "gdemo$id-b")
	in_c=(ip netns exec "gdemo$id-c")
	say "hosts in network namespaces: A $addr_a, B $addr_b, client $net.4"
else
	addr_a=127.0.0.1 addr_b=127.0.0.1
	say "not root (or no netns): hosts share loopback"
fi
base=$((17000 + id % 1000 * 10))
listen_a=$addr_a:$base api_a=$addr_a:$((base + 1))
listen_b=$addr_b:$((base + 2)) api_b=$addr_b:$((base + 3))

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
chmod 600 "$work/token"

start_gpud() { # NAME LISTEN API NS...
	local name=$1 listen=$2 api=$3
	shift 3
	mkdir -p "$work/$name"
	"$@" "$bin/gpud" --listen "$listen" --api "$api" --state-dir "$work/$name" \
		--token-file "$work/token" --name "host-$name" --backend auto >"$work/gpud-$name.log" 2>&1 &
	pids+=($!)
}
start_gpud a "$listen_a" "$api_a" "${in_a[@]}"
start_gpud b "$listen_b" "$api_b" "${in_b[@]}"

ctl() { "${in_c[@]}" "$bin/gpuctl" --token-file "$work/token" "$@"; }
for api in "$api_a" "$api_b"; do
	for i in $(seq 100); do
		ctl --host "$api" sessions >/dev/null 2>&1 && break
		[ "$i" -lt 100 ] || die "gpud at $api did not come up"
		sleep 0.1
	done
done
backend=$({ ctl --host "$api_a" doctor --json 2>/dev/null || true; } | sed -n 's/.*"backend": "\([a-z]*\)".*/\1/p' | head -1)
say "gpud A at $api_a and B at $api_b are up (backend ${backend:-?})"

bold "== the workload: $mib MiB of device memory, $steps steps, through gpuctl run on host A"
"${in_c[@]}" "$bin/gpuctl" run --server "$listen_a" --token-file "$work/token" -- \
	"$work/workload" "$mib" "$steps" "$sleep_ms" > >(sed -u 's/^/  [app] /' | tee "$work/app.log") 2>&1 &
app=$!
pids+=($app)

session=""
for i in $(seq 100); do
	session=$(ctl --host "$api_a" sessions --json 2>/dev/null | grep -o 's-[0-9a-f]\{12\}' | head -1 || true)
	[ -n "$session" ] && break
	kill -0 $app 2>/dev/null || die "the workload ended before its session appeared"
	sleep 0.1
done
[ -n "$session" ] || die "no session appeared on host A"
say "session $session is running on host A"

from=$api_a to=$api_b
declare -a rows
for m in $(seq "$migrations"); do
	sleep "$(awk -v s="$steps" -v ms="$sleep_ms" -v k="$migrations" 'BEGIN{printf "%.2f", s*ms/1000/(k+2)}')"
	kill -0 $app 2>/dev/null || break
	bold "== migration $m: $session from $from to $to"
	t0=$(date +%s%N)
	out=$(ctl --host "$from" migrate "$session" --to "$to" --json) || die "migration $m failed"
	wall=$(ms "$t0")
	down=$(printf '%s' "$out" | sed -n 's/.*"downtime_ms": \([0-9]*\).*/\1/p')
	sent=$(printf '%s' "$out" | sed -n 's/.*"sent_bytes": \([0-9]*\).*/\1/p')
	size=$(printf '%s' "$out" | sed -n 's/.*"bytes": \([0-9]*\).*/\1/p' | head -1)
	say "moved in $wall ms; client stalled ${down:-?} ms; sent ${sent:-?} of ${size:-?} image bytes"
	rows+=("$m|$from|$to|${down:-?}|$wall|${sent:-?}|${size:-?}")
	tmp=$from from=$to to=$tmp
done

say "waiting for the workload to finish"
rc=0
wait $app || rc=$?
sleep 0.2
result=$(grep '^  \[app\] RESULT' "$work/app.log" | sed 's/^  \[app\] //' || true)

bold "== what happened"
printf '%-3s %-22s %-22s %12s %10s %14s %14s\n' '#' from to downtime_ms wall_ms sent_bytes image_bytes
for r in "${rows[@]}"; do
	IFS='|' read -r m f t d w s b <<<"$r"
	printf '%-3s %-22s %-22s %12s %10s %14s %14s\n' "$m" "$f" "$t" "$d" "$w" "$s" "$b"
done
echo "workload: ${result:-no RESULT line} (exit $rc)"
[ ${#rows[@]} -gt 0 ] || die "no migration happened (the workload ended too soon; raise DEMO_STEPS)"
case "$result" in
*" OK") bold "demo passed: the workload's device memory survived ${#rows[@]} live migrations bit for bit" ;;
*) die "the workload's result does not check out" ;;
esac
[ $rc -eq 0 ] || die "the workload exited $rc"
