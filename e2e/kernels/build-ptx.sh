#!/usr/bin/env bash
# Compiles the kernel corpus (src/*.cu) with nvcc into the PTX test data under
# ptx/, plus the module containers that the loader tests use.
#
#   e2e/kernels/build-ptx.sh            # writes e2e/kernels/ptx/
#   NVCC=/path/nvcc JOBS=8 OUT=/tmp/ptx e2e/kernels/build-ptx.sh
#
# Outputs:
#   ptx/<stem>.sm_75.ptx, ptx/<stem>.sm_90.ptx   one per src/<stem>.cu
#   ptx/containers/basic.ptx_only.fatbin         PTX (compute_75) only
#   ptx/containers/basic.sass_ptx.fatbin         SASS sm_75 + sm_90, PTX compute_90
#   ptx/containers/basic.compressed.fatbin       as sass_ptx, every entry compressed
#   ptx/containers/memory.compressed.fatbin      module globals inside a compressed fatbin
#   ptx/containers/basic.sm_90.cubin             a bare cubin (SASS, no PTX)
#   ptx/containers/basic.sass_only.fatbin        SASS sm_90 only: the "no PTX" error
#   ptx/NVCC_VERSION                             nvcc --version of the compiler used
#
# A source file can ask for extra nvcc flags with a first-lines comment:
#   // nvcc-flags: --use_fast_math
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
JOBS=${JOBS:-16}
OUT=${OUT:-$here/ptx}
ARCHS=${ARCHS:-"75 90"}
SRC=$here/src
COMMON_FLAGS=(-std=c++17 -O3)

# flags_of prints the extra nvcc flags a source declares.
flags_of() {
	sed -n 's|^// nvcc-flags:[[:space:]]*||p' "$1" | head -n 1
}

# one_ptx compiles one source for one architecture; xargs runs many at once.
one_ptx() {
	local stem=$1 arch=$2
	local src=$SRC/$stem.cu
	local dst=$OUT/$stem.sm_$arch.ptx
	# shellcheck disable=SC2046
	if ! "$NVCC" "${COMMON_FLAGS[@]}" $(flags_of "$src") -ptx -arch=sm_"$arch" -o "$dst.tmp" "$src" 2>"$OUT/logs/$stem.sm_$arch.log"; then
		echo "FAIL $stem sm_$arch:" >&2
		cat "$OUT/logs/$stem.sm_$arch.log" >&2
		rm -f "$dst.tmp"
		return 1
	fi
	mv "$dst.tmp" "$dst"
	echo "ok   $stem.sm_$arch.ptx"
}

# one_container builds one named container from one source with the given flags.
one_container() {
	local name=$1 stem=$2
	shift 2
	local src=$SRC/$stem.cu
	if ! "$NVCC" "${COMMON_FLAGS[@]}" "$@" -o "$OUT/containers/$name.tmp" "$src" 2>"$OUT/logs/$name.log"; then
		echo "FAIL $name ($*):" >&2
		cat "$OUT/logs/$name.log" >&2
		rm -f "$OUT/containers/$name.tmp"
		return 1
	fi
	mv "$OUT/containers/$name.tmp" "$OUT/containers/$name"
	echo "ok   containers/$name"
}

# compressed builds a fully compressed fatbin; the flag spelling differs
# between nvcc releases, so try the known ones in turn.
compressed() {
	local name=$1 stem=$2
	shift 2
	one_container "$name" "$stem" -fatbin "$@" -Xfatbin=-compress-all 2>/dev/null ||
		one_container "$name" "$stem" -fatbin "$@" -Xfatbin=--compress-all 2>/dev/null ||
		one_container "$name" "$stem" -fatbin "$@" --compress-mode=size
}

job() {
	case $1 in
	ptx) one_ptx "$2" "$3" ;;
	ptx_only) one_container basic.ptx_only.fatbin basic -fatbin -gencode arch=compute_75,code=compute_75 ;;
	sass_ptx) one_container basic.sass_ptx.fatbin basic -fatbin -gencode arch=compute_75,code=sm_75 \
		-gencode arch=compute_90,code='[sm_90,compute_90]' ;;
	compressed) compressed basic.compressed.fatbin basic -gencode arch=compute_75,code=sm_75 \
		-gencode arch=compute_90,code='[sm_90,compute_90]' ;;
	compressed_globals) compressed memory.compressed.fatbin memory -gencode arch=compute_90,code='[sm_90,compute_90]' ;;
	cubin) one_container basic.sm_90.cubin basic -cubin -arch=sm_90 ;;
	sass_only) one_container basic.sass_only.fatbin basic -fatbin -gencode arch=compute_90,code=sm_90 ;;
	*) echo "unknown job $1" >&2; return 1 ;;
	esac
}

if [[ ${1:-} == --job ]]; then
	shift
	job "$@"
	exit
fi

if ! [[ -x $NVCC ]]; then
	echo "build-ptx.sh: nvcc not found at $NVCC; set NVCC=/path/to/nvcc" >&2
	exit 1
fi
export NVCC OUT SRC
mkdir -p "$OUT/logs" "$OUT/containers"
"$NVCC" --version >"$OUT/NVCC_VERSION"

start=$(date +%s)
{
	for src in "$SRC"/*.cu; do
		stem=$(basename "$src" .cu)
		for arch in $ARCHS; do
			echo "ptx $stem $arch"
		done
	done
	printf '%s\n' ptx_only sass_ptx compressed compressed_globals cubin sass_only
} | xargs -P "$JOBS" -L 1 "$0" --job && status=0 || status=$?

rm -rf "$OUT/logs"
echo "build-ptx.sh: $(ls "$OUT"/*.ptx 2>/dev/null | wc -l) PTX files, $(ls "$OUT"/containers 2>/dev/null | wc -l) containers in $(($(date +%s) - start))s"
if [[ $status -ne 0 ]]; then
	echo "build-ptx.sh: some builds failed (see above)" >&2
	exit 1
fi
