#!/usr/bin/env bash
# The GPU suite's real applications: programs built the ordinary way (the
# CUDA runtime, cuBLAS with e2e/gpu/apps/cublas.cu and NVIDIA's sample,
# Thrust, PyTorch) run natively and through gpuctl on
# the same GPU, and their outputs must agree; a PyTorch training run is
# checkpointed and live-migrated mid-run and its losses must not change.
#
#   e2e/gpu/apps.sh            (or: make gpu-apps)
#
# Needs what run.sh needs (build/, .deps/criu, nvcc, root) plus python3 with
# torch (transformers and torchvision for the GPT-2 and ResNet-50 steps), and
# for NVIDIA's samples a copy of the cuda-samples repository's Common/ and the
# samples it names, at SAMPLES (default .samples/ in the repository root,
# which git ignores: the samples are built here, never committed).
#
# Variables: OUT, WORK, NVCC, CUDA_INC, CRIU as for run.sh; SAMPLES; STEPS
# (GPT-2 training steps, default 12); BENCH_STEPS (timed training steps per
# throughput run, default 100, after BENCH_WARMUP, default 10); BENCH_RUNS
# (throughput runs each way, native and through gpuctl interleaved, default
# 3: the table shows their median and spread); THRUST_RUNS (runs of the
# Thrust program through gpuctl, default 1); BUDGET
# (seconds, default 560); SKIP (names of steps to leave out: "first" for the
# import-to-first-kernel timing, "gpt2" for the GPT-2 training comparison).
# Exit status 0 only if every check passed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
HERE=$ROOT/e2e/gpu
OUT=${OUT:-/tmp/gpuctl-gpu-apps}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d /tmp/gpuctl-apps.XXXXXX)}
mkdir -p "$WORK"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
CRIU=${CRIU:-$ROOT/.deps/criu/criu}
SAMPLES=${SAMPLES:-$ROOT/.samples}
STEPS=${STEPS:-12}
BENCH_STEPS=${BENCH_STEPS:-100}
BENCH_WARMUP=${BENCH_WARMUP:-10}
BENCH_RUNS=${BENCH_RUNS:-3}
PY=${PY:-python3}
GPUD=$ROOT/build/bin/gpud
GPUCTL=$ROOT/build/bin/gpuctl
TOKEN=$WORK/token
A_LISTEN=127.0.0.1:17500 A_API=127.0.0.1:17501
B_LISTEN=127.0.0.1:17510 B_API=127.0.0.1:17511
B_NS=gpuctl-apps-b B_EXEC=()
BUDGET=${BUDGET:-560}
T_START=$(date +%s)

exec > >(tee -p "$OUT/suite.log") 2>&1
TEE=$!
source "$HERE/lib.sh"
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# Measurements are left out of the comparison: lines starting "time " or
# "rate " (and "ready ", where a run paused for the suite), and (for NVIDIA's samples, which check their own results and
# print timings in many shapes) every decimal number.
measured() { grep -vE '^(time|rate|ready) ' "$1"; }
undecimal() { sed -E 's/[0-9]+\.[0-9]+(e[-+]?[0-9]+)?/#/g' "$1"; }
remote() { timeout "${RT:-300}" "$GPUCTL" run --server "$A_LISTEN" --token-file "$TOKEN" -- "$@"; }
native() { timeout "${RT:-300}" "${NATIVE[@]}" "$@"; }

# compare NAME FILTER DIR CMD...: run CMD in DIR natively and through gpuctl,
# and require exit 0 both ways and the same FILTERed output.
compare() {
	local name=$1 filter=$2 dir=$3 nrc rrc t0
	shift 3
	t0=$(ms_now)
	(cd "$dir" && native "$@") >"$OUT/$name.native.out" 2>"$OUT/$name.native.err"
	nrc=$?
	R[native_ms_$name]=$(($(ms_now) - t0))
	t0=$(ms_now)
	(cd "$dir" && remote "$@") >"$OUT/$name.remote.out" 2>"$OUT/$name.remote.err"
	rrc=$?
	R[remote_ms_$name]=$(($(ms_now) - t0))
	if [[ $nrc == 0 && $rrc == 0 ]] && cmp -s <($filter "$OUT/$name.native.out") <($filter "$OUT/$name.remote.out"); then
		pass "$name: same output natively and through gpuctl ($(measured "$OUT/$name.native.out" | tail -n 1 | cut -c1-100))"
		return 0
	fi
	fail "$name: native exit $nrc, remote exit $rrc; see $OUT/$name.{native,remote}.{out,err}"
	diff <($filter "$OUT/$name.native.out") <($filter "$OUT/$name.remote.out") | head -n 6
	tail -n 3 "$OUT/$name.remote.err"
	return 1
}

step "environment"
suite_env
"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || { echo "python3 with torch is needed (PY=...)"; exit 2; }
HAVE_TF=0 HAVE_TV=0
"$PY" -c 'import transformers' 2>/dev/null && HAVE_TF=1
"$PY" -c 'import torchvision' 2>/dev/null && HAVE_TV=1
echo "transformers: $HAVE_TF, torchvision: $HAVE_TV, samples: $SAMPLES"

# ---------------------------------------------------------------- build
step "build"
B=$WORK/bin
mkdir -p "$B"
GENCODE="-gencode arch=compute_$CAP,code=sm_$CAP -gencode arch=compute_$CAP,code=compute_$CAP"
nv() { # nv NAME ARGS...: nvcc, logged
	local name=$1
	shift
	"$NVCC" $GENCODE -O2 "$@" >"$OUT/build-$name.log" 2>&1 || { fail "build $name: $(grep -m 3 -i error "$OUT/build-$name.log")"; return 1; }
}
SAMPLE_DIRS=()
if [[ -d $SAMPLES/Common ]]; then
	S=$SAMPLES/Samples
	I=(-I"$SAMPLES/Common")
	mkdir -p "$B/vectorAdd" "$B/vectorAdd_shared" "$B/matrixMul" "$B/matrixMulDrv" "$B/simpleDrvRuntime" "$B/simpleStreams" "$B/simpleCUBLAS"
	nv vectorAdd "${I[@]}" -o "$B/vectorAdd/vectorAdd" "$S/0_Introduction/vectorAdd/vectorAdd.cu" && SAMPLE_DIRS+=(vectorAdd)
	nv vectorAdd_shared "${I[@]}" -cudart shared -o "$B/vectorAdd_shared/vectorAdd_shared" "$S/0_Introduction/vectorAdd/vectorAdd.cu" && SAMPLE_DIRS+=(vectorAdd_shared)
	nv matrixMul "${I[@]}" -o "$B/matrixMul/matrixMul" "$S/0_Introduction/matrixMul/matrixMul.cu" && SAMPLE_DIRS+=(matrixMul)
	nv matrixMulDrv.fatbin "${I[@]}" -fatbin -o "$B/matrixMulDrv/matrixMul_kernel64.fatbin" "$S/0_Introduction/matrixMulDrv/matrixMul_kernel.cu" &&
		nv matrixMulDrv "${I[@]}" -o "$B/matrixMulDrv/matrixMulDrv" "$S/0_Introduction/matrixMulDrv/matrixMulDrv.cpp" -lcuda && SAMPLE_DIRS+=(matrixMulDrv)
	nv simpleDrvRuntime.fatbin "${I[@]}" -fatbin -o "$B/simpleDrvRuntime/vectorAdd_kernel64.fatbin" "$S/0_Introduction/simpleDrvRuntime/vectorAdd_kernel.cu" &&
		nv simpleDrvRuntime "${I[@]}" -o "$B/simpleDrvRuntime/simpleDrvRuntime" "$S/0_Introduction/simpleDrvRuntime/simpleDrvRuntime.cpp" -lcuda && SAMPLE_DIRS+=(simpleDrvRuntime)
	nv simpleStreams "${I[@]}" -o "$B/simpleStreams/simpleStreams" "$S/0_Introduction/simpleStreams/simpleStreams.cu" && SAMPLE_DIRS+=(simpleStreams)
	nv simpleCUBLAS "${I[@]}" -o "$B/simpleCUBLAS/simpleCUBLAS" "$S/4_CUDA_Libraries/simpleCUBLAS/simpleCUBLAS.cpp" -lcublas && SAMPLE_DIRS+=(simpleCUBLAS)
	echo "samples built: ${SAMPLE_DIRS[*]}"
else
	skip "NVIDIA's samples: no $SAMPLES/Common (copy cuda-samples' Common/ and Samples/ there)"
fi
mkdir -p "$B/thrust" "$B/cublas"
nv thrust -o "$B/thrust/thrust" "$HERE/apps/thrust.cu" && THRUST=1 || THRUST=0
nv cublas -o "$B/cublas/cublas" "$HERE/apps/cublas.cu" -lcublas && CUBLAS=1 || CUBLAS=0

step "gpud"
start_gpud a "$A_LISTEN" "$A_API" 0 || { fail "gpud did not start"; exit 1; }

# ------------------------------------------------------------ programs
step "runtime-API programs, cuBLAS, Thrust"
for s in "${SAMPLE_DIRS[@]}"; do
	compare "$s" undecimal "$B/$s" "./$s"
done
# simpleStreams downloads into registered memory with cudaMemcpyAsync, 400
# times in its streamed loop: through gpuctl each is deferred (queued, its
# data put in place when the reply arrives), none waits for a round trip.
if [[ " ${SAMPLE_DIRS[*]} " == *" simpleStreams "* ]]; then
	(cd "$B/simpleStreams" && GPUCTL_STATS=$OUT/simpleStreams.stats.json remote ./simpleStreams) >"$OUT/simpleStreams.stats.out" 2>&1
	deferred=$(tr -d '\n ' <"$OUT/simpleStreams.stats.json" 2>/dev/null | sed -n 's/.*"async":{\([^}]*\)}.*/\1/p' | grep -o '"MemcpyDtoH":[0-9]*' | cut -d: -f2)
	waited=$(tr -d '\n ' <"$OUT/simpleStreams.stats.json" 2>/dev/null | sed -n 's/.*"round_trips":{\([^}]*\)}.*/\1/p' | grep -o '"MemcpyDtoH":[0-9]*' | cut -d: -f2)
	[[ ${deferred:-0} -ge 400 ]] && pass "simpleStreams: ${deferred} asynchronous downloads deferred, ${waited:-0} synchronous ones waited" ||
		fail "simpleStreams: ${deferred:-0} downloads deferred (want at least 400), ${waited:-0} waited; see $OUT/simpleStreams.stats.*"
fi
((THRUST)) && compare thrust measured "$B/thrust" ./thrust
# THRUST_RUNS > 1 repeats the Thrust program through gpuctl: a sort frees
# its temporary storage while its kernels may still run, which once ended
# in cudaErrorIllegalAddress in one run of several.
if ((THRUST && ${THRUST_RUNS:-1} > 1)) && [[ -s $OUT/thrust.native.out ]]; then
	bad=0
	for i in $(seq 2 "$THRUST_RUNS"); do
		(cd "$B/thrust" && remote ./thrust) >"$OUT/thrust.remote.$i.out" 2>"$OUT/thrust.remote.$i.err" &&
			cmp -s <(measured "$OUT/thrust.native.out") <(measured "$OUT/thrust.remote.$i.out") || {
			bad=$((bad + 1))
			echo "thrust run $i: $(tail -n 1 "$OUT/thrust.remote.$i.err")"
		}
	done
	((bad == 0)) && pass "thrust: $THRUST_RUNS runs through gpuctl, every one as native" ||
		fail "thrust: $bad of $((THRUST_RUNS - 1)) further runs through gpuctl failed or differed; see $OUT/thrust.remote.*"
fi
((CUBLAS)) && compare cublas measured "$B/cublas" ./cublas

step "PyTorch"
APPS=$HERE/apps/torchapps.py
# The first run through this gpud is the cold one: its module cache is empty.
skipped() { [[ " ${SKIP:-} " == *" $1 "* ]] && { skip "$1: left out (SKIP)"; return 0; }; return 1; }
FIRST_RUNS="1 2"
skipped first && FIRST_RUNS=""
for i in $FIRST_RUNS; do
	RT=120 remote "$PY" "$APPS" first-kernel >"$OUT/first$i.remote.out" 2>"$OUT/first$i.remote.err" || fail "first kernel through gpuctl (run $i): $(tail -n 2 "$OUT/first$i.remote.err")"
	RT=120 native "$PY" "$APPS" first-kernel >"$OUT/first$i.native.out" 2>"$OUT/first$i.native.err"
done
R[first_cold]=$(awk '/^time first_kernel_s/ {print $3}' "$OUT/first1.remote.out")
R[first_warm]=$(awk '/^time first_kernel_s/ {print $3}' "$OUT/first2.remote.out")
R[first_native]=$(awk '/^time first_kernel_s/ {print $3}' "$OUT/first2.native.out")
[[ -n ${R[first_warm]} ]] && pass "import torch to first kernel: ${R[first_cold]} s cold, ${R[first_warm]} s warm, ${R[first_native]} s native"
compare torch-matmul measured "$WORK" "$PY" "$APPS" matmul
compare torch-mlp measured "$WORK" "$PY" "$APPS" mlp
((HAVE_TV)) && time_for 60 "ResNet-50" && compare torch-resnet50 measured "$WORK" "$PY" "$APPS" resnet50
if ((HAVE_TF)); then
	! skipped gpt2 && time_for 90 "GPT-2 training" && compare torch-gpt2 measured "$WORK" "$PY" "$APPS" gpt2 --steps "$STEPS"
	if time_for $((40 + BENCH_RUNS * 30)) "training-step throughput"; then
		# Native and remote runs alternate, so that a GPU clock or a
		# neighbour's load that drifts during the suite shifts both sides
		# alike; one run of either is no measure (two of 20 steps once
		# disagreed by 2x). Every remote run counts its requests; a
		# shorter one more, with the same warm-up, so that the difference
		# is what the steady-state steps alone ask.
		bench() { # bench native|remote I [STEPS]
			local side=$1 i=$2 n=${3:-$BENCH_STEPS} o=$OUT/bench-step.$1.$2
			if [[ $side == native ]]; then
				native "$PY" "$APPS" bench-step --steps "$n" --warmup "$BENCH_WARMUP" >"$o" 2>&1
			else
				GPUCTL_STATS=$OUT/stats.$i.json remote "$PY" "$APPS" bench-step --steps "$n" --warmup "$BENCH_WARMUP" >"$o" 2>&1
			fi
			awk '/^rate gpt2_steps_per_s/ {print $3}' "$o"
		}
		NR_=() RR_=()
		for i in $(seq "$BENCH_RUNS"); do
			v=$(bench native "$i") && [[ -n $v ]] && NR_+=("$v")
			v=$(bench remote "$i") && [[ -n $v ]] && RR_+=("$v")
		done
		half=$((BENCH_STEPS / 2))
		bench remote short "$half" >/dev/null
		cp "$OUT/stats.1.json" "$OUT/stats.json" 2>/dev/null
		# stats: "median min max" of the numbers given.
		stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {if (NR) printf "%s %s %s", (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2), v[1], v[NR]}'; }
		read -r "R[step_native]" "R[step_native_min]" "R[step_native_max]" <<<"$(stats "${NR_[@]}")"
		read -r "R[step_remote]" "R[step_remote_min]" "R[step_remote_max]" <<<"$(stats "${RR_[@]}")"
		if ((${#RR_[@]} == BENCH_RUNS)); then
			pass "GPT-2 training steps/s, median of $BENCH_RUNS runs of $BENCH_STEPS steps: ${R[step_remote]} through gpuctl (${RR_[*]}), ${R[step_native]} native (${NR_[*]})"
		else
			fail "bench-step through gpuctl: ${#RR_[@]} of $BENCH_RUNS runs gave a rate; $(tail -n 2 "$OUT"/bench-step.remote.* | tail -n 3)"
		fi
		# Round trips per steady-state step, by op: (long run - short run) / steps between.
		"$PY" - "$OUT/stats.1.json" "$OUT/stats.short.json" $((BENCH_STEPS - half)) >"$OUT/step-roundtrips.txt" 2>&1 <<-'PYEOF'
			import json, sys
			a, b = (json.load(open(f)) for f in sys.argv[1:3])
			n = int(sys.argv[3])
			for kind in ("round_trips", "async"):
			    d = {k: a[kind].get(k, 0) - b[kind].get(k, 0) for k in a[kind]}
			    tot = sum(d.values())
			    top = sorted(((v, k) for k, v in d.items() if v), reverse=True)[:10]
			    print(f"{kind} {tot / n:.1f}", " ".join(f"{k}={v / n:.2f}" for v, k in top))
		PYEOF
		R[step_rt]=$(awk '/^round_trips / {print $2}' "$OUT/step-roundtrips.txt")
	fi
else
	skip "GPT-2: python3 has no transformers"
fi
for k in torch-resnet50; do
	R[rn_native]=$(awk '/^rate resnet50_images_per_s/ {print $3}' "$OUT/$k.native.out" 2>/dev/null)
	R[rn_remote]=$(awk '/^rate resnet50_images_per_s/ {print $3}' "$OUT/$k.remote.out" 2>/dev/null)
done

# ---------------------------------------------- migrate a training run
step "GPT-2 training checkpointed (--leave-running) and live-migrated mid-run"
if ((HAVE_TF)) && time_for 150 "the training migration" && b_netns && start_gpud b "$B_LISTEN" "$B_API" 0; then
	log=$OUT/torch-migrate.remote.out
	before=$(sessions "$A_API")
	# The training pauses before its last two steps until go exists: a
	# checkpoint that lets it go on at once must not let it finish before
	# the migration, which then moves it mid-run whatever the timings.
	go=$WORK/gpt2.go migrated=0
	rm -f "$go"
	setsid "$GPUCTL" run --server "$A_LISTEN" --token-file "$TOKEN" -- "$PY" "$APPS" gpt2 --steps "$STEPS" \
		--pause-at $((STEPS - 3)) --pause-file "$go" >"$log" 2>"$OUT/torch-migrate.remote.err" </dev/null &
	tp=$!
	PIDS+=("$tp")
	if wait_log "$log" '^gpt2 step 3 ' 180 "$tp" && sid=$(new_session "$A_API" "$before" 10); then
		t0=$(ms_now)
		if ctl "$A_API" checkpoint "$sid" --leave-running --json >"$OUT/torch-ckpt.json" 2>"$OUT/torch-ckpt.err"; then
			R[torch_ckpt_ms]=$(($(ms_now) - t0))
			pass "checkpointed the training session $sid with --leave-running in ${R[torch_ckpt_ms]} ms (image $(jget "$OUT/torch-ckpt.json" image))"
		else
			fail "gpuctl checkpoint --leave-running of the training: $(cat "$OUT/torch-ckpt.err")"
		fi
		wait_log "$log" '^ready ' 120 "$tp"
		t0=$(ms_now)
		if ctl "$A_API" migrate "$sid" --to "$B_API" --json >"$OUT/torch-migrate.json" 2>"$OUT/torch-migrate.err"; then
			R[torch_migrate_s]=$(awk -v a="$t0" -v b="$(ms_now)" 'BEGIN{printf "%.2f", (b-a)/1000}')
			R[torch_downtime_ms]=$(jget "$OUT/torch-migrate.json" downtime_ms)
			migrated=1
			pass "migrated the training session to b in ${R[torch_migrate_s]} s (downtime ${R[torch_downtime_ms]} ms, at step $(grep -c '^gpt2 step' "$log"))"
		else
			fail "gpuctl migrate of the training: $(cat "$OUT/torch-migrate.err")"
		fi
		touch "$go"
		if wait "$tp"; then
			ref=$OUT/torch-gpt2.native.out
			if ((!migrated)); then
				fail "the training was not migrated: its losses show nothing"
			elif [[ ! -s $ref ]]; then
				skip "the migrated training's losses: no unmigrated run to compare with (the GPT-2 comparison did not run)"
			elif cmp -s <(measured "$ref") <(measured "$log"); then
				pass "the migrated training's $STEPS losses and final weights equal the unmigrated run's, bit for bit"
			else
				fail "the migrated training's losses differ from the unmigrated run's"
				diff <(measured "$ref") <(measured "$log") | head -n 6
			fi
		else
			fail "the migrated training exited non-zero: $(tail -n 3 "$OUT/torch-migrate.remote.err")"
		fi
	else
		fail "the training did not reach step 3 through gpuctl: $(tail -n 3 "$OUT/torch-migrate.remote.err")"
	fi
	stop_group "$tp"
fi

# ------------------------------------------------------------------ table
step "results"
row() { printf '| %-46s | %12s | %12s | %7s |\n' "$1" "$(fmt "$2")" "$(fmt "$3")" "$(fmt "${4:-}")"; }
{
	echo "GPU apps suite, $(date -u +%Y-%m-%dT%H:%MZ), $(nvidia-smi --query-gpu=name --format=csv,noheader -i 0), driver $(nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0)"
	printf '| %-46s | %12s | %12s | %7s |\n' "measure" "gpuctl" "native" "ratio"
	printf '|%s|%s|%s|%s|\n' "$(printf -- '-%.0s' {1..48})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..14})" "$(printf -- '-%.0s' {1..9})"
	row "GPT-2 small training steps/s (median of $BENCH_RUNS)" "${R[step_remote]:-}" "${R[step_native]:-}" "$(div "${R[step_remote]:-}" "${R[step_native]:-}")"
	[[ -n ${R[step_remote_min]:-} ]] && row "  spread of the $BENCH_RUNS runs (min-max)" "${R[step_remote_min]}-${R[step_remote_max]}" "${R[step_native_min]:-}-${R[step_native_max]:-}" ""
	[[ -n ${R[step_rt]:-} ]] && row "  round trips per steady-state step" "${R[step_rt]}" "" ""
	row "import torch to first kernel, cold (s)" "${R[first_cold]:-}" "${R[first_native]:-}" "$(div "${R[first_cold]:-}" "${R[first_native]:-}")"
	row "import torch to first kernel, warm (s)" "${R[first_warm]:-}" "${R[first_native]:-}" "$(div "${R[first_warm]:-}" "${R[first_native]:-}")"
	row "ResNet-50 inference images/s" "${R[rn_remote]:-}" "${R[rn_native]:-}" "$(div "${R[rn_remote]:-}" "${R[rn_native]:-}")"
	for s in "${SAMPLE_DIRS[@]}" thrust cublas torch-matmul torch-mlp torch-gpt2; do
		[[ -n ${R[remote_ms_$s]:-} ]] && row "$s wall time (ms)" "${R[remote_ms_$s]}" "${R[native_ms_$s]:-}" "$(div "${R[remote_ms_$s]}" "${R[native_ms_$s]:-}")"
	done
	[[ -n ${R[torch_downtime_ms]:-} ]] && row "GPT-2 training live migration downtime (ms)" "${R[torch_downtime_ms]}" "" ""
	[[ -n ${R[torch_ckpt_ms]:-} ]] && row "GPT-2 training checkpoint --leave-running (ms)" "${R[torch_ckpt_ms]}" "" ""
	if [[ -s $OUT/stats.json ]]; then
		[[ -s $OUT/step-roundtrips.txt ]] && sed 's/^/per steady-state step, /' "$OUT/step-roundtrips.txt"
		echo "round trips during bench-step (${BENCH_STEPS} steps + ${BENCH_WARMUP} warm-up): $(jget "$OUT/stats.json" total_round_trips); top 10 ops:"
		tr -d '\n' <"$OUT/stats.json" | sed 's/.*"round_trips": *{\([^}]*\)}.*/\1/' | tr ',' '\n' |
			sed 's/^ *"\([^"]*\)": *\([0-9]*\)/\1 \2/' | sort -k2 -nr | head -n 10 | sed 's/^/  /'
	fi
	echo "ratio: gpuctl/native"
	for f in "${FAILED[@]}"; do echo "failed: ${f:0:300}"; done
	echo "checks: $PASSES passed, $FAILS failed; total $(($(date +%s) - T_START)) s; logs in $OUT"
} | tee "$OUT/table.md"
((FAILS == 0))
