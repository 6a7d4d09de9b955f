#!/usr/bin/env bash
# Builds the C test programs (e2e/cprogs/*.c) and the kernel runner
# (e2e/kernels/kernelrun) with gcc against a cuda.h and a libcuda.
#
#   e2e/cprogs/build.sh [INCLUDE_DIR [LIB_DIR [OUT_DIR]]]
#
# Defaults: build/include, build/lib and build/cprogs of this repository,
# that is gpuctl's own header and interposer. For a native GPU build:
#
#   e2e/cprogs/build.sh /usr/local/cuda/include /usr/local/nvidia/lib64 out/native
#
# The programs find their PTX through GPUCTL_PTX_DIR (or --ptx DIR); see
# e2e/cprogs/README.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
inc=${1:-$root/build/include}
lib=${2:-$root/build/lib}
out=${3:-$root/build/cprogs}
CC=${CC:-gcc}

if [[ ! -f $inc/cuda.h ]]; then
	echo "build.sh: no cuda.h in $inc (run 'make build' first, or pass the include dir)" >&2
	exit 1
fi
# A driver directory often has only libcuda.so.1; link that by its full name.
if [[ -e $lib/libcuda.so ]]; then
	cudalib=-lcuda
elif [[ -e $lib/libcuda.so.1 ]]; then
	cudalib=-l:libcuda.so.1
else
	echo "build.sh: no libcuda.so in $lib (run 'make build' first, or pass the library dir)" >&2
	exit 1
fi
mkdir -p "$out"
# -ffp-contract=off: the programs compare floats bit for bit with the CPU.
flags=(-O2 -std=gnu11 -Wall -Wextra -ffp-contract=off -I "$inc")
libs=(-L "$lib" "$cudalib" -lm)

for src in "$here"/*.c; do
	name=$(basename "$src" .c)
	"$CC" "${flags[@]}" -o "$out/$name" "$src" "${libs[@]}"
done
"$CC" "${flags[@]}" -o "$out/kernelrun" "$root/e2e/kernels/kernelrun/kernelrun.c" "${libs[@]}"
echo "build.sh: built $(ls "$here"/*.c | wc -l) programs and kernelrun into $out"
