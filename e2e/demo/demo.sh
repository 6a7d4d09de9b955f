#!/usr/bin/env bash
# make demo: two GPU hosts, one CUDA workload, migrated back and forth
# while it runs. Exits 0 when the workload's result checks out.
#
# As root it puts host A, host B and the client into their own network
# namespaces joined by a bridge; otherwise all three share loopback on
# different ports. On a machine with an NVIDIA GPU the hosts use the cuda
# backend (gpud --backend auto), elsewhere the emulated device.
#
# Environment: DEMO_MIB (device memory the workload uses, default 2),
# DEMO_STEPS (default 40), DEMO_SLEEP_MS (between steps, default 150),
# DEMO_MIGRATIONS (default 4), DEMO_KEEP=1 keeps the work directory.
set -euo pipefail
tag=demo
. "$(dirname "$0")/lib.sh"

mib=${DEMO_MIB:-2}
steps=${DEMO_STEPS:-40}
sleep_ms=${DEMO_SLEEP_MS:-150}
migrations=${DEMO_MIGRATIONS:-4}

build_workload
setup_hosts
backend=$({ ctl --host "$api_a" doctor --json 2>/dev/null || true; } | jstr backend)
say "gpud A at $api_a and B at $api_b are up (backend ${backend:-?})"

bold "== the workload: $mib MiB of device memory, $steps steps, through gpuctl run on host A"
start_workload "$listen_a" "$work/app.log" "$mib" "$steps" "$sleep_ms"
session=$(find_session "$api_a")
say "session $session is running on host A"

from=$api_a to=$api_b
rows=()
pause=$(awk -v s="$steps" -v ms="$sleep_ms" -v k="$migrations" 'BEGIN{printf "%.2f", s*ms/1000/(k+2)}')
for m in $(seq "$migrations"); do
	sleep "$pause"
	kill -0 "$app" 2>/dev/null || break
	bold "== migration $m: $session from $from to $to"
	t0=$(date +%s%N)
	out=$(ctl --host "$from" migrate "$session" --to "$to" --json) || die "migration $m failed"
	wall=$(ms "$t0")
	down=$(jnum downtime_ms <<<"$out")
	sent=$(jnum sent_bytes <<<"$out")
	size=$(jnum bytes <<<"$out")
	say "moved in $wall ms; client stalled ${down:-?} ms; sent ${sent:-?} of ${size:-?} image bytes"
	rows+=("$m|$from|$to|${down:-?}|$wall|${sent:-?}|${size:-?}")
	tmp=$from from=$to to=$tmp
done

say "waiting for the workload to finish"
rc=0
wait "$app" || rc=$?
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
