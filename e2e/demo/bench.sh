#!/usr/bin/env bash
# make bench (bench-checkpoint): checkpoint, restore and migration of
# sessions holding 16 MiB, 256 MiB and 1 GiB of device memory, on two
# hosts as in the demo (the emulated device where no GPU is present).
# Prints one table. BENCH_SIZES (MiB, default "16 256 1024") changes the
# sizes.
set -euo pipefail
tag=bench
. "$(dirname "$0")/lib.sh"

build_workload
setup_hosts
rows=()
for mib in ${BENCH_SIZES:-16 256 1024}; do
	say "session of $mib MiB"
	# Fill the memory, then hold it while we measure; the workload checks
	# the buffer when it is stopped, which we do not wait for.
	known=$(session_ids "$api_a")
	start_workload "$listen_a" "$work/app-$mib.log" "$mib" 0 3600000
	session=$(find_session "$api_a" "$known")
	for i in $(seq 600); do # the fill is done when the session holds the memory
		grep -q 'workload:' "$work/app-$mib.log" 2>/dev/null && break
		sleep 0.1
	done
	c1=$(ctl --host "$api_a" checkpoint "$session" --leave-running --json) || die "checkpoint of $mib MiB failed"
	c2=$(ctl --host "$api_a" checkpoint "$session" --leave-running --json) || die "second checkpoint of $mib MiB failed"
	mg=$(ctl --host "$api_a" migrate "$session" --to "$api_b" --json) || die "migration of $mib MiB failed"
	c3=$(ctl --host "$api_b" checkpoint "$session" --json) || die "checkpoint on B of $mib MiB failed"
	image=$(jstr image <<<"$c3")
	rs=$(ctl --host "$api_b" restore "$image" --json) || die "restore of $mib MiB failed"
	# The baseline measured in the same run: CRIU's dump of the same worker,
	# the one step of the pipeline a by-hand `criu dump` would do.
	dump_ms=$(tr -d '\n' <<<"$c1" | grep -o '"step": *"dump", *"duration_ns": *[0-9]*' | grep -o '[0-9]*$' | awk '{printf "%d", $1/1e6}')
	rows+=("$mib|$dump_ms|$(jnum duration_ms <<<"$c1")|$(jnum bytes <<<"$c1")|$(jnum stored_bytes <<<"$c1")|$(jnum stored_bytes <<<"$c2")|$(jnum duration_ms <<<"$rs")|$(jnum downtime_ms <<<"$mg")|$(jnum sent_bytes <<<"$mg")")
	kill "$app" 2>/dev/null || true
	wait "$app" 2>/dev/null || true
done

backend=$({ ctl --host "$api_a" doctor --json 2>/dev/null || true; } | jstr backend)
bold "== checkpoint, restore and migration (backend ${backend:-?}; one run each)"
fmt='| %8s | %12s | %13s | %15s | %14s | %14s | %16s | %10s | %19s | %14s |\n'
printf "$fmt" session criu_dump_ms checkpoint_ms checkpoint/dump image_bytes stored_bytes 2nd_stored_bytes restore_ms migrate_downtime_ms sent_bytes
printf "$fmt" -------- ------------ ------------- --------------- -------------- -------------- ---------------- ---------- ------------------- --------------
for r in "${rows[@]}"; do
	IFS='|' read -r m dm c b s s2 rt d sent <<<"$r"
	ratio=$(awk -v a="$c" -v b="$dm" 'BEGIN{ if (b+0 > 0) printf "%.2fx", a/b; else print "n/a" }')
	printf "$fmt" "$m MiB" "$dm" "$c" "$ratio" "$b" "$s" "$s2" "$rt" "$d" "$sent"
done
echo "criu_dump_ms: CRIU's dump of the same worker within that checkpoint, the cost of a by-hand criu dump."
echo "checkpoint/dump: the whole gpuctl checkpoint (quiesce, suspend, dump, store) against it."
echo "2nd_stored_bytes: new bytes stored by a second checkpoint right after the first."
