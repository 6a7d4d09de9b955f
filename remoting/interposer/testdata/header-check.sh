#!/bin/bash
# Checks gpuctl's cuda.h against NVIDIA's: every enum value and constant
# gpuctl declares must have the same value there, the shared structs the
# same size, and every function prototype must be compatible (the compiler
# rejects a redeclaration with another type). Run it where NVIDIA's
# headers are installed, e.g. on a GPU host:
#   remoting/interposer/testdata/header-check.sh /usr/local/cuda/include
set -euo pipefail
nv=${1:-/usr/local/cuda/include}
here=$(cd "$(dirname "$0")/.." && pwd)
ours=$here/include/cuda.h
[ -f "$nv/cuda.h" ] || { echo "no cuda.h in $nv (pass NVIDIA's include directory)" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Enumerators and the integer-valued macros of our header.
names=$(grep -oE '^\s+(CU|CUDA|CIG)_[A-Z0-9_]+\s*=' "$ours" | tr -d ' =\t' | sort -u)
{
	echo '#include <stdio.h>'
	echo '#include <cuda.h>'
	echo 'int main(void) {'
	for n in $names; do echo "  printf(\"%s %lld\\n\", \"$n\", (long long)$n);"; done
	for n in CUDA_VERSION CU_MEMHOSTALLOC_PORTABLE CU_MEMHOSTALLOC_DEVICEMAP CU_MEMHOSTALLOC_WRITECOMBINED \
		CU_MEMHOSTREGISTER_PORTABLE CU_MEMHOSTREGISTER_DEVICEMAP CU_MEMHOSTREGISTER_IOMEMORY CU_MEMHOSTREGISTER_READ_ONLY; do
		echo "  printf(\"%s %lld\\n\", \"$n\", (long long)$n);"
	done
	for p in CU_STREAM_LEGACY CU_STREAM_PER_THREAD CU_LAUNCH_PARAM_END CU_LAUNCH_PARAM_BUFFER_POINTER CU_LAUNCH_PARAM_BUFFER_SIZE; do
		echo "  printf(\"%s %lld\\n\", \"$p\", (long long)(uintptr_t)$p);"
	done
	for s in CUuuid CUctxCreateParams CUexecAffinityParam CUcheckpointLockArgs CUcheckpointCheckpointArgs \
		CUcheckpointGpuPair CUcheckpointRestoreArgs CUcheckpointUnlockArgs \
		CUDA_MEMCPY2D CUDA_MEMCPY3D CUDA_KERNEL_NODE_PARAMS CUDA_MEMSET_NODE_PARAMS CUDA_HOST_NODE_PARAMS \
		CUDA_GRAPH_INSTANTIATE_PARAMS CUgraphEdgeData CUstreamBatchMemOpParams CUmemLocation CUmemAllocationProp \
		CUmemAccessDesc CUmemPoolProps CUtensorMap; do
		echo "  printf(\"sizeof(%s) %zu\\n\", \"$s\", sizeof($s));"
	done
	echo '  return 0; }'
} >"$tmp/values.c"
gcc -w -I"$here/include" -o "$tmp/ours" "$tmp/values.c"
gcc -w -I"$nv" -o "$tmp/nv" "$tmp/values.c" 2>"$tmp/nv.err" || {
	echo "NVIDIA's header lacks names gpuctl declares:" >&2
	grep -oE "'[A-Za-z0-9_]+' undeclared" "$tmp/nv.err" | sort -u >&2
	exit 1
}
"$tmp/ours" >"$tmp/ours.txt"
"$tmp/nv" >"$tmp/nv.txt"
if ! diff "$tmp/nv.txt" "$tmp/ours.txt" >"$tmp/diff"; then
	echo "values differ (< NVIDIA, > gpuctl):" >&2
	cat "$tmp/diff" >&2
	exit 1
fi

# Prototypes: our declarations after NVIDIA's header must not conflict.
{
	echo '#include <cuda.h>'
	awk '/^CUresult CUDAAPI cu/,/;/' "$ours"
} >"$tmp/protos.c"
if ! gcc -fsyntax-only -I"$nv" "$tmp/protos.c" 2>"$tmp/protos.err"; then
	echo "prototypes conflict with NVIDIA's:" >&2
	grep -E "error" "$tmp/protos.err" >&2
	exit 1
fi
echo "cuda.h: $(wc -l <"$tmp/ours.txt") values and sizes and $(grep -c '^CUresult CUDAAPI' "$ours") prototypes agree with $nv/cuda.h"
