#!/usr/bin/env bash
# Checkpoints at PCIe speed on a GPU host: gpuctl against doing it by hand,
# on the same program and sizes, in one run of about 8 minutes.
#
#   e2e/gpu/ckpt-bench.sh        (or: make gpu-ckpt-bench)
#
# Needs what e2e/gpu/run.sh needs (driver >= 570, nvcc, gcc, root; build/
# with gpud, gpuctl, lib/ and include/; .deps/criu), and runs, when make
# gpu-tools left build/bin/cuda-conformance.test, the cuda backend's own
# tests of worker-mapped memory first (allocations, the GPU hash kernel
# against the host's, save/release/reload, the contexts' stack trim, the
# backend conformance suite, whose allocations now come from worker-mapped
# memory) and prints where a save's and a reload's time goes, part by part.
#
# For each size (SIZES, MiB; default 1, 4, 8 and 32 GiB while the budget
# allows; a size the GPU or the host lacks memory for is skipped with a
# line saying so) a client holds that much incompressible data and checks
# all of it on the GPU every 50 ms without changing it (an idle session).
# Through gpuctl, every size first:
#   1. checkpoint --leave-running: stall_ms (the client's pause) and
#      duration_ms (until the image is committed);
#   2. the same again: the second checkpoint of an idle session, its stall
#      and the new bytes it stored;
#   3. a checkpoint, then a restore from it, timed; the client reconnects
#      and its checks must find every byte as it was (bit-exact);
#   4. a live migration to a second gpud on the same GPU (in its own
#      network namespace, as run.sh does): downtime_ms;
#   5. a live migration of a client of the same size that rewrites about
#      1 GB/s of its memory (holder rewrite=1000): downtime_ms and rounds.
# Then by hand, every size, last (a checkpointed native process that is
# killed can keep the driver refusing new processes for a minute, so the
# by-hand rows come after every gpuctl row, with a wait for the GPU
# between sizes): on a native client of the same size, the driver's lock
# and checkpoint plus criu dump; criu restore plus the driver's restore and
# unlock (e2e/gpu/ckpt.c). And the machine's fsync'd sequential write speed
# on the filesystem holding the store. Then one table of ratios against the
# targets, and OUT/scaling.svg: stall and downtimes against size (the plot
# of `make bench`, e2e/demo/plot.awk).
#
# Variables: OUT (default /tmp/gpuctl-ckpt-bench), WORK, SIZES, HAND (0
# leaves the by-hand rows out: a scaling run of gpuctl alone), BUDGET
# (seconds, default 450), REWRITE (MiB/s, default 1000), BUSY_SIZES (the
# sizes that get the rewriting client's migration; default SIZES),
# MIGRATE_SIZES (the sizes that get the idle client's migration; default
# SIZES: at 32 GiB two stores of the session on one 64 GiB disk do not
# fit, unless B_TMPFS puts gpud b's store on a tmpfs of that many GiB),
# CKPT_SIZES (the sizes that get the checkpoints and the restore; default
# SIZES), NVCC,
# CUDA_INC, CRIU, KEEP=1.
# Exit status 0 only if every correctness check passed (targets missed are
# reported in the table, not failed).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/e2e/gpu
OUT=${OUT:-/tmp/gpuctl-ckpt-bench}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d /tmp/gpuctl-ckpt-bench.XXXXXX)}
mkdir -p "$WORK"
SIZES=${SIZES:-"1024 4096 8192 32768"}
REWRITE=${REWRITE:-1000}
BUSY_SIZES=${BUSY_SIZES-$SIZES}
MIGRATE_SIZES=${MIGRATE_SIZES-$SIZES}
CKPT_SIZES=${CKPT_SIZES-$SIZES}
BUDGET=${BUDGET:-450}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
CRIU=${CRIU:-$ROOT/.deps/criu/criu}
GPUD=$ROOT/build/bin/gpud
GPUCTL=$ROOT/build/bin/gpuctl
TOKEN=$WORK/token
A_LISTEN=127.0.0.1:17420 A_API=127.0.0.1:17421
B_LISTEN=127.0.0.1:17430 B_API=127.0.0.1:17431
B_NS=gpuctl-ckb-b B_EXEC=()
T_START=$(date +%s)

exec > >(tee -p "$OUT/bench.log") 2>&1
TEE=$!

source "$HERE/lib.sh"

bad_checks() { grep -c BAD "$1" 2>/dev/null || true; }
# start_client LOG MIB remote|native [MODE]: the holder, idle unless MODE
# (rewrite=R) says otherwise; HP is its pid.
start_client() {
	rm -f "$1"
	if [[ $3 == remote ]]; then
		setsid "$GPUCTL" run --server "$A_LISTEN" --token-file "$TOKEN" -- "$WORK/remote/holder" "$2" "$1" "$WORK/kernels.ptx" 50 "${4:-idle}" \
			</dev/null >"$1.out" 2>&1 &
	else
		"${NATIVE[@]}" setsid "$WORK/native/holder" "$2" "$1" "$WORK/kernels.ptx" 50 idle </dev/null >"$1.out" 2>&1 &
	fi
	HP=$!
	PIDS+=("$HP")
}
# start_remote LOG MIB [MODE]: start_client through gpud a until the
# client checks its data (3 checks), for up to 40 s: after a migration
# gpud may take longer to start a new session's worker than the client
# waits for its first connection (5 s). HP is its pid; BEFORE lists gpud
# a's sessions before the try that started it (a failed try can leave a
# session of its own behind).
start_remote() {
	local deadline=$(($(date +%s) + 40)) tries=0
	while :; do
		tries=$((tries + 1))
		BEFORE=$(sessions "$A_API")
		start_client "$1" "$2" remote "${3:-idle}"
		wait_log "$1" '^iter 3 ok' 120 "$HP" && {
			((tries > 1)) && echo "  the client started at its try $tries"
			return 0
		}
		stop_group "$HP"
		(($(date +%s) < deadline)) || return 1
		sleep 2
	done
}
# clean_stores: every image of both gpuds removed and their stores
# collected, so that the disk holds one size's images at a time.
clean_stores() {
	local api id
	for api in "$A_API" "$B_API"; do
		for id in $(ctl "$api" images ls --json 2>/dev/null | tr -d '\n' | grep -o '"id" *: *"img-[^"]*"' | sed 's/.*"\(img-[^"]*\)"$/\1/'); do
			ctl "$api" images rm "$id" >/dev/null 2>&1
		done
		ctl "$api" images gc >/dev/null 2>&1
	done
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", (b-a)/1000}'; }
# step_ms FILE NAME: one pipeline step's duration from a JSON answer.
step_ms() { tr -d '\n ' <"$1" | grep -o "\"step\":\"$2\",\"duration_ns\":[0-9]*" | head -n 1 | grep -o '[0-9]*$' | awk '{ printf "%.0f", $1 / 1e6 }'; }

# ---------------------------------------------------------------- setup
step "environment"
suite_env
step "build"
mkdir -p "$WORK/native" "$WORK/remote"
"$NVCC" -O3 -ptx -arch=sm_"$CAP" -o "$WORK/kernels.ptx" "$HERE/kernels.cu" || { echo "nvcc failed"; exit 1; }
gcc -O2 -std=gnu11 -I"$HERE" -I"$CUDA_INC" -o "$WORK/native/holder" "$HERE/holder.c" -L"$STUBS" -lcuda -lm -lpthread &&
	gcc -O2 -std=gnu11 -I"$HERE" -I"$ROOT/build/include" -o "$WORK/remote/holder" "$HERE/holder.c" \
		-L"$ROOT/build/lib" -Wl,-rpath,"$ROOT/build/lib" -lcuda -lm -lpthread &&
	gcc -O2 -I"$CUDA_INC" -o "$WORK/native/gpuckpt" "$HERE/ckpt.c" -L"$STUBS" -lcuda || { echo "building the helpers failed"; exit 1; }

step "cuda backend: worker-mapped memory, the GPU hash kernel, save and reload"
T=$ROOT/build/bin/cuda-conformance.test
if [[ -x $T ]]; then
	# A kernel fault poisons the whole process on the real driver, so the
	# sticky-fault case runs on its own, after the others.
	if "${NATIVE[@]}" timeout 180 "$T" -test.run '^(TestVMMAllocations|TestPlainMemory|TestHashKernel|TestDeviceMemoryRoundTrip|TestParkRoundTrip|TestContextTrim|TestDeviceMemoryTimings|TestConformance)$' \
		-test.skip '^TestConformance/StickyFault$' -test.v >"$OUT/devmem-tests.log" 2>&1 &&
		"${NATIVE[@]}" timeout 60 "$T" -test.run '^TestConformance$/^StickyFault$' -test.v >>"$OUT/devmem-tests.log" 2>&1 &&
		! grep -q -- '--- SKIP' "$OUT/devmem-tests.log"; then
		pass "cuda backend tests: $(grep -c -- '^--- PASS' "$OUT/devmem-tests.log") pass (allocations, hash kernel == host hash, release and reload bit-exact, park and unpark twice with the snapshot kept apart, the stack trim, the conformance suite on mapped memory)"
	else
		fail "cuda backend tests (see $OUT/devmem-tests.log): $(grep -E -- '--- (FAIL|SKIP)|devmem_test.go' "$OUT/devmem-tests.log" | head -n 4 | tr '\n' ' ')"
	fi
	# Where a save's and a reload's time goes, part by part.
	grep -E '(trim|park)_test.go:[0-9]+: ' "$OUT/devmem-tests.log" | sed -E 's/^ *(trim|park)_test.go:[0-9]*: /  /'
else
	skip "cuda backend tests: no build/bin/cuda-conformance.test (make gpu-tools)"
fi

step "the machine's fsync'd sequential write speed (where the store is)"
# 4 GiB written and fsync'd, as the store writes its packs (zeros: on a
# compressing filesystem this overstates the disk, which the line says).
t0=$(ms_now)
dd if=/dev/zero of="$WORK/disk.test" bs=16M count=256 conv=fsync status=none
t1=$(ms_now)
R[disk_gbs]=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", 4*1073741824/1e9/((b-a)/1000)}')
rm -f "$WORK/disk.test"
echo "  ${R[disk_gbs]} GB/s ($(df -T "$WORK" | awk 'NR==2 { print $1 ", " $2 ", mounted on " $NF }'))"

step "gpuds"
start_gpud a "$A_LISTEN" "$A_API" 0 || { fail "gpud a did not start"; exit 1; }
MIG=0
# B_TMPFS=GiB: gpud b's state dir on a tmpfs of that size, for a session
# whose two stores do not fit the disk together (32 GiB on a 64 GiB disk).
if [[ -n ${B_TMPFS:-} ]]; then
	mkdir -p "$WORK/b" && mount -t tmpfs -o size="${B_TMPFS}g" gpuctl-ckb "$WORK/b" && MOUNTS+=("$WORK/b") ||
		fail "no tmpfs of ${B_TMPFS} GiB for gpud b's state dir"
fi
b_netns && start_gpud b "$B_LISTEN" "$B_API" 0 && MIG=1 || fail "gpud b did not start: no migrations"

# ------------------------------------------------------------ gpuctl runs
gpuctl_run() {
	local mib=$1 log=$WORK/client.$mib.log sid it hp img t0 t1
	# A migration's handover ended a frozen worker: the driver may refuse
	# new processes for a while, and the client's worker is one.
	wait_gpu "$(waitable)" || return
	start_remote "$log" "$mib"
	hp=$HP
	if ! grep -q '^iter 3 ok' "$log" || ! sid=$(new_session "$A_API" "$BEFORE" 10 $((mib << 19))); then
		fail "$mib MiB: the client did not start through gpud: $(tail -n 3 "$log.out")"
		stop_group "$hp"
		return
	fi
	if [[ " $CKPT_SIZES " == *" $mib "* ]]; then
		for n in 1 2; do
			it=$(last_iter "$log")
			if ! ctl "$A_API" checkpoint "$sid" --leave-running --json >"$OUT/ckpt$n.$mib.json" 2>"$OUT/ckpt$n.$mib.err"; then
				fail "$mib MiB: checkpoint $n --leave-running: $(cat "$OUT/ckpt$n.$mib.err")"
				stop_group "$hp"
				return
			fi
			R[stall${n}_ms_$mib]=$(jget "$OUT/ckpt$n.$mib.json" stall_ms)
			R[durable${n}_ms_$mib]=$(jget "$OUT/ckpt$n.$mib.json" duration_ms)
			R[mem${n}_$mib]=$(jget "$OUT/ckpt$n.$mib.json" mem_bytes)
			# Empty in the answer means none (the fields are omitted at 0).
			R[sent${n}_$mib]=$(jget "$OUT/ckpt$n.$mib.json" mem_sent_bytes)
			R[copied${n}_$mib]=$(jget "$OUT/ckpt$n.$mib.json" mem_copied_bytes)
			[[ -n ${R[mem${n}_$mib]} ]] && R[sent${n}_$mib]=${R[sent${n}_$mib]:-0} R[copied${n}_$mib]=${R[copied${n}_$mib]:-0}
			R[steps${n}_$mib]=$(steps "$OUT/ckpt$n.$mib.json")
			R[bytes${n}_$mib]=$(jget "$OUT/ckpt$n.$mib.json" bytes)
			R[stored${n}_$mib]=$(jget "$OUT/ckpt$n.$mib.json" stored_bytes)
			R[store${n}_ms_$mib]=$(step_ms "$OUT/ckpt$n.$mib.json" store)
			echo "  checkpoint $n: stall ${R[stall${n}_ms_$mib]} ms, durable ${R[durable${n}_ms_$mib]} ms; steps: $(steps "$OUT/ckpt$n.$mib.json")"
			if wait_iter "$log" $((it + 3)) 60 && [[ $(bad_checks "$log") == 0 ]]; then
				R[gap${n}_ms_$mib]=$(max_gap "$log" "$it")
				pass "$mib MiB: checkpoint $n --leave-running; the client went on with its data intact (longest gap ${R[gap${n}_ms_$mib]} ms)"
			else
				fail "$mib MiB: after checkpoint $n --leave-running the client did not go on cleanly: $(tail -n 2 "$log")"
			fi
		done
		# Stop-and-copy, then restore: the client's checks cover every byte.
		it=$(last_iter "$log")
		if ! ctl "$A_API" checkpoint "$sid" --json >"$OUT/ckpt3.$mib.json" 2>"$OUT/ckpt3.$mib.err"; then
			fail "$mib MiB: checkpoint: $(cat "$OUT/ckpt3.$mib.err")"
			stop_group "$hp"
			return
		fi
		img=$(jget "$OUT/ckpt3.$mib.json" image)
		sync
		t0=$(ms_now)
		if ! ctl "$A_API" restore "$img" --json >"$OUT/restore.$mib.json" 2>"$OUT/restore.$mib.err"; then
			fail "$mib MiB: restore $img: $(cat "$OUT/restore.$mib.err")"
			stop_group "$hp"
			return
		fi
		t1=$(ms_now)
		R[restore_s_$mib]=$(secs "$t0" "$t1")
		R[rsteps_$mib]=$(steps "$OUT/restore.$mib.json")
		echo "  restore steps: ${R[rsteps_$mib]}"
		if wait_iter "$log" $((it + 3)) 60 && [[ $(bad_checks "$log") == 0 ]]; then
			pass "$mib MiB: restored in ${R[restore_s_$mib]} s, every byte as it was (checked on the GPU)"
		else
			fail "$mib MiB: after the restore the client did not go on cleanly: $(tail -n 2 "$log")"
			stop_group "$hp"
			return
		fi
	fi
	if ((MIG)) && [[ " $MIGRATE_SIZES " == *" $mib "* ]]; then
		it=$(last_iter "$log")
		t0=$(ms_now)
		if ctl "$A_API" migrate "$sid" --to "$B_API" --json >"$OUT/migrate.$mib.json" 2>"$OUT/migrate.$mib.err"; then
			t1=$(ms_now)
			R[mig_down_ms_$mib]=$(jget "$OUT/migrate.$mib.json" downtime_ms)
			R[mig_s_$mib]=$(secs "$t0" "$t1")
			R[mig_rounds_$mib]=$(tr -d '\n ' <"$OUT/migrate.$mib.json" | grep -o '"rounds":\[[^]]*\]' | grep -o '"blocks"' | wc -l)
			echo "  migration: downtime ${R[mig_down_ms_$mib]} ms, ${R[mig_s_$mib]} s in all, ${R[mig_rounds_$mib]} pre-copy rounds; steps: $(steps "$OUT/migrate.$mib.json")"
			if wait_iter "$log" $((it + 3)) 60 && [[ $(bad_checks "$log") == 0 ]]; then
				R[mig_gap_ms_$mib]=$(max_gap "$log" "$it")
				pass "$mib MiB: migrated to gpud b; the client went on with its data intact (longest gap ${R[mig_gap_ms_$mib]} ms)"
			else
				fail "$mib MiB: after the migration the client did not go on cleanly: $(tail -n 2 "$log")"
			fi
		else
			fail "$mib MiB: migrate: $(cat "$OUT/migrate.$mib.err")"
		fi
	fi
	stop_group "$hp"
}

# wait_gpu SECONDS: until a new process can use the GPU again. After the
# by-hand steps the driver refuses cuInit (CUDA_ERROR_OPERATING_SYSTEM) to
# new processes for a while (13 s once on the H200), which the next client
# through gpud would otherwise run into.
wait_gpu() {
	local t0 deadline waited
	t0=$(ms_now)
	deadline=$(($(date +%s) + $1))
	while (($(date +%s) < deadline)); do
		if "${NATIVE[@]}" "$WORK/native/gpuckpt" 0 ctx >"$WORK/gpu-probe.log" 2>&1; then
			waited=$(($(ms_now) - t0))
			((waited > 500)) && echo "  the GPU took new processes again after $(secs 0 "$waited") s"
			return 0
		fi
		sleep 0.25
	done
	fail "the GPU refused new processes for $1 s: $(tail -n 1 "$WORK/gpu-probe.log")"
	return 1
}
# waitable: how long a wait for the GPU may take: 150 s, or what is left
# of the budget.
waitable() {
	local left=$((BUDGET - ($(date +%s) - T_START)))
	echo $((left < 150 ? (left > 1 ? left : 1) : 150))
}
# gone PID SECONDS: until PID has exited (a zombie counts as gone).
gone() {
	local deadline=$(($(date +%s) + $2))
	while (($(date +%s) < deadline)); do
		[[ -r /proc/$1/stat ]] || return 0
		[[ $(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null) == Z ]] && return 0
		sleep 0.1
	done
	return 1
}

# ---------------------------------------------------------- by hand
manual_run() {
	local mib=$1 log=$WORK/native.$mib.log img=$WORK/img.$mib pid it rc t0 t1
	start_client "$log" "$mib" native
	if ! wait_log "$log" '^iter 3 ok' 120 "$HP"; then
		fail "$mib MiB: the native client did not start: $(tail -n 3 "$log.out")"
		return
	fi
	pid=$(sed -n 's/^start pid=\([0-9]*\).*/\1/p' "$log" | head -n 1)
	rm -rf "$img"
	mkdir -p "$img"
	it=$(last_iter "$log")
	t0=$(ms_now)
	"${NATIVE[@]}" "$WORK/native/gpuckpt" "$pid" lock checkpoint >"$OUT/manual.$mib.log" 2>&1 &&
		"$CRIU" dump -t "$pid" -D "$img" -o dump.log >>"$OUT/manual.$mib.log" 2>&1
	rc=$?
	t1=$(ms_now)
	sync -f "$img"
	R[man_ckpt_s_$mib]=$(secs "$t0" "$t1")
	# Durable by hand: the dump and its writeback.
	R[man_durable_s_$mib]=$(secs "$t0" "$(ms_now)")
	if ((rc != 0)); then
		fail "$mib MiB by hand: checkpoint failed: $(grep -h Error "$img/dump.log" | head -n 3) $(tail -n 2 "$OUT/manual.$mib.log")"
		kill -9 "$pid" 2>/dev/null
		gone "$pid" 30
		return
	fi
	t0=$(ms_now)
	"$CRIU" restore -D "$img" -d -o restore.log >>"$OUT/manual.$mib.log" 2>&1 &&
		"${NATIVE[@]}" "$WORK/native/gpuckpt" "$pid" restore unlock >>"$OUT/manual.$mib.log" 2>&1
	rc=$?
	t1=$(ms_now)
	R[man_restore_s_$mib]=$(secs "$t0" "$t1")
	if ((rc == 0)) && wait_iter "$log" $((it + 3)) 60 && [[ $(bad_checks "$log") == 0 ]]; then
		pass "$mib MiB by hand: checkpoint ${R[man_ckpt_s_$mib]} s, restore ${R[man_restore_s_$mib]} s; data checked after"
	else
		fail "$mib MiB by hand: restore: $(grep -h Error "$img/restore.log" | head -n 3) $(tail -n 3 "$OUT/manual.$mib.log")"
	fi
	kill -9 "$pid" 2>/dev/null
	gone "$pid" 30
	rm -rf "$img"
}

# migrate_busy MIB: a client of MIB that rewrites REWRITE MiB/s of its
# memory migrates to gpud b: its downtime and pre-copy rounds.
migrate_busy() {
	local mib=$1 log=$WORK/busy.$mib.log sid it hp
	((MIG)) || return
	wait_gpu "$(waitable)" || return
	start_remote "$log" "$mib" "rewrite=$REWRITE"
	hp=$HP
	if ! grep -q '^iter 3 ok' "$log" || ! sid=$(new_session "$A_API" "$BEFORE" 10 $((mib << 19))); then
		fail "$mib MiB rewriting: the client did not start through gpud: $(tail -n 3 "$log.out")"
		stop_group "$hp"
		return
	fi
	it=$(last_iter "$log")
	if ctl "$A_API" migrate "$sid" --to "$B_API" --json >"$OUT/migrate-busy.$mib.json" 2>"$OUT/migrate-busy.$mib.err"; then
		R[busy_down_ms_$mib]=$(jget "$OUT/migrate-busy.$mib.json" downtime_ms)
		R[busy_rounds_$mib]=$(tr -d '\n ' <"$OUT/migrate-busy.$mib.json" | grep -o '"rounds":\[[^]]*\]' | grep -o '"blocks"' | wc -l)
		echo "  migration, rewriting ${REWRITE} MiB/s: downtime ${R[busy_down_ms_$mib]} ms, ${R[busy_rounds_$mib]} pre-copy rounds; steps: $(steps "$OUT/migrate-busy.$mib.json")"
		if wait_iter "$log" $((it + 3)) 60 && [[ $(bad_checks "$log") == 0 ]]; then
			pass "$mib MiB rewriting ${REWRITE} MiB/s: migrated to gpud b; every check after it found the data as written"
		else
			fail "$mib MiB rewriting: after the migration the client did not go on cleanly: $(tail -n 2 "$log")"
		fi
	else
		fail "$mib MiB rewriting: migrate: $(cat "$OUT/migrate-busy.$mib.err")"
		# A failed migration leaves the session running here, its data
		# as written.
		it=$(last_iter "$log")
		if wait_iter "$log" $((it + 3)) 60 && [[ $(bad_checks "$log") == 0 ]]; then
			pass "$mib MiB rewriting: after the failed migration the session runs on gpud a, every check finding the data as written"
		else
			fail "$mib MiB rewriting: after the failed migration the client did not go on cleanly on gpud a: $(tail -n 2 "$log")"
		fi
	fi
	stop_group "$hp"
}

# fits MIB: does the GPU (the session, and room for the driver) and the
# host (the save's memfd, gpud's mirror, the target's staging and the
# restore's copy) have memory for a session of MIB?
fits() {
	local gpu host
	gpu=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits -i 0 | tr -d ' ')
	host=$(awk '/^MemAvailable:/ { print int($2 / 1024) }' /proc/meminfo)
	if ((gpu < $1 + 4096)); then
		skip "$(size "$1"): the GPU has $gpu MiB; a session of $(size "$1") needs about $(($1 + 4096)) MiB"
		return 1
	fi
	if ((host < 3 * $1)); then
		skip "$(size "$1"): the host has $host MiB available; gpud needs about $((3 * $1)) MiB of host memory for a session of $(size "$1")"
		return 1
	fi
	return 0
}

RUN=()
for mib in $SIZES; do
	fits "$mib" || continue
	# gpuctl moves the data about eight times over; the by-hand rows
	# after it at 2 GB/s for the driver's copy, and the wait for the GPU.
	time_for $((20 + mib / 100 + ${HAND:-1} * mib / 200)) "$(size "$mib") (gpuctl$( ((${HAND:-1})) && echo ' and by hand'))" || continue
	step "$(size "$mib"): through gpuctl"
	gpuctl_run "$mib"
	if [[ " $BUSY_SIZES " == *" $mib "* ]]; then
		step "$(size "$mib"): through gpuctl, a client rewriting ${REWRITE} MiB/s migrates"
		# Its rounds are new data on both stores: the disk holds them
		# only without the idle client's images.
		clean_stores
		migrate_busy "$mib"
	fi
	RUN+=("$mib")
	clean_stores
done
# The table and the by-hand rows go smallest size first, whatever order
# SIZES ran in.
((${#RUN[@]})) && mapfile -t RUN < <(printf '%s\n' "${RUN[@]}" | sort -n)
for i in "${!RUN[@]}"; do
	((${HAND:-1})) || break
	# The by-hand copy runs at about 2 GB/s each way.
	time_for $((10 + RUN[i] / 300)) "$(size "${RUN[i]}") by hand" || continue
	# The killed native holder of the size before may keep the driver
	# refusing new processes for a while: wait it out, generously.
	((i > 0)) && { wait_gpu "$(waitable)" || break; }
	step "$(size "${RUN[i]}"): by hand"
	manual_run "${RUN[i]}"
done

# ------------------------------------------------------------------ table
step "results"
ms_s() { awk -v v="${1:-}" 'BEGIN{ if (v=="") print ""; else printf "%.2f", v/1000 }'; }
pct() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN{ if (a=="" || b=="" || b+0==0) print ""; else printf "%.2f%%", 100*a/b }'; }
gbs_of() { awk -v b="${1:-}" -v ms="${2:-}" 'BEGIN{ if (b=="" || ms=="" || ms+0==0) print ""; else printf "%.2f", b/1e9/(ms/1000) }'; }
# verdict VALUE OP LIMIT: met / MISSED / n/a
verdict() { awk -v v="${1:-}" -v op="$2" -v l="$3" 'BEGIN{ if (v=="") { print "n/a"; exit } v+=0; ok = (op=="<=" ? v<=l : v>=l); print (ok ? "met" : "MISSED") }'; }
row() { printf '| %-42s | %10s | %10s | %8s | %-16s | %-6s |\n' "$1" "$(fmt "$2")" "$(fmt "$3")" "$(fmt "$4")" "$5" "$6"; }
{
	echo "Checkpoint at PCIe speed, $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0); fsync'd write ${R[disk_gbs]} GB/s"
	printf '| %-42s | %10s | %10s | %8s | %-16s | %-6s |\n' "measure" "gpuctl" "by hand" "ratio" "target" ""
	printf '|%s|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..44})" "$(printf -- '-%.0s' {1..12})" "$(printf -- '-%.0s' {1..12})" "$(printf -- '-%.0s' {1..10})" "$(printf -- '-%.0s' {1..18})" "$(printf -- '-%.0s' {1..8})"
	for mib in "${RUN[@]}"; do
		g=$(size "$mib")
		man=${R[man_ckpt_s_$mib]:-}
		st=$(ms_s "${R[stall1_ms_$mib]:-}")
		r=$(div "$st" "$man")
		row "$g checkpoint stall (s)" "$st" "$man" "$r" "<= 0.10 by hand" "$(verdict "$r" "<=" 0.10)"
		du=$(ms_s "${R[durable1_ms_$mib]:-}")
		r=$(div "$du" "${R[man_durable_s_$mib]:-}")
		row "$g checkpoint durable (s)" "$du" "${R[man_durable_s_$mib]:-}" "$r" "<= 1.00 by hand" "$(verdict "$r" "<=" 1.00)"
		sg=$(gbs_of "${R[stored1_$mib]:-}" "${R[store1_ms_$mib]:-}")
		r=$(div "$sg" "${R[disk_gbs]}")
		row "$g store write (GB/s) vs fsync'd dd" "$sg" "${R[disk_gbs]}" "$r" ">= 0.70 of disk" "$(verdict "$r" ">=" 0.70)"
		man=${R[man_restore_s_$mib]:-}
		r=$(div "${R[restore_s_$mib]:-}" "$man")
		row "$g restore (s)" "${R[restore_s_$mib]:-}" "$man" "$r" "<= 0.20 by hand" "$(verdict "$r" "<=" 0.20)"
		st=$(ms_s "${R[stall2_ms_$mib]:-}")
		row "$g 2nd checkpoint, idle: stall (s)" "$st" "" "" "<= 0.30 s" "$(verdict "$st" "<=" 0.30)"
		nb=$(awk -v s="${R[sent2_$mib]:-}" -v m="${R[mem2_$mib]:-}" 'BEGIN{ if (s=="" || m=="" || m+0==0) print ""; else printf "%.4f", s/m }')
		row "$g 2nd checkpoint: changed memory" "$(pct "${R[sent2_$mib]:-}" "${R[mem2_$mib]:-}")" "" "" "<= 1% of memory" "$(verdict "$nb" "<=" 0.01)"
		nb=$(awk -v s="${R[copied2_$mib]:-}" -v m="${R[mem2_$mib]:-}" 'BEGIN{ if (s=="" || m=="" || m+0==0) print ""; else printf "%.4f", s/m }')
		row "$g 2nd checkpoint: copied from the GPU" "$(pct "${R[copied2_$mib]:-}" "${R[mem2_$mib]:-}")" "" "" "<= 1% of memory" "$(verdict "$nb" "<=" 0.01)"
		nb=$(awk -v s="${R[stored2_$mib]:-}" -v m="${R[bytes2_$mib]:-}" 'BEGIN{ if (s=="" || m=="" || m+0==0) print ""; else printf "%.4f", s/m }')
		row "$g 2nd checkpoint: new bytes stored" "$(pct "${R[stored2_$mib]:-}" "${R[bytes2_$mib]:-}")" "" "" "<= 1% of image" "$(verdict "$nb" "<=" 0.01)"
		bl=$(awk -v a="${R[man_ckpt_s_$mib]:-}" -v b="${R[man_restore_s_$mib]:-}" 'BEGIN{ if (a!="" && b!="") printf "%.2f", a+b }')
		if [[ -n ${R[mig_down_ms_$mib]:-} ]]; then
			bl=$(awk -v a="${R[man_ckpt_s_$mib]:-}" -v b="${R[man_restore_s_$mib]:-}" 'BEGIN{ if (a!="" && b!="") printf "%.2f", a+b }')
			d=$(ms_s "${R[mig_down_ms_$mib]}")
			row "$g migration downtime (s), ${R[mig_rounds_$mib]:-0} rounds" "$d" "$bl" "$(div "$d" "$bl")" "<= 1 s" "$(verdict "$d" "<=" 1.0)"
		fi
		if [[ -n ${R[busy_down_ms_$mib]:-} ]]; then
			d=$(ms_s "${R[busy_down_ms_$mib]}")
			row "$g migr. rewriting ${REWRITE} MiB/s (s), ${R[busy_rounds_$mib]:-0} rds" "$d" "$bl" "$(div "$d" "$bl")" "<= 2 s" "$(verdict "$d" "<=" 2.0)"
		fi
	done
	echo
	echo "steps (ms): prepare runs before the pause; the stall is quiesce through resume.worker"
	for mib in "${RUN[@]}"; do
		g=$(size "$mib")
		[[ -n ${R[steps1_$mib]:-} ]] && echo "  $g checkpoint 1: ${R[steps1_$mib]}"
		[[ -n ${R[steps2_$mib]:-} ]] && echo "  $g checkpoint 2: ${R[steps2_$mib]}"
		[[ -n ${R[rsteps_$mib]:-} ]] && echo "  $g restore: ${R[rsteps_$mib]}"
		[[ -f $OUT/migrate.$mib.json ]] && echo "  $g migration: $(steps "$OUT/migrate.$mib.json")"
		[[ -f $OUT/migrate-busy.$mib.json ]] && echo "  $g migration, rewriting: $(steps "$OUT/migrate-busy.$mib.json")"
		[[ -f $OUT/manual.$mib.log ]] && echo "  $g by hand: $(tr '\n' ' ' <"$OUT/manual.$mib.log")"
	done
	echo "reloads, as the workers logged them (ms; gpud a's resumes, gpud b's migrations):"
	grep -h 'device memory reloaded' "$OUT"/gpud-*.log 2>/dev/null | grep -o 'bytes=.*' | sed 's/^/  /'
	echo
	echo "ratio: gpuctl / by hand (by hand: driver lock+checkpoint + criu dump, durable with its sync; criu restore + driver restore+unlock; migration: both)."
	echo "stall: the checkpoint reply's stall_ms (the client's pause); durable: its duration_ms; store write: new bytes stored / the store step."
	for f in "${FAILED[@]}"; do echo "failed: ${f:0:300}"; done
	echo "checks: $PASSES passed, $FAILS failed; total $(($(date +%s) - T_START)) s; logs in $OUT"
} | tee "$OUT/table.md"

# The scaling plot, as `make bench` draws it.
for mib in "${RUN[@]}"; do
	echo "$(size "$mib")|${R[stall1_ms_$mib]:-}|${R[stall2_ms_$mib]:-}|${R[mig_down_ms_$mib]:-}|${R[busy_down_ms_$mib]:-}"
done | awk -F'|' -v out="$OUT/scaling.svg" -v names="stall|2nd stall|downtime idle|downtime ${REWRITE} MiB/s" \
	-v title="checkpoint stall (--leave-running) and migration downtime, ms, by session size" \
	-f "$ROOT/e2e/demo/plot.awk" && echo "plot: $OUT/scaling.svg"
((FAILS == 0))
