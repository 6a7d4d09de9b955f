# Shared by the GPU suites (run.sh, apps.sh, ckpt-bench.sh): check reporting, the holder's log, gpud start-up,
# sessions, timing, and the environment checks. Sourced, never run; the
# sourcing script sets ROOT, HERE, OUT, WORK, NVCC, CUDA_INC, CRIU, GPUD, GPUCTL,
# TOKEN, T_START, B_NS, B_EXEC, and starts its log tee (TEE).

# ---------------------------------------------------------------- helpers
declare -A R          # measurements, by key
FAILS=0 PASSES=0
PIDS=()               # processes to stop on exit
MOUNTS=()             # filesystems to unmount on exit
pass() { PASSES=$((PASSES + 1)); echo "PASS  $*"; }
FAILED=()
fail() { FAILS=$((FAILS + 1)); FAILED+=("$*"); echo "FAIL  $*"; }
skip() { echo "SKIP  $*"; }
step() { echo; echo "== $* ($(($(date +%s) - T_START)) s)"; }
ms_now() { date +%s%3N; }
# jget FILE KEY: the first value of KEY in a JSON file (string or number).
jget() { tr -d '\n' <"$1" | grep -o "\"$2\" *: *\"\\{0,1\\}[^\",}]*" | head -n 1 | sed 's/.*: *"\{0,1\}//'; }
fmt() { [[ -n ${1:-} ]] && printf '%s' "$1" || printf 'n/a'; }
# steps FILE: a pipeline's step timings from its JSON answer, "name ms, ...".
steps() { tr -d '\n ' <"$1" | grep -o '"step":"[^"]*","duration_ns":[0-9]*' | sed 's/"step":"\([^"]*\)","duration_ns":\([0-9]*\)/\1 \2/' |
	awk '{ printf "%s%s %.0f ms", (NR > 1 ? ", " : ""), $1, $2 / 1e6 }'; }
size() { (($1 % 1024 == 0)) && echo "$(($1 / 1024)) GiB" || echo "$1 MiB"; }
div() { awk -v a="${1:-}" -v b="${2:-}" 'BEGIN{ if (a=="" || b=="" || a=="NA" || b=="NA" || b+0==0) print ""; else printf "%.2f", a/b }'; }

cleanup() {
	local p= i m
	for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done
	# gpud finishes in-flight calls on SIGTERM; give it a few seconds.
	for i in $(seq 50); do
		for p in "${PIDS[@]}"; do kill -0 "$p" 2>/dev/null && break; done
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	for p in "${PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
	for m in ${MOUNTS[@]+"${MOUNTS[@]}"}; do umount "$m" 2>/dev/null; done
	if [[ ${KEEP:-0} != 1 ]]; then rm -rf "$WORK"; fi
	((${#B_EXEC[@]})) && ip netns del "$B_NS" 2>/dev/null
	# Let tee write the last lines before the suite's exit status is final.
	exec >&- 2>&-
	for i in $(seq 50); do kill -0 "$TEE" 2>/dev/null && sleep 0.1 || break; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

ctl() { # ctl API ARGS...: gpuctl against one gpud's control API, bounded
	local api=$1
	shift
	timeout 240 "$GPUCTL" --host "$api" --token-file "$TOKEN" "$@"
}

# The whole suite must finish within 9 minutes: a heavy step that could
# not finish in what is left is skipped, and says so.
BUDGET=${BUDGET:-520}
time_for() { # time_for SECONDS WHAT: is there time left for WHAT?
	local left=$((BUDGET - ($(date +%s) - T_START)))
	((left >= $1)) && return 0
	skip "$2: about $1 s needed, $left s left of the ${BUDGET}s budget"
	return 1
}

# last_iter LOG: the number of the holder's last check.
last_iter() { grep -o '^iter [0-9]*' "$1" 2>/dev/null | tail -n 1 | cut -d' ' -f2; }

# wait_iter LOG N SECONDS: wait until the holder has checked past N.
wait_iter() {
	local deadline=$(($(date +%s) + $3)) it
	while (($(date +%s) < deadline)); do
		it=$(last_iter "$1")
		[[ -n $it ]] && ((it > $2)) && return 0
		sleep 0.1
	done
	return 1
}

# max_gap LOG FROM: the longest time (ms) between two of the holder's
# checks from check FROM on: the client's longest stall.
max_gap() {
	awk -v from="$2" '/^iter/ { split($NF, t, "="); if ($2 >= from && prev != "") { g = t[2] - prev; if (g > m) m = g } if ($2 >= from) prev = t[2] } END { printf "%.0f", m }' "$1"
}

# wait_log LOG PATTERN SECONDS [PID]: wait until LOG has a line matching
# PATTERN; give up early when PID has exited.
wait_log() {
	local deadline=$(($(date +%s) + $3))
	while (($(date +%s) < deadline)); do
		grep -q -- "$2" "$1" 2>/dev/null && return 0
		[[ -n ${4:-} ]] && ! kill -0 "$4" 2>/dev/null && return 1
		sleep 0.1
	done
	return 1
}


gpu_mem_mib() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i "$1" | tr -d ' '; }

# sessions API: the ids of sessions gpuctl lists, one per line.
sessions() { ctl "$1" sessions --json 2>/dev/null | tr -d '\n' | grep -o '"id" *: *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/'; }

# new_session API BEFORE SECONDS [MINBYTES]: a session id not in BEFORE
# that holds at least MINBYTES of device memory, once it appears. The
# bound tells a client's session from one a failed earlier try left
# behind, whose worker came up late.
new_session() {
	local deadline=$(($(date +%s) + $3)) s m
	while (($(date +%s) < deadline)); do
		while read -r s m; do
			[[ -n $s ]] || continue
			grep -qx -- "$s" <<<"$2" && continue
			((${m:-0} >= ${4:-0})) && { echo "$s"; return 0; }
		done < <(ctl "$1" sessions --json 2>/dev/null | tr -d '\n ' | grep -o '"id":"[^"]*"[^}]*"mem_bytes":[0-9]*' |
			sed 's/^"id":"\([^"]*\)".*"mem_bytes":\([0-9]*\)$/\1 \2/')
		sleep 0.2
	done
	return 1
}

# b_netns puts gpud b behind a veth pair in its own network namespace
# (10.213.0.2), or leaves it on loopback when that cannot be done.
b_netns() {
	ip netns del "$B_NS" 2>/dev/null
	ip link del gpuctl-b0 2>/dev/null
	if ip netns add "$B_NS" 2>/dev/null &&
		ip link add gpuctl-b0 type veth peer name gpuctl-b1 &&
		ip link set gpuctl-b1 netns "$B_NS" &&
		ip addr add 10.213.0.1/24 dev gpuctl-b0 && ip link set gpuctl-b0 up &&
		ip -n "$B_NS" addr add 10.213.0.2/24 dev gpuctl-b1 &&
		ip -n "$B_NS" link set gpuctl-b1 up && ip -n "$B_NS" link set lo up; then
		B_EXEC=(ip netns exec "$B_NS")
		B_LISTEN=10.213.0.2:17410 B_API=10.213.0.2:17411
		echo "gpud b gets network namespace $B_NS"
	else
		ip netns del "$B_NS" 2>/dev/null
		echo "no network namespace for gpud b (needs ip and root); it shares a's"
	fi
	return 0
}

# start_gpud NAME LISTEN API GPU: a gpud serving one GPU, logs in OUT.
start_gpud() {
	local name=$1 listen=$2 api=$3 gpu=$4 uuid
	uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i "$gpu" | tr -d ' ')
	mkdir -p "$WORK/$name"
	local pre=()
	[[ $name == b ]] && pre=("${B_EXEC[@]}")
	# gpud must load NVIDIA's libcuda, never the interposer.
	"${pre[@]}" "${NATIVE[@]}" GPUCTL_CRIU="$CRIU" setsid "$GPUD" --listen "$listen" --api "$api" \
		--state-dir "$WORK/$name" --backend cuda --token-file "$TOKEN" --name "$name" ${GPU_FLAG:+$GPU_FLAG "$uuid"} \
		${GPUD_ARGS:-} >"$OUT/gpud-$name.log" 2>&1 &
	PIDS+=($!)
	local deadline=$(($(date +%s) + 30))
	while (($(date +%s) < deadline)); do
		ctl "$api" sessions --json >/dev/null 2>&1 && { echo "gpud $name up: $api, GPU $gpu ($uuid)"; return 0; }
		sleep 0.2
	done
	echo "gpud $name did not come up; its log:"
	tail -n 20 "$OUT/gpud-$name.log"
	return 1
}

stop_group() { kill -KILL -- "-$1" 2>/dev/null || kill -KILL "$1" 2>/dev/null; wait "$1" 2>/dev/null || true; }


# suite_env checks the host and the carried build, and sets NGPU, CAP,
# NATIVE (the environment native programs and gpud run in), STUBS, GPU_FLAG
# and a fresh TOKEN.
suite_env() {
	need() { [[ -e $1 ]] || { echo "missing $1: $2"; exit 2; }; }
	command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: this suite needs an NVIDIA host"; exit 2; }
	need "$NVCC" "set NVCC=/path/to/nvcc"
	need "$CUDA_INC/cuda.h" "set CUDA_INC to the CUDA toolkit's include directory"
	need "$GPUD" "run make build on a build machine and carry build/ along"
	need "$GPUCTL" "run make build on a build machine and carry build/ along"
	need "$ROOT/build/lib/libcuda.so.1" "run make build and carry build/ along"
	need "$ROOT/build/include/cuda.h" "run make build and carry build/ along"
	need "$CRIU" "run make deps and carry .deps/criu along, or set CRIU"
	[[ $(id -u) == 0 ]] || { echo "the suite needs root (CRIU and the driver's checkpoint API)"; exit 2; }
	uname -r
	head -n 1 /proc/driver/nvidia/version 2>/dev/null
	nvidia-smi -L
	NGPU=$(nvidia-smi -L | wc -l)
	CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 | tr -d ' .')
	"$NVCC" --version | tail -n 1
	"$CRIU" --version | head -n 1
	"$CRIU" check 2>&1 | tail -n 1
	# Native programs and gpud get NVIDIA's library directory first on
	# LD_LIBRARY_PATH and gpuctl's lib/ never; remote programs get gpuctl's
	# through gpuctl run. (Container-style hosts reach /usr/local/nvidia/lib64
	# only through LD_LIBRARY_PATH, so it cannot simply be unset.)
	DRVLIB=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ { print $NF; exit }')
	for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
		[[ -z $DRVLIB && -e $d/libcuda.so.1 ]] && DRVLIB=$d/libcuda.so.1
	done
	[[ -n $DRVLIB ]] || { echo "NVIDIA's libcuda.so.1 not found (ldconfig -p, /usr/local/nvidia/lib64)"; exit 2; }
	NATIVE_LDPATH=$(dirname "$DRVLIB")
	IFS=: read -ra ldparts <<<"${LD_LIBRARY_PATH:-}"
	for d in "${ldparts[@]}"; do
		[[ -n $d && $(realpath -m "$d") != $(realpath -m "$ROOT/build/lib") ]] && NATIVE_LDPATH+=":$d"
	done
	# An array, not a function: a function run in the background is a subshell,
	# and $! would name it instead of the program.
	NATIVE=(env -u LD_PRELOAD LD_LIBRARY_PATH="$NATIVE_LDPATH")
	echo "driver: $DRVLIB"
	# The native programs link against the toolkit's stub and load the driver's
	# libcuda.so.1 at run time.
	STUBS=$(dirname "$(find /usr/local/cuda/ -path '*stubs/libcuda.so' 2>/dev/null | head -n 1)")
	[[ -d $STUBS ]] || STUBS=/usr/local/cuda/lib64/stubs
	# The flag that gives a gpud its GPU.
	GPU_FLAG=
	for f in device gpu; do
		"$GPUD" --help 2>&1 | grep -qE -- "^ +--?$f( |=|$)" && { GPU_FLAG=--$f; break; }
	done
	od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$TOKEN"
	chmod 600 "$TOKEN"
	echo "GPUs: $NGPU (sm_$CAP); work: $WORK; logs: $OUT; gpud selects its GPU with ${GPU_FLAG:-(no flag found: every gpud serves its default GPU)}"
}
