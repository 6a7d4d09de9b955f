#!/usr/bin/env bash
# The runtime-API part of the GPU suite: compiles e2e/runtime/testdata's
# CUDA runtime programs with the host's nvcc (static and shared cudart,
# SASS for the GPU plus PTX), runs each natively and through a gpud with
# --backend cuda, and compares their outputs; then runs PyTorch's first
# CUDA call through gpuctl where PyTorch is installed. Needs build/ from a
# build machine; writes logs and outputs under OUT.
#
# Environment: OUT (default /tmp/gpuctl-runtime), NVCC, ARCH (default 90),
# DRVLIB (directory of NVIDIA's libcuda.so.1), TORCH=0 to skip PyTorch.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-/tmp/gpuctl-runtime}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
ARCH=${ARCH:-90}
DRVLIB=${DRVLIB:-/usr/local/nvidia/lib64}
WORK=$(mktemp -d /tmp/gpuctl-rt.XXXXXX)
mkdir -p "$OUT" "$WORK/bin"
LISTEN=127.0.0.1:17500 API=127.0.0.1:17501
GPUCTL=$ROOT/build/bin/gpuctl
fail=0 pass=0

env -u LD_PRELOAD LD_LIBRARY_PATH="$DRVLIB" setsid "$ROOT/build/bin/gpud" --listen $LISTEN --api $API \
	--state-dir "$WORK/state" --backend cuda >"$OUT/gpud.log" 2>&1 &
GPUD_PID=$!
trap 'kill $GPUD_PID 2>/dev/null; wait $GPUD_PID 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 150); do [ -s "$WORK/state/token" ] && break; sleep 0.2; done
TOKEN=$WORK/state/token

src=$ROOT/e2e/runtime/testdata
gen="-gencode arch=compute_$ARCH,code=sm_$ARCH -gencode arch=compute_$ARCH,code=compute_$ARCH"
progs="vadd reduce streams symbols dynshared errors thrust"
for p in $progs; do
	for rt in static shared; do
		b=$WORK/bin/$p-$rt
		# shellcheck disable=SC2086
		if ! "$NVCC" -O2 $gen -cudart $rt -o "$b" "$src/$p.cu" >"$OUT/$p-$rt.build" 2>&1; then
			echo "FAIL build $p-$rt: $(tail -3 "$OUT/$p-$rt.build")"; fail=$((fail + 1)); continue
		fi
		env LD_LIBRARY_PATH="$DRVLIB:/usr/local/cuda/lib64" timeout 120 "$b" >"$OUT/$p-$rt.native" 2>&1
		nrc=$?
		timeout 300 "$GPUCTL" run --server $LISTEN --token-file "$TOKEN" -- env LD_LIBRARY_PATH="$ROOT/build/lib:/usr/local/cuda/lib64" "$b" \
			>"$OUT/$p-$rt.remote" 2>"$OUT/$p-$rt.remote.err"
		rrc=$?
		if [ $nrc -eq 0 ] && [ $rrc -eq 0 ] && cmp -s "$OUT/$p-$rt.native" "$OUT/$p-$rt.remote"; then
			echo "ok   $p-$rt ($(tail -1 "$OUT/$p-$rt.remote"))"; pass=$((pass + 1))
		else
			echo "FAIL $p-$rt: native exit $nrc, remote exit $rrc"
			echo "  native: $(tail -2 "$OUT/$p-$rt.native" | tr '\n' '|')"
			echo "  remote: $(tail -2 "$OUT/$p-$rt.remote" | tr '\n' '|') stderr: $(head -5 "$OUT/$p-$rt.remote.err" | tr '\n' '|')"
			fail=$((fail + 1))
		fi
	done
done

# The driver's private answers (cuBLASLt's TPC layout, cluster slot,
# cuGetProcAddress corner cases, stream numbers): one binary, linked
# against build/include's cuda.h, run on NVIDIA's libcuda and through
# gpuctl; the outputs must match line for line.
b=$WORK/bin/private
if gcc -O1 -I"$ROOT/build/include" -o "$b" "$ROOT/e2e/gpu/tools/private.c" -L"$ROOT/build/lib" -l:libcuda.so.1 \
	>"$OUT/private.build" 2>&1; then
	env LD_LIBRARY_PATH="$DRVLIB" timeout 60 "$b" >"$OUT/private.native" 2>&1
	nrc=$?
	timeout 120 "$GPUCTL" run --server $LISTEN --token-file "$TOKEN" -- env LD_LIBRARY_PATH="$ROOT/build/lib" "$b" \
		>"$OUT/private.remote" 2>"$OUT/private.remote.err"
	rrc=$?
	if [ $nrc -eq 0 ] && [ $rrc -eq 0 ] && cmp -s "$OUT/private.native" "$OUT/private.remote"; then
		echo "ok   private tables ($(grep -c . "$OUT/private.remote") lines equal)"; pass=$((pass + 1))
	else
		echo "FAIL private tables: native exit $nrc, remote exit $rrc"
		diff "$OUT/private.native" "$OUT/private.remote" | head -10
		fail=$((fail + 1))
	fi
else
	echo "FAIL build private: $(tail -3 "$OUT/private.build")"; fail=$((fail + 1))
fi

if [ "${TORCH:-1}" != 0 ] && python3 -c 'import torch' 2>/dev/null; then
	py='import torch; x = torch.zeros(1, device="cuda"); torch.cuda.synchronize(); print("torch", torch.__version__, x.cpu().tolist())'
	timeout 300 "$GPUCTL" run --server $LISTEN --token-file "$TOKEN" -- env GPUCTL_DEBUG=1 LD_LIBRARY_PATH="$ROOT/build/lib" \
		python3 -c "$py" >"$OUT/torch-zeros.out" 2>"$OUT/torch-zeros.err"
	rc=$?
	if [ $rc -eq 0 ]; then echo "ok   torch.zeros: $(tail -1 "$OUT/torch-zeros.out")"; pass=$((pass + 1))
	else echo "FAIL torch.zeros: exit $rc"; fail=$((fail + 1)); fi
	grep -v "cuGetProcAddress(" "$OUT/torch-zeros.err" | sort | uniq -c | sort -rn | head -25
fi
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
