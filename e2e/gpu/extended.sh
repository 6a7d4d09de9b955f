#!/usr/bin/env bash
# The cuda backend's side of the driver surface that the CUDA runtime,
# cuBLAS and PyTorch use beyond plain driver-API programs: stream capture
# and graphs, memory pools and stream-ordered allocation, virtual memory
# management, stream memory operations, tensor maps, pitched and peer
# copies, the client's caches and the module cache.
#
#   e2e/gpu/extended.sh
#
# Needs, on the GPU host: an NVIDIA driver >= 570, the CUDA toolkit (nvcc,
# include/), gcc, root, and from a build machine build/ (make build) and
# .deps/criu (make deps). PyTorch is used when `python3 -c 'import torch'`
# works.
#
# It
#   1. checks build/include/cuda.h against NVIDIA's (values, struct sizes,
#      prototypes);
#   2. builds the kernel corpus and e2e/cprogs natively and against build/,
#      runs graphs, mempool, vmm, memops and stateful (in plain, pool, vmm
#      and vmm+pool memory) natively and through gpud --backend cuda, and
#      requires the same output;
#      then asynchronous copies from and to page-locked memory (asynctest,
#      the same both ways) and streambench's timings both ways;
#   3. loads a 16 MiB module from two processes through gpud: the first
#      uploads it, the second sends its hash only;
#   4. counts the round trips of a PyTorch process's driver calls
#      (stepreplay) with and without the client's caches;
#   5. checkpoints a session holding VMM and pool memory, restores it and
#      requires the result of an unmigrated run;
#   6. with PyTorch: a CUDA graph replay, the cudaMallocAsync allocator and
#      expandable segments, natively and through gpuctl run, with the same
#      printed results (these need the runtime's export tables in the
#      interposer; without them the remote runs fail at their first call).
#
# Variables: OUT (logs; default /tmp/gpuctl-gpu-extended), WORK (scratch),
# NVCC, CUDA_INC, CRIU, KEEP=1 keeps WORK. Exit status 0 only if every check
# passed.
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/gpuctl-gpu-extended}
mkdir -p "$OUT"
WORK=${WORK:-$(mktemp -d /tmp/gpuctl-ext.XXXXXX)}
mkdir -p "$WORK"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
CRIU=${CRIU:-$ROOT/.deps/criu/criu}
GPUD=$ROOT/build/bin/gpud
GPUCTL=$ROOT/build/bin/gpuctl
TOKEN=$WORK/token
LISTEN=127.0.0.1:17500 API=127.0.0.1:17501
T_START=$(date +%s)

exec > >(tee -p "$OUT/extended.log") 2>&1
TEE=$!

FAILS=0 PASSES=0 FAILED=() PIDS=()
pass() { PASSES=$((PASSES + 1)); echo "PASS  $*"; }
fail() { FAILS=$((FAILS + 1)); FAILED+=("$*"); echo "FAIL  $*"; }
skip() { echo "SKIP  $*"; }
step() { echo; echo "== $* ($(($(date +%s) - T_START)) s)"; }

cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null; done
	sleep 1
	for p in "${PIDS[@]}"; do kill -KILL -- "-$p" 2>/dev/null || kill -KILL "$p" 2>/dev/null; done
	[[ ${KEEP:-0} == 1 ]] || rm -rf "$WORK"
	exec >&- 2>&-
	for _ in $(seq 50); do kill -0 "$TEE" 2>/dev/null && sleep 0.1 || break; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

ctl() { timeout 240 "$GPUCTL" --host "$API" --token-file "$TOKEN" "$@"; }
remote() { timeout 300 "$GPUCTL" run --server "$LISTEN" --token-file "$TOKEN" -- "$@"; }
untimed() { sed -E 's/[0-9]+(\.[0-9]+)? (ms|GFLOP\/s|GB\/s)/# \2/g' "$1"; }
# jnum FILE KEY: a number from a flat JSON object.
jnum() { tr -d '\n ' <"$1" | grep -o "\"$2\":[0-9]*" | head -n 1 | cut -d: -f2; }

# ------------------------------------------------------------- environment
step "environment"
need() { [[ -e $1 ]] || { echo "missing $1: $2"; exit 2; }; }
command -v nvidia-smi >/dev/null || { echo "nvidia-smi not found: this script needs an NVIDIA host"; exit 2; }
need "$NVCC" "set NVCC=/path/to/nvcc"
need "$CUDA_INC/cuda.h" "set CUDA_INC to the CUDA toolkit's include directory"
need "$GPUD" "run make build on a build machine and carry build/ along"
need "$ROOT/build/lib/libcuda.so.1" "run make build and carry build/ along"
need "$CRIU" "run make deps and carry .deps/criu along, or set CRIU"
[[ $(id -u) == 0 ]] || { echo "needs root (CRIU and the driver's checkpoint API)"; exit 2; }
nvidia-smi -L
CAP=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader -i 0 | tr -d ' .')
DRVLIB=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 .*x86-64/ { print $NF; exit }')
for d in /usr/local/nvidia/lib64 /usr/lib/x86_64-linux-gnu; do
	[[ -z $DRVLIB && -e $d/libcuda.so.1 ]] && DRVLIB=$d/libcuda.so.1
done
[[ -n $DRVLIB ]] || { echo "NVIDIA's libcuda.so.1 not found"; exit 2; }
NATIVE=(env -u LD_PRELOAD LD_LIBRARY_PATH="$(dirname "$DRVLIB")")
STUBS=$(dirname "$(find /usr/local/cuda/ -path '*stubs/libcuda.so' 2>/dev/null | head -n 1)")
[[ -d $STUBS ]] || STUBS=/usr/local/cuda/lib64/stubs
od -An -tx1 -N32 /dev/urandom | tr -d ' \n' >"$TOKEN"
chmod 600 "$TOKEN"

# ------------------------------------------------------------- cuda.h
step "cuda.h against NVIDIA's"
if bash "$ROOT/remoting/interposer/testdata/header-check.sh" "$CUDA_INC" >"$OUT/header-check.log" 2>&1; then
	pass "$(tail -n 1 "$OUT/header-check.log")"
else
	fail "header check (see $OUT/header-check.log)"
	tail -n 20 "$OUT/header-check.log"
fi

# ------------------------------------------------------------- build
step "build"
mkdir -p "$WORK/ptx" "$WORK/native" "$WORK/remote"
OUT="$WORK/ptx" ARCHS="$CAP" NVCC="$NVCC" "$ROOT/e2e/kernels/build-ptx.sh" >"$OUT/build-ptx.log" 2>&1 ||
	{ fail "kernel corpus (see $OUT/build-ptx.log)"; exit 1; }
bash "$ROOT/e2e/cprogs/build.sh" "$CUDA_INC" "$STUBS" "$WORK/native" >"$OUT/build-native.log" 2>&1 &&
	bash "$ROOT/e2e/cprogs/build.sh" "$ROOT/build/include" "$ROOT/build/lib" "$WORK/remote" >"$OUT/build-remote.log" 2>&1 ||
	{ fail "e2e/cprogs/build.sh (see $OUT/build-*.log)"; exit 1; }
for p in modbench stepreplay; do
	gcc -O2 -I"$ROOT/build/include" -o "$WORK/remote/$p" "$ROOT/remoting/interposer/testdata/$p.c" \
		-L"$ROOT/build/lib" -Wl,-rpath,"$ROOT/build/lib" -lcuda || fail "build $p"
done
for p in asynctest streambench; do
	gcc -O2 -pthread -I"$CUDA_INC" -o "$WORK/native/$p" "$ROOT/remoting/interposer/testdata/$p.c" -L"$STUBS" -lcuda ||
		fail "build $p (native)"
	gcc -O2 -pthread -I"$ROOT/build/include" -o "$WORK/remote/$p" "$ROOT/remoting/interposer/testdata/$p.c" \
		-L"$ROOT/build/lib" -Wl,-rpath,"$ROOT/build/lib" -lcuda || fail "build $p"
done
export GPUCTL_PTX_DIR=$WORK/ptx GPUCTL_PTX_TARGET=sm_$CAP

# ------------------------------------------------------------- gpud
step "gpud --backend cuda"
mkdir -p "$WORK/a"
"${NATIVE[@]}" GPUCTL_CRIU="$CRIU" setsid "$GPUD" --listen "$LISTEN" --api "$API" --state-dir "$WORK/a" \
	--backend cuda --token-file "$TOKEN" --name ext >"$OUT/gpud.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 150); do ctl sessions --json >/dev/null 2>&1 && break; sleep 0.2; done
ctl sessions --json >/dev/null 2>&1 || { fail "gpud did not start (see $OUT/gpud.log)"; exit 1; }

# ------------------------------------------------------------- programs
step "programs: native and through gpud"
same() { # same NAME ENV... -- ARGS...: run both ways, compare
	local name=$1
	shift
	local envs=()
	while [[ $1 != -- ]]; do envs+=("$1"); shift; done
	shift
	local tag="$name${envs[*]:+ ${envs[*]}}"
	local f="$OUT/${name}${envs[0]:+.${envs[0]//[^a-z+]/}}"
	env "${envs[@]}" "${NATIVE[@]}" timeout 300 "$WORK/native/$name" "$@" >"$f.native.out" 2>"$f.native.err"
	local nrc=$?
	env "${envs[@]}" "$GPUCTL" run --server "$LISTEN" --token-file "$TOKEN" -- "$WORK/remote/$name" "$@" >"$f.remote.out" 2>"$f.remote.err"
	local rrc=$?
	if [[ $nrc == 0 && $rrc == 0 ]] && cmp -s <(untimed "$f.native.out") <(untimed "$f.remote.out"); then
		pass "$tag: same output natively and through gpud ($(tail -n 1 "$f.native.out"))"
	else
		fail "$tag: native exit $nrc, remote exit $rrc; see $f.{native,remote}.{out,err}"
		tail -n 3 "$f.native.err" "$f.remote.err"
	fi
}
same graphs -- 65536
same mempool -- 1048576
same vmm --
same memops --
for m in plain pool vmm vmm+pool; do
	same stateful STATEFUL_MEMORY=$m -- 16 40 0
done

# ------------------------------------------------------------- asynchronous copies
step "asynchronous copies from and to page-locked memory"
same asynctest -- check
same asynctest -- threads 4 20
# The shape of NVIDIA's simpleStreams (64 MiB up, kernels, 64 MiB down):
# synchronous copies against asynchronous ones, natively and through gpud.
"${NATIVE[@]}" timeout 300 "$WORK/native/streambench" 64 9 >"$OUT/streambench.native.out" 2>&1 &&
	"$GPUCTL" run --server "$LISTEN" --token-file "$TOKEN" -- "$WORK/remote/streambench" 64 9 >"$OUT/streambench.remote.out" 2>&1 &&
	pass "streambench natively and through gpud: $(grep -c '^| ' "$OUT/streambench.remote.out") table rows" ||
	fail "streambench (see $OUT/streambench.*.out)"
sed 's/^/  native: /' "$OUT/streambench.native.out"
sed 's/^/  gpuctl: /' "$OUT/streambench.remote.out"

# ------------------------------------------------------------- module cache
step "module upload once"
for i in 1 2; do
	GPUCTL_STATS=$WORK/mod$i.json remote "$WORK/remote/modbench" 16 >"$OUT/modbench$i.out" 2>&1 ||
		fail "modbench run $i (see $OUT/modbench$i.out)"
done
u1=$(jnum "$WORK/mod1.json" ModuleUpload) u2=$(jnum "$WORK/mod2.json" ModuleUpload)
[[ ${u1:-0} == 1 && -z $u2 ]] && pass "16 MiB module: first process uploaded it, second sent its hash ($(cat "$OUT/modbench1.out") / $(cat "$OUT/modbench2.out"))" ||
	fail "module cache: uploads $u1 then ${u2:-0} (want 1 then 0); see $WORK/mod*.json"

# ------------------------------------------------------------- round trips
step "round trips of a PyTorch process's calls"
GPUCTL_NO_CACHE=1 GPUCTL_STATS=$WORK/rt0.json remote "$WORK/remote/stepreplay" >"$OUT/stepreplay0.out" 2>&1
GPUCTL_STATS=$WORK/rt1.json remote "$WORK/remote/stepreplay" >"$OUT/stepreplay1.out" 2>&1
r0=$(jnum "$WORK/rt0.json" total_round_trips) r1=$(jnum "$WORK/rt1.json" total_round_trips)
[[ -n $r0 && -n $r1 ]] && ((r1 < r0)) && pass "stepreplay: $r0 round trips without the caches, $r1 with them" ||
	fail "stepreplay: round trips ${r0:-?} and ${r1:-?}"

# ------------------------------------------------------------- checkpoint
step "checkpoint and restore a session holding VMM and pool memory"
want=$(grep RESULT "$OUT/stateful.vmm+pool.native.out" 2>/dev/null)
before=$(ctl sessions --json 2>/dev/null | grep -o '"id" *: *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/')
STATEFUL_MEMORY=vmm+pool setsid "$GPUCTL" run --server "$LISTEN" --token-file "$TOKEN" -- "$WORK/remote/stateful" 16 40 150 \
	>"$OUT/ckpt-stateful.out" 2>&1 &
run=$!
PIDS+=("$run")
sid=
for _ in $(seq 100); do
	for s in $(ctl sessions --json 2>/dev/null | grep -o '"id" *: *"[^"]*"' | sed 's/.*"\([^"]*\)"$/\1/'); do
		grep -qx -- "$s" <<<"$before" || sid=$s
	done
	[[ -n $sid ]] && break
	sleep 0.2
done
sleep 2
if [[ -n $sid ]] && ctl checkpoint "$sid" --json >"$OUT/ckpt.json" 2>&1; then
	img=$(tr -d '\n ' <"$OUT/ckpt.json" | grep -o '"image":"[^"]*"' | cut -d'"' -f4)
	sleep 1
	ctl restore "$img" --json >"$OUT/restore.json" 2>&1 || fail "restore (see $OUT/restore.json)"
else
	fail "checkpoint of session '${sid}' (see $OUT/ckpt.json)"
fi
wait "$run"
got=$(grep RESULT "$OUT/ckpt-stateful.out")
[[ -n $want && $got == "$want" ]] && pass "VMM+pool session checkpointed and restored: $got" ||
	fail "checkpointed run: '$got', native: '$want' (see $OUT/ckpt-stateful.out)"

# ------------------------------------------------------------- PyTorch
step "PyTorch"
if "${NATIVE[@]}" python3 -c 'import torch; assert torch.cuda.is_available()' >/dev/null 2>&1; then
	cat >"$WORK/torch_ext.py" <<'EOF'
import os, sys, torch
what = sys.argv[1]
torch.manual_seed(0)
if what == "graph":
    # A CUDA graph of a small MLP's forward, replayed with new inputs.
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 64)).cuda()
    x = torch.randn(32, 256, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            m(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = m(x)
    out = []
    for i in range(5):
        x.copy_(torch.randn(32, 256, device="cuda"))
        g.replay()
        out.append(float(y.double().sum()))
    print("graph", " ".join("%.6e" % v for v in out))
else:
    # Allocations through the allocator under test (PYTORCH_CUDA_ALLOC_CONF).
    total = 0.0
    for i in range(20):
        a = torch.randn(1024 * (i + 1), 256, device="cuda")
        b = (a @ a.T[:, :64]).relu()
        total += float(b.double().sum())
        del a, b
    torch.cuda.synchronize()
    print(what, "%.6e" % total, torch.cuda.memory_allocated() >= 0)
EOF
	for t in "graph|" "mallocasync|PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync" "expandable|PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"; do
		name=${t%%|*} conf=${t#*|}
		env ${conf:+"$conf"} "${NATIVE[@]}" timeout 300 python3 "$WORK/torch_ext.py" "$name" >"$OUT/torch-$name.native.out" 2>"$OUT/torch-$name.native.err"
		nrc=$?
		env ${conf:+"$conf"} "$GPUCTL" run --server "$LISTEN" --token-file "$TOKEN" -- timeout 300 python3 "$WORK/torch_ext.py" "$name" \
			>"$OUT/torch-$name.remote.out" 2>"$OUT/torch-$name.remote.err"
		rrc=$?
		if [[ $nrc == 0 && $rrc == 0 ]] && cmp -s "$OUT/torch-$name.native.out" "$OUT/torch-$name.remote.out"; then
			pass "torch $name: same result natively and through gpud ($(cat "$OUT/torch-$name.native.out"))"
		else
			fail "torch $name: native exit $nrc, remote exit $rrc; see $OUT/torch-$name.{native,remote}.{out,err}"
			tail -n 3 "$OUT/torch-$name.remote.err"
		fi
	done
else
	skip "PyTorch with CUDA is not installed here"
fi

echo
echo "== $PASSES passed, $FAILS failed ($(($(date +%s) - T_START)) s)"
for f in "${FAILED[@]}"; do echo "   FAIL  $f"; done
((FAILS == 0))
