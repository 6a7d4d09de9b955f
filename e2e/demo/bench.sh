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
stalls=()
rounds=()
steps=()
ckpts=()
# all_steps: every step of the JSON on stdin with its milliseconds.
all_steps() {
	tr -d '\n ' | grep -o '"step":"[^"]*","duration_ns":[0-9]*' |
		sed 's/"step":"\([^"]*\)","duration_ns":\([0-9]*\)/\1 \2/' | awk '{ printf "%s%s %d", (NR > 1 ? ", " : ""), $1, $2 / 1e6 }'
}
# step_ms NAME: the duration of the first step called NAME in the JSON
# on stdin (a migration's steps, then its target's), in ms.
step_ms() {
	tr -d ' \n' | grep -o "\"step\":\"$1\",\"duration_ns\":[0-9]*" | head -1 | grep -o '[0-9]*$' |
		awk '{printf "%d", $1/1e6} END {if (NR == 0) print "-"}'
}
# rounds_of JSON: a migration's pre-copy rounds as "blocks/bytes/ms" each.
rounds_of() {
	tr -d ' \n' | grep -o '"rounds":\[[^]]*\]' | grep -o '{[^}]*}' |
		sed 's/.*"blocks":\([0-9]*\).*"bytes":\([0-9]*\).*"duration_ms":\([0-9]*\).*/\1 blocks \2 B \3 ms/' | paste -sd';' - || true
}
for mib in ${BENCH_SIZES:-16 256 1024}; do
	say "session of $mib MiB"
	# Fill the memory, then hold it while we measure; the workload checks
	# the buffer when it is stopped, which we do not wait for.
	# Each session's contents are its own (SEED), so that no size finds
	# another's chunks in a store.
	known=$(session_ids "$api_a")
	start_workload "$listen_a" "$work/app-$mib.log" "$mib" 0 3600000 "$mib"
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
	rounds+=("$mib MiB idle: $(rounds_of <<<"$mg")")
	ckpts+=("$mib MiB, 1st: $(all_steps <<<"$c1")" "$mib MiB, 2nd: $(all_steps <<<"$c2")")
	steps+=("$mib|$(step_ms freeze <<<"$mg")|$(step_ms save <<<"$mg")|$(step_ms push <<<"$mg")|$(step_ms restore <<<"$mg")|$(step_ms criu <<<"$mg")|$(step_ms memread <<<"$mg")|$(step_ms reload <<<"$mg")|$(jnum downtime_ms <<<"$mg")")
	kill "$app" 2>/dev/null || true
	wait "$app" 2>/dev/null || true
	# The stop-and-copy baseline: a full checkpoint without
	# --leave-running (the client stalls for all of it) of a session of
	# the same size and kind whose blocks no store holds yet; a
	# checkpoint of the migrated session itself would store only what
	# changed since its last image.
	known=$(session_ids "$api_a")
	start_workload "$listen_a" "$work/app-$mib-sc.log" "$mib" 0 3600000 "$((mib + 7919))"
	twin=$(find_session "$api_a" "$known")
	for i in $(seq 600); do
		grep -q 'workload:' "$work/app-$mib-sc.log" 2>/dev/null && break
		sleep 0.1
	done
	sc=$(ctl --host "$api_a" checkpoint "$twin" --json) || die "stop-and-copy checkpoint of $mib MiB failed"
	kill "$app" 2>/dev/null || true
	wait "$app" 2>/dev/null || true
	# Stall against durability, and migration downtime against that
	# stop-and-copy checkpoint.
	stalls+=("$mib|$(jnum stall_ms <<<"$c1")|$(jnum stall_ms <<<"$c2")|$(jnum duration_ms <<<"$c2")|$({ jnum mem_sent_bytes <<<"$c2"; echo 0; } | head -1)|$(jnum duration_ms <<<"$sc")|$(jnum downtime_ms <<<"$mg")")
done

# A session that rewrites its memory all the time (every word of its
# buffer, one kernel after another): the pre-copy rounds cannot catch up
# and the migration ends in a stop-and-copy of what changed last.
busy_mib=${BENCH_BUSY_MIB:-64}
say "session of $busy_mib MiB rewriting its memory continuously"
known=$(session_ids "$api_a")
start_workload "$listen_a" "$work/app-busy.log" "$busy_mib" 1000000 0 1
session=$(find_session "$api_a" "$known")
for i in $(seq 600); do
	grep -q 'workload:' "$work/app-busy.log" 2>/dev/null && break
	sleep 0.1
done
sleep 2
mgb=$(ctl --host "$api_a" migrate "$session" --to "$api_b" --json) || die "migration of the busy session failed"
rounds+=("$busy_mib MiB rewriting: $(rounds_of <<<"$mgb")")
busy_row="$busy_mib|$(jnum downtime_ms <<<"$mgb")|$(jnum duration_ms <<<"$mgb")|$(jnum sent_bytes <<<"$mgb")"
kill "$app" 2>/dev/null || true
wait "$app" 2>/dev/null || true

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

fmt2='| %8s | %9s | %13s | %13s | %18s | %16s | %19s | %18s |\n'
echo
bold "== stall against durability; migration downtime against stop-and-copy"
printf "$fmt2" session stall_ms 2nd_stall_ms 2nd_durable_ms 2nd_mem_changed_B stop_and_copy_ms migrate_downtime_ms downtime/stop_copy
printf "$fmt2" -------- --------- ------------- ------------- ------------------ ---------------- ------------------- ------------------
for r in "${stalls[@]}"; do
	IFS='|' read -r m s1 s2 d2 ch sc dt <<<"$r"
	ratio=$(awk -v a="$dt" -v b="$sc" 'BEGIN{ if (b+0 > 0) printf "%.2f", a/b; else print "n/a" }')
	printf "$fmt2" "$m MiB" "$s1" "$s2" "$d2" "$ch" "$sc" "$dt" "$ratio"
done
echo "stall_ms: how long the client paused in a --leave-running checkpoint; durable_ms: until the image was committed."
echo "stop_and_copy_ms: a full checkpoint without --leave-running (the client stalls for all of it) of a session of the same size whose blocks the store lacked."
echo "migrate_downtime_ms: from the freeze to the client attached on the target, after pre-copy rounds."

fmt3='| %8s | %9s | %7s | %7s | %10s | %9s | %10s | %9s | %11s |\n'
echo
bold "== where a migration's downtime goes (ms; target steps on B)"
printf "$fmt3" session freeze save push restore criu@B memread@B reload@B downtime
printf "$fmt3" -------- --------- ------- ------- ---------- --------- ---------- --------- -----------
for r in "${steps[@]}"; do
	IFS='|' read -r m fz sv pu rs cr mr rl dt <<<"$r"
	printf "$fmt3" "$m MiB" "$fz" "$sv" "$pu" "$rs" "$cr" "$mr" "$rl" "$dt"
done
echo "freeze: quiesce, save (hash all, copy what changed since the last round, release), dump, store; restore: B's checkout, criu, reattach, reload."
echo "memread@B: reading device memory for the reload (the staged file, and the store for what the freeze changed), beside criu."

echo
bold "== where the --leave-running checkpoints' time goes (ms; the stall is quiesce through resume)"
for r in "${ckpts[@]}"; do echo "  $r"; done

echo
bold "== pre-copy rounds (blocks changed, their bytes, the round's duration)"
for r in "${rounds[@]}"; do echo "  $r"; done
IFS='|' read -r bm bd bdur bsent <<<"$busy_row"
echo "  $bm MiB rewriting: downtime ${bd} ms, migration ${bdur} ms, ${bsent} bytes sent"

# The scaling plot: stall and downtime by size, one SVG, no dependencies.
svg=${BENCH_SVG:-$(cd "$(dirname "$0")/../.." && pwd)/build/bench-checkpoint.svg}
mkdir -p "$(dirname "$svg")"
# Columns: session, stall, downtime, stop-and-copy.
printf '%s\n' "${stalls[@]}" | awk -F'|' '{ print $1 " MiB|" $3 "|" $7 "|" $6 }' |
	awk -F'|' -v out="$svg" -v names='stall|downtime|stop-and-copy' \
		-v title='checkpoint stall (2nd, --leave-running), migration downtime and stop-and-copy, ms' \
		-f "$(dirname "$0")/plot.awk"
echo "plot: $svg"
