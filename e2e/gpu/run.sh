#!/usr/bin/env bash
# The GPU suite: everything gpuctl must do on a real NVIDIA host, in one run.
#
#   e2e/gpu/run.sh            (or: make gpu-test)
#
# Needs, on the GPU host: an NVIDIA driver >= 570, nvcc, gcc, root, and from a
# build machine: build/ (gpud, gpuctl, lib/libcuda.so.1, include/cuda.h) and
# the CRIU bundle .deps/criu (make deps). No Go toolchain is needed here.
#
# It
#   1. builds the kernels (nvcc -ptx), the C test programs (e2e/cprogs,
#      e2e/kernels/kernelrun.c) and this suite's helpers twice: against
#      NVIDIA's cuda.h and libcuda (native) and against build/ (remote);
#   2. runs the programs natively and through gpud --backend cuda and
#      requires the same output (timings aside), and kernel-corpus outputs
#      that match under each case's comparison (kernelcheck, from make
#      gpu-tools; byte for byte without it);
#   3. checkpoints (also --leave-running) and restores sessions holding
#      1 GiB and 8 GiB through gpuctl, with the data checked on the GPU
#      before and after, and times
#      the manual baseline (driver lock+checkpoint, criu dump; criu restore,
#      driver restore+unlock) on the same program;
#   4. with two GPUs, checks that the driver refuses a single-pair GPU map
#      and restores onto GPU1 with the full permutation;
#   5. live-migrates a running 8 GiB session from a gpud serving GPU0 to one
#      serving GPU1 (on one GPU: a second gpud on GPU0) while the client
#      keeps running and checking its data;
#   6. prints one table of everything measured, side by side.
# Right after the build it runs the backend conformance suite
# (remoting/backend/backendtest) on the cuda backend, when make gpu-tools
# built build/bin/cuda-conformance.test.
#
# Variables: OUT (logs; default /tmp/gpuctl-gpu-suite), WORK (scratch for
# images, default a fresh dir under /tmp), SIZES (MiB, default "1024 8192"),
# MIGRATE_MIB (default 8192), NVCC, CUDA_INC, CRIU, BUDGET (seconds, default
# 520: heavy steps that would overrun it are skipped), KEEP=1 keeps WORK.
# Exit status 0 only if every check passed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/e2e/gpu
OUT=${OUT:-/tmp/gpuctl-gpu-suite}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d /tmp/gpuctl-gpu.XXXXXX)}
mkdir -p "$WORK"
SIZES=${SIZES:-"1024 8192"}
MIGRATE_MIB=${MIGRATE_MIB:-8192}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
CRIU=${CRIU:-$ROOT/.deps/criu/criu}
GPUD=$ROOT/build/bin/gpud
GPUCTL=$ROOT/build/bin/gpuctl
TOKEN=$WORK/token
A_LISTEN=127.0.0.1:17400 A_API=127.0.0.1:17401
B_LISTEN=127.0.0.1:17410 B_API=127.0.0.1:17411
# gpud b runs in a network namespace of its own where `ip` allows: two
# gpuds on one machine otherwise share one namespace of abstract unix socket
# names, and the driver's sockets in a session restored on b collide with
# those of the original, which a keeps frozen until b confirms. Real hosts
# never share that namespace.
B_NS=gpuctl-gpu-b B_EXEC=()
T_START=$(date +%s)

# Everything goes to the terminal and to suite.log; tee -p keeps writing the
# log when a reader goes away early (| head), so the suite still finishes
# and cleans up.
exec > >(tee -p "$OUT/suite.log") 2>&1
TEE=$!

source "$HERE/lib.sh"

# holder_bad LOG: how many checks found wrong data.
holder_bad() { grep -c BAD "$1" 2>/dev/null || true; }

# start_holder LOG MIB remote|native: the data-holding client, in its own
# process group (setsid); HP is its pid (for native: the holder's own).
start_holder() {
	local log=$1 mib=$2 how=$3
	rm -f "$log"
	if [[ $how == remote ]]; then
		setsid "$GPUCTL" run --server "$A_LISTEN" --token-file "$TOKEN" -- "$WORK/remote/holder" "$mib" "$log" "$WORK/kernels.ptx" 50 \
			</dev/null >"$log.out" 2>&1 &
	else
		"${NATIVE[@]}" setsid "$WORK/native/holder" "$mib" "$log" "$WORK/kernels.ptx" 50 </dev/null >"$log.out" 2>&1 &
	fi
	HP=$!
	PIDS+=("$HP")
}


# ------------------------------------------------------------- environment
step "environment"
suite_env

# ---------------------------------------------------------------- build
step "build"
mkdir -p "$WORK/native" "$WORK/remote" "$WORK/ptx"
"$NVCC" -O3 -ptx -arch=sm_"$CAP" -o "$WORK/kernels.ptx" "$HERE/kernels.cu" || { echo "nvcc failed"; exit 1; }
if [[ -x $ROOT/e2e/kernels/build-ptx.sh ]]; then
	OUT="$WORK/ptx" ARCHS="$CAP" NVCC="$NVCC" "$ROOT/e2e/kernels/build-ptx.sh" >"$OUT/build-ptx.log" 2>&1 &&
		pass "kernel corpus compiled ($(ls "$WORK"/ptx/*.ptx | wc -l) PTX files)" ||
		fail "kernel corpus: e2e/kernels/build-ptx.sh failed (see $OUT/build-ptx.log)"
fi
# build_c NAME SRC...: the program both ways.
build_c() {
	local name=$1
	shift
	gcc -O2 -std=gnu11 -I"$HERE" -I"$CUDA_INC" -o "$WORK/native/$name" "$@" -L"$STUBS" -lcuda -lm -lpthread 2>"$OUT/build-$name.native.log" ||
		{ fail "build $name (native): $(head -n 3 "$OUT/build-$name.native.log")"; return 1; }
	gcc -O2 -std=gnu11 -I"$HERE" -I"$ROOT/build/include" -o "$WORK/remote/$name" "$@" \
		-L"$ROOT/build/lib" -Wl,-rpath,"$ROOT/build/lib" -lcuda -lm -lpthread 2>"$OUT/build-$name.remote.log" ||
		{ fail "build $name (remote): $(head -n 3 "$OUT/build-$name.remote.log")"; return 1; }
}
build_c holder "$HERE/holder.c"
build_c bench "$HERE/bench.c"
gcc -O2 -I"$CUDA_INC" -o "$WORK/native/gpuckpt" "$HERE/ckpt.c" -L"$STUBS" -lcuda || fail "build gpuckpt"
# The C test programs and kernelrun (e2e/cprogs/build.sh builds both).
CPROGS=0
if [[ -f $ROOT/e2e/cprogs/build.sh ]]; then
	bash "$ROOT/e2e/cprogs/build.sh" "$CUDA_INC" "$STUBS" "$WORK/native/cprogs" >"$OUT/build-cprogs.native.log" 2>&1 &&
		bash "$ROOT/e2e/cprogs/build.sh" "$ROOT/build/include" "$ROOT/build/lib" "$WORK/remote/cprogs" >"$OUT/build-cprogs.remote.log" 2>&1 &&
		CPROGS=1 || fail "e2e/cprogs/build.sh failed (see $OUT/build-cprogs.*.log)"
fi
echo "built holder, bench, gpuckpt$( ((CPROGS)) && echo ", e2e/cprogs and kernelrun")"

# ----------------------------------------------- backend conformance suite
step "backend conformance suite on the cuda backend"
# The same tests the emulated backend passes in every go test
# (remoting/backend/backendtest), through the cuda backend on this GPU.
if [[ -x $ROOT/build/bin/cuda-conformance.test ]]; then
	if "${NATIVE[@]}" timeout 120 "$ROOT/build/bin/cuda-conformance.test" -test.run '^TestConformance$' -test.v >"$OUT/conformance.log" 2>&1 &&
		! grep -q -- '--- SKIP: TestConformance' "$OUT/conformance.log"; then
		pass "backend conformance suite: $(grep -c -- '    --- PASS' "$OUT/conformance.log") tests pass on the cuda backend"
	else
		fail "backend conformance suite on the cuda backend (see $OUT/conformance.log): $(grep -E -- '--- (FAIL|SKIP)' "$OUT/conformance.log" | head -n 3 | tr '\n' ' ')"
	fi
else
	skip "backend conformance suite: no build/bin/cuda-conformance.test (make gpu-tools)"
fi

# ------------------------------------------------------------ gpud (GPU0)
step "gpud on GPU0"
start_gpud a "$A_LISTEN" "$A_API" 0 || { fail "gpud did not start"; exit 1; }
ctl "$A_API" host --json >"$OUT/host.json" 2>&1 || true
backend=$(jget "$OUT/host.json" backend)
[[ $backend == cuda ]] && pass "gpud reports backend cuda" || fail "gpud reports backend '$backend' (see $OUT/host.json)"
for u in $(nvidia-smi --query-gpu=uuid --format=csv,noheader); do
	grep -q "$u" "$OUT/host.json" && pass "GET /v1/host lists $u" || fail "GET /v1/host does not list $u"
done
ctl "$A_API" doctor >"$OUT/doctor.txt" 2>&1
u0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
grep -q "$u0" "$OUT/doctor.txt" && pass "gpuctl doctor shows the GPUs" || fail "gpuctl doctor does not show GPU0 $u0 (see $OUT/doctor.txt)"

# ---------------------------------------------------- native vs remote
step "test programs: native and through gpud"
# The programs read the freshly compiled corpus. Their output must be the
# same both ways, except the timings some of them print.
export GPUCTL_PTX_DIR=$WORK/ptx GPUCTL_PTX_TARGET=sm_$CAP
untimed() { sed -E 's/[0-9]+(\.[0-9]+)? (ms|GFLOP\/s|GB\/s)/# \2/g' "$1"; }
remote() { timeout 180 "$GPUCTL" run --server "$A_LISTEN" --token-file "$TOKEN" -- "$@"; }
if ((CPROGS)); then
	for run in vecadd reduction matmul warpreduce pipeline errors graphs mempool vmm memops "stateful 16 40 0"; do
		set -- $run
		name=$1
		shift
		"${NATIVE[@]}" timeout 180 "$WORK/native/cprogs/$name" "$@" >"$OUT/$name.native.out" 2>"$OUT/$name.native.err"
		nrc=$?
		remote "$WORK/remote/cprogs/$name" "$@" >"$OUT/$name.remote.out" 2>"$OUT/$name.remote.err"
		rrc=$?
		if [[ $nrc == 0 && $rrc == 0 ]] && cmp -s <(untimed "$OUT/$name.native.out") <(untimed "$OUT/$name.remote.out"); then
			pass "$run: same output natively and through gpud ($(tail -n 1 "$OUT/$name.native.out"))"
		else
			fail "$run: native exit $nrc, remote exit $rrc; see $OUT/$name.{native,remote}.{out,err}"
			diff <(untimed "$OUT/$name.native.out") <(untimed "$OUT/$name.remote.out") | head -n 5
			tail -n 2 "$OUT/$name.native.err" "$OUT/$name.remote.err"
		fi
	done
	# The kernel corpus: every case's outputs, natively and through gpud.
	corpus=$ROOT/e2e/kernels/run-corpus.sh
	"${NATIVE[@]}" PTX_DIR="$WORK/ptx" timeout 300 bash "$corpus" "$WORK/native/cprogs/kernelrun" "sm_$CAP" "$WORK/corpus.native" >"$OUT/corpus.native.log" 2>&1
	nrc=$?
	PTX_DIR="$WORK/ptx" remote bash "$corpus" "$WORK/remote/cprogs/kernelrun" "sm_$CAP" "$WORK/corpus.remote" >"$OUT/corpus.remote.log" 2>&1
	rrc=$?
	n=$(find "$WORK/corpus.native" -type f 2>/dev/null | wc -l)
	# The native outputs are this GPU's record of the corpus; they come back
	# with the logs for e2e/kernels/golden.
	tar czf "$OUT/kernels-gpu-sm_$CAP.tar.gz" -C "$WORK" corpus.native 2>/dev/null
	KC=$ROOT/build/bin/kernelcheck
	if [[ $nrc != 0 || $rrc != 0 || $n == 0 ]]; then
		fail "kernel corpus: native exit $nrc, remote exit $rrc, $n files; logs $OUT/corpus.*.log"
		tail -n 3 "$OUT/corpus.native.log" "$OUT/corpus.remote.log"
	elif [[ -x $KC ]]; then
		# Each case's own comparison (exact, or within its ulp/tol bound).
		if "$KC" -cases "$ROOT/e2e/kernels/cases" -out "$WORK/corpus.remote" -against "$WORK/corpus.native" >"$OUT/corpus.check" 2>&1; then
			pass "kernel corpus: $n outputs through gpud match native ($(tail -n 1 "$OUT/corpus.check"))"
		else
			fail "kernel corpus through gpud differs from native: $(tail -n 3 "$OUT/corpus.check")"
		fi
		"$KC" -cases "$ROOT/e2e/kernels/cases" -out "$WORK/corpus.native" >"$OUT/corpus.native.check" 2>&1 &&
			echo "  native outputs match the CPU references" || echo "  native outputs vs the CPU references: $(tail -n 2 "$OUT/corpus.native.check")"
	elif diff -r "$WORK/corpus.native" "$WORK/corpus.remote" >"$OUT/corpus.diff"; then
		pass "kernel corpus: $n output files identical natively and through gpud"
	else
		fail "kernel corpus: outputs differ (no kernelcheck to apply tolerances; make gpu-tools): $(head -n 3 "$OUT/corpus.diff")"
	fi
else
	skip "e2e/cprogs is not in this tree"
fi

# ------------------------------------------------------------ benchmarks
step "microbenchmarks"
"${NATIVE[@]}" timeout 120 "$WORK/native/bench" "$WORK/kernels.ptx" 256 >"$OUT/bench.native" 2>&1 || fail "native bench: $(tail -n 2 "$OUT/bench.native")"
timeout 180 "$GPUCTL" run --server "$A_LISTEN" --token-file "$TOKEN" -- "$WORK/remote/bench" "$WORK/kernels.ptx" 256 >"$OUT/bench.remote" 2>&1 ||
	fail "remote bench: $(tail -n 2 "$OUT/bench.remote")"
while read -r k v; do R[native_$k]=$v; done < <(grep -E '^[a-z0-9_]+ [0-9.NA]+$' "$OUT/bench.native")
while read -r k v; do R[remote_$k]=$v; done < <(grep -E '^[a-z0-9_]+ [0-9.NA]+$' "$OUT/bench.remote")
cat "$OUT/bench.native" "$OUT/bench.remote" | sed 's/^/  /'

# ------------------------------------------- checkpoint/restore via gpuctl
step "checkpoint and restore through gpuctl"
for mib in $SIZES; do
	time_for $((20 + mib / 128)) "gpuctl checkpoint/restore of $mib MiB" || continue
	log=$WORK/holder.remote.$mib.log
	before=$(sessions "$A_API")
	start_holder "$log" "$mib" remote
	hp=$HP
	if ! wait_log "$log" '^iter 3 ok' 120 "$HP"; then
		fail "$mib MiB: the holder did not start through gpud: $(tail -n 3 "$log.out")"
		stop_group "$hp"
		continue
	fi
	sid=$(new_session "$A_API" "$before" 10) || { fail "$mib MiB: no new session listed"; stop_group "$hp"; continue; }
	if [[ $mib == "${SIZES%% *}" ]]; then
		# --leave-running: suspend, dump, then the driver restores the GPU
		# state in place and the same client carries on.
		it=$(last_iter "$log")
		t0=$(ms_now)
		if ctl "$A_API" checkpoint "$sid" --leave-running --json >"$OUT/ckpt-lr.$mib.json" 2>"$OUT/ckpt-lr.$mib.err"; then
			R[gpuctl_ckpt_lr_s_$mib]=$(awk -v a="$t0" -v b="$(ms_now)" 'BEGIN{printf "%.2f", (b-a)/1000}')
			echo "  checkpoint --leave-running steps: $(steps "$OUT/ckpt-lr.$mib.json")"
			if wait_iter "$log" $((it + 5)) 60 && [[ $(holder_bad "$log") == 0 ]]; then
				pass "$mib MiB: checkpoint --leave-running in ${R[gpuctl_ckpt_lr_s_$mib]} s; the session kept running with its data intact"
			else
				fail "$mib MiB: after checkpoint --leave-running the holder did not continue cleanly: $(tail -n 2 "$log")"
			fi
			R[gpuctl_ckpt_lr_stall_ms_$mib]=$(max_gap "$log" "$it")
		else
			fail "$mib MiB: gpuctl checkpoint --leave-running: $(cat "$OUT/ckpt-lr.$mib.err")"
		fi
	fi
	it=$(last_iter "$log")
	t0=$(ms_now)
	if ! ctl "$A_API" checkpoint "$sid" --json >"$OUT/ckpt.$mib.json" 2>"$OUT/ckpt.$mib.err"; then
		fail "$mib MiB: gpuctl checkpoint $sid: $(cat "$OUT/ckpt.$mib.err")"
		stop_group "$hp"
		continue
	fi
	t1=$(ms_now)
	img=$(jget "$OUT/ckpt.$mib.json" image)
	R[gpuctl_ckpt_s_$mib]=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", (b-a)/1000}')
	R[gpuctl_ckpt_bytes_$mib]=$(jget "$OUT/ckpt.$mib.json" bytes)
	R[gpuctl_ckpt_stored_$mib]=$(jget "$OUT/ckpt.$mib.json" stored_bytes)
	t0=$(ms_now)
	if ! ctl "$A_API" restore "$img" --json >"$OUT/restore.$mib.json" 2>"$OUT/restore.$mib.err"; then
		fail "$mib MiB: gpuctl restore $img: $(cat "$OUT/restore.$mib.err")"
		stop_group "$hp"
		continue
	fi
	t1=$(ms_now)
	R[gpuctl_restore_s_$mib]=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", (b-a)/1000}')
	echo "  checkpoint steps: $(steps "$OUT/ckpt.$mib.json")"
	st=$(steps "$OUT/restore.$mib.json")
	[[ -n $st ]] && echo "  restore steps: $st"
	# The restore is complete when gpuctl returns; the client reconnects
	# within its backoff (at most a second), well inside 30 s.
	if wait_iter "$log" $((it + 5)) 30 && [[ $(holder_bad "$log") == 0 ]]; then
		pass "$mib MiB: checkpoint ${R[gpuctl_ckpt_s_$mib]} s, restore ${R[gpuctl_restore_s_$mib]} s; data checked on the GPU after ($(last_iter "$log") checks, none bad)"
	else
		fail "$mib MiB: after restore the holder did not continue cleanly: $(tail -n 2 "$log")"
	fi
	R[gpuctl_stall_ms_$mib]=$(max_gap "$log" "$it")
	stop_group "$hp"
done

# --------------------------------------------------------- manual baseline
step "manual baseline: driver checkpoint API + criu, same program"
for mib in $SIZES; do
	time_for $((15 + mib / 256)) "manual baseline of $mib MiB" || continue
	log=$WORK/holder.native.$mib.log img=$WORK/img.$mib
	map=""
	# On two GPUs the baseline of the migration size also moves GPUs, with a
	# full permutation, as gpuctl's migration does.
	((NGPU >= 2)) && [[ $mib == "$MIGRATE_MIB" ]] && map="0:1,1:0"
	start_holder "$log" "$mib" native
	if ! wait_log "$log" '^iter 3 ok' 120 "$HP"; then
		fail "$mib MiB native holder did not start: $(tail -n 3 "$log.out")"
		continue
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
	R[manual_ckpt_s_$mib]=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", (b-a)/1000}')
	R[manual_image_mb_$mib]=$(du -sm "$img" | cut -f1)
	if [[ $rc != 0 ]]; then
		fail "$mib MiB manual checkpoint failed: $(grep -h Error "$img/dump.log" | head -n 3) $(tail -n 2 "$OUT/manual.$mib.log")"
		kill -9 "$pid" 2>/dev/null
		continue
	fi
	t0=$(ms_now)
	"$CRIU" restore -D "$img" -d -o restore.log >>"$OUT/manual.$mib.log" 2>&1 &&
		"${NATIVE[@]}" GPUCKPT_MAP="$map" "$WORK/native/gpuckpt" "$pid" restore unlock >>"$OUT/manual.$mib.log" 2>&1
	rc=$?
	t1=$(ms_now)
	R[manual_restore_s_$mib]=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", (b-a)/1000}')
	if [[ $rc == 0 ]] && wait_iter "$log" $((it + 5)) 60 && [[ $(holder_bad "$log") == 0 ]]; then
		pass "$mib MiB manual: checkpoint ${R[manual_ckpt_s_$mib]} s, restore ${R[manual_restore_s_$mib]} s${map:+ onto GPU1 (map $map)}; data checked after"
	else
		fail "$mib MiB manual restore${map:+ with map $map}: $(grep -h Error "$img/restore.log" | head -n 3) $(tail -n 3 "$OUT/manual.$mib.log")"
	fi
	grep -h 'ms=' "$OUT/manual.$mib.log" | sed 's/^/  /'
	kill -9 "$pid" 2>/dev/null
	rm -rf "$img"
done

# ---------------------------------------------------------------- migrate
# --------------------------------------------------------- remap facts
# What the GPU map design rests on, checked on this driver: a map naming
# only the GPU that moves is refused; the full permutation moves the memory.
if ((NGPU >= 2)) && time_for 30 "the GPU map check"; then
	step "driver GPU map: single pair refused, full permutation works"
	log=$WORK/holder.remap.log
	start_holder "$log" 1024 native
	if wait_log "$log" '^iter 3 ok' 60 "$HP"; then
		pid=$(sed -n 's/^start pid=\([0-9]*\).*/\1/p' "$log" | head -n 1)
		m1=$(gpu_mem_mib 1)
		"${NATIVE[@]}" "$WORK/native/gpuckpt" "$pid" lock checkpoint >"$OUT/remap.log" 2>&1
		"${NATIVE[@]}" GPUCKPT_MAP=0:1 "$WORK/native/gpuckpt" "$pid" restore >>"$OUT/remap.log" 2>&1 &&
			fail "the driver accepted a single-pair GPU map; docs/gpu.md says it does not" ||
			pass "the driver refuses a single-pair map: $(grep '^restore' "$OUT/remap.log" | tail -n 1)"
		it=$(last_iter "$log")
		if "${NATIVE[@]}" GPUCKPT_MAP=0:1,1:0 "$WORK/native/gpuckpt" "$pid" state restore unlock >>"$OUT/remap.log" 2>&1 &&
			wait_iter "$log" $((it + 5)) 30 && [[ $(holder_bad "$log") == 0 ]]; then
			pass "the full permutation restores onto GPU1 (GPU1 memory $m1 -> $(gpu_mem_mib 1) MiB), data checked after"
		else
			fail "the full permutation did not restore cleanly: $(tail -n 3 "$OUT/remap.log")"
		fi
	else
		fail "the remap holder did not start: $(tail -n 3 "$log.out")"
	fi
	kill -9 "$HP" 2>/dev/null
fi

# With two GPUs the second gpud serves GPU1 and the session moves there; with
# one, it serves the same GPU, which still proves a restore with the client
# running and its data checked.
BGPU=$((NGPU >= 2 ? 1 : 0))
step "live migration GPU0 -> GPU$BGPU between two gpuds"
if ! time_for $((30 + MIGRATE_MIB / 128)) "migration of $MIGRATE_MIB MiB"; then
	:
elif b_netns && start_gpud b "$B_LISTEN" "$B_API" "$BGPU"; then
	log=$WORK/holder.migrate.log
	before=$(sessions "$A_API")
	start_holder "$log" "$MIGRATE_MIB" remote
	hp=$HP
	if wait_log "$log" '^iter 3 ok' 120 "$HP" && sid=$(new_session "$A_API" "$before" 10); then
		m0=$(gpu_mem_mib 0) m1=$(gpu_mem_mib "$BGPU")
		it=$(last_iter "$log")
		t0=$(ms_now)
		if ctl "$A_API" migrate "$sid" --to "$B_API" --json >"$OUT/migrate.json" 2>"$OUT/migrate.err"; then
			t1=$(ms_now)
			R[migrate_s]=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.2f", (b-a)/1000}')
			R[migrate_downtime_ms]=$(jget "$OUT/migrate.json" downtime_ms)
			echo "  migration steps: $(steps "$OUT/migrate.json")"
			if wait_iter "$log" $((it + 10)) 90 && [[ $(holder_bad "$log") == 0 ]]; then
				pass "migrated $sid to GPU$BGPU in ${R[migrate_s]} s; the client kept checking its data ($(last_iter "$log") checks, none bad)"
			else
				fail "after migration the holder did not continue cleanly: $(tail -n 2 "$log")"
			fi
			R[migrate_stall_ms]=$(max_gap "$log" "$it")
			n0=$(gpu_mem_mib 0) n1=$(gpu_mem_mib "$BGPU")
			echo "  GPU memory used (MiB): before GPU0=$m0 GPU$BGPU=$m1, after GPU0=$n0 GPU$BGPU=$n1"
			if ((BGPU == 1)); then
				((n1 - m1 > MIGRATE_MIB * 9 / 10)) && pass "the session's memory is on GPU1 now" || fail "GPU1 did not gain the session's memory"
			fi
			sessions "$B_API" | grep -qx -- "$sid" && pass "gpud b lists $sid" || fail "gpud b does not list $sid"
		else
			fail "gpuctl migrate: $(cat "$OUT/migrate.err")"
		fi
	else
		fail "the migration holder did not start: $(tail -n 3 "$log.out")"
	fi
	stop_group "$hp"
else
	fail "the second gpud did not start"
fi

# ------------------------------------------------------------------ table
step "results"
gbs() { awk -v mib="$1" -v s="${2:-}" 'BEGIN{ if (s=="" || s+0==0) print ""; else printf "%.2f", mib*1048576/1e9/s }'; }
row() { printf '| %-44s | %14s | %14s | %-36s | %7s |\n' "$1" "$(fmt "$2")" "$(fmt "$3")" "$4" "$(fmt "${5:-}")"; }
{
	echo "GPU suite, $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), $NGPU GPU(s), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)"
	printf '| %-44s | %14s | %14s | %-36s | %7s |\n' "measure" "gpuctl" "baseline" "baseline is" "ratio"
	printf '|%s|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..46})" "$(printf -- '-%.0s' {1..16})" "$(printf -- '-%.0s' {1..16})" "$(printf -- '-%.0s' {1..38})" "$(printf -- '-%.0s' {1..9})"
	row "sync call round trip, median (us)" "${R[remote_rtt_us]:-}" "${R[native_rtt_us]:-}" "native cuStreamQuery" "$(div "${R[remote_rtt_us]:-}" "${R[native_rtt_us]:-}")"
	row "sync call round trip, p99 (us)" "${R[remote_rtt_p99_us]:-}" "${R[native_rtt_p99_us]:-}" "native cuStreamQuery" "$(div "${R[remote_rtt_p99_us]:-}" "${R[native_rtt_p99_us]:-}")"
	row "async launch, per launch (us)" "${R[remote_launch_us]:-}" "${R[native_launch_us]:-}" "native cuLaunchKernel" "$(div "${R[remote_launch_us]:-}" "${R[native_launch_us]:-}")"
	row "launches per second" "${R[remote_launches_per_s]:-}" "${R[native_launches_per_s]:-}" "native cuLaunchKernel" "$(div "${R[remote_launches_per_s]:-}" "${R[native_launches_per_s]:-}")"
	row "HtoD 256 MiB (GB/s)" "${R[remote_htod_gbs]:-}" "${R[native_htod_gbs]:-}" "native, pageable" "$(div "${R[remote_htod_gbs]:-}" "${R[native_htod_gbs]:-}")"
	row "HtoD 256 MiB (GB/s)" "${R[remote_htod_gbs]:-}" "${R[native_htod_pinned_gbs]:-}" "native, pinned" "$(div "${R[remote_htod_gbs]:-}" "${R[native_htod_pinned_gbs]:-}")"
	row "DtoH 256 MiB (GB/s)" "${R[remote_dtoh_gbs]:-}" "${R[native_dtoh_gbs]:-}" "native, pageable" "$(div "${R[remote_dtoh_gbs]:-}" "${R[native_dtoh_gbs]:-}")"
	row "DtoH 256 MiB (GB/s)" "${R[remote_dtoh_gbs]:-}" "${R[native_dtoh_pinned_gbs]:-}" "native, pinned" "$(div "${R[remote_dtoh_gbs]:-}" "${R[native_dtoh_pinned_gbs]:-}")"
	for mib in $SIZES; do
		g=$(size "$mib")
		row "checkpoint $g (s)" "${R[gpuctl_ckpt_s_$mib]:-}" "${R[manual_ckpt_s_$mib]:-}" "lock+checkpoint+criu dump" "$(div "${R[manual_ckpt_s_$mib]:-}" "${R[gpuctl_ckpt_s_$mib]:-}")"
		row "checkpoint $g (GB/s)" "$(gbs "$mib" "${R[gpuctl_ckpt_s_$mib]:-}")" "$(gbs "$mib" "${R[manual_ckpt_s_$mib]:-}")" "lock+checkpoint+criu dump" "$(div "${R[manual_ckpt_s_$mib]:-}" "${R[gpuctl_ckpt_s_$mib]:-}")"
		row "restore $g (s)" "${R[gpuctl_restore_s_$mib]:-}" "${R[manual_restore_s_$mib]:-}" "criu restore+restore+unlock" "$(div "${R[manual_restore_s_$mib]:-}" "${R[gpuctl_restore_s_$mib]:-}")"
		row "restore $g (GB/s)" "$(gbs "$mib" "${R[gpuctl_restore_s_$mib]:-}")" "$(gbs "$mib" "${R[manual_restore_s_$mib]:-}")" "criu restore+restore+unlock" "$(div "${R[manual_restore_s_$mib]:-}" "${R[gpuctl_restore_s_$mib]:-}")"
		row "image $g: logical / new in store (MB)" "$(awk -v b="${R[gpuctl_ckpt_bytes_$mib]:-}" -v s="${R[gpuctl_ckpt_stored_$mib]:-}" 'BEGIN{ if (b!="") printf "%.0f/%.0f", b/1e6, s/1e6 }')" "${R[manual_image_mb_$mib]:-}" "criu image directory (MB)" ""
	done
	first=${SIZES%% *}
	if [[ -n ${R[gpuctl_ckpt_lr_s_$first]:-} ]]; then
		row "checkpoint $(size "$first") --leave-running (s)" "${R[gpuctl_ckpt_lr_s_$first]}" "" "" ""
		row "  client stall during it, longest gap (ms)" "${R[gpuctl_ckpt_lr_stall_ms_$first]:-}" "" "" ""
	fi
	if [[ -n ${R[migrate_s]:-} ]]; then
		bl=$(awk -v a="${R[manual_ckpt_s_$MIGRATE_MIB]:-}" -v b="${R[manual_restore_s_$MIGRATE_MIB]:-}" 'BEGIN{ if (a!="" && b!="") printf "%.0f", (a+b)*1000 }')
		row "migrate $(size "$MIGRATE_MIB") GPU0->GPU$BGPU: downtime (ms)" "${R[migrate_downtime_ms]:-}" "$bl" "manual stop-and-copy (ckpt+restore)" "$(div "$bl" "${R[migrate_downtime_ms]:-}")"
		row "migrate: client stall, longest gap (ms)" "${R[migrate_stall_ms]:-}" "" "" ""
		row "migrate: gpuctl migrate wall time (s)" "${R[migrate_s]:-}" "" "" ""
	fi
	echo "ratio: gpuctl/baseline for round trips, launch costs and rates (1.00 = native); baseline/gpuctl (the speed-up) for checkpoint, restore and downtime"
	for f in "${FAILED[@]}"; do echo "failed: ${f:0:300}"; done
	echo "checks: $PASSES passed, $FAILS failed; total $(($(date +%s) - T_START)) s; logs in $OUT"
} | tee "$OUT/table.md"
((FAILS == 0))
