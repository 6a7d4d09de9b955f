#!/usr/bin/env bash
# Installs a private CUDA 12.4 toolkit (nvcc, cudart static and shared,
# Thrust/CUB/libcu++ headers) under .deps/nvcc/ from Debian 13's non-free
# archive, for the end-to-end tests that compile runtime-API programs and
# run them on the emulated device. Why trixie's 12.4 and not bookworm's
# 11.8: see docs/runtime.md.
#
# Like the CRIU bundle (scripts/deps.sh) it leaves the system's apt
# sources and libraries alone: a private apt configuration downloads the
# packages and dpkg-deb unpacks them into a scratch tree, from which only
# what nvcc needs is kept (about 240 MB). NVIDIA's binaries in them link
# only against the C library, so they run on Debian 12 as they are.
# Idempotent; prints one line saying what it found or installed.
#
# Environment:
#   GPUCTL_NVCC_DIR       where the toolkit lives (default: .deps/nvcc)
#   GPUCTL_DEBIAN_MIRROR  archive URI (default: the first Debian archive URI
#                         in the system's apt sources)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest=${GPUCTL_NVCC_DIR:-$root/.deps/nvcc}
want=12.4

say() { printf 'nvcc: %s\n' "$*"; }
die() { printf 'nvcc: %s\n' "$*" >&2; exit 1; }

if [ -x "$dest/bin/nvcc" ] && "$dest/bin/nvcc" --version 2>/dev/null | grep -q "release $want"; then
	say "CUDA $want toolkit at $dest"
	exit 0
fi
[ "$(uname -m)" = x86_64 ] || die "the toolkit bundle is built for x86_64 only"
command -v apt-get >/dev/null || die "apt-get not found; install CUDA $want and set GPUCTL_NVCC_DIR to its root"
command -v dpkg-deb >/dev/null || die "dpkg-deb not found"

mirror=${GPUCTL_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/{for(i=2;i<=NF;i++)print $i}' | grep -v security | grep -m1 /debian || true)
fi
if [ -z "$mirror" ]; then
	mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '$1=="deb"{for(i=2;i<=NF;i++)if($i ~ /:\/\//){print $i;break}}' | grep -v security | grep -m1 /debian || true)
fi
[ -n "$mirror" ] || die "no Debian archive found in the apt sources; set GPUCTL_DEBIAN_MIRROR to one"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || die "$keyring is missing; install debian-archive-keyring"

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuctl-nvcc.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/etc/apt.conf.d" "$work/etc/preferences.d" "$work/etc/sources.list.d" \
	"$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"
: >"$work/status"
cat >"$work/etc/sources.list.d/trixie.sources" <<SRC
Types: deb
URIs: $mirror
Suites: trixie
Components: main contrib non-free
Signed-By: $keyring
SRC
cat >"$work/apt.conf" <<CONF
Dir::Etc "$work/etc";
Dir::Etc::sourcelist "/dev/null";
Dir::Etc::sourceparts "$work/etc/sources.list.d";
Dir::State "$work";
Dir::State::lists "$work/lists";
Dir::State::status "$work/status";
Dir::Cache "$work/cache";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
APT::Sandbox::User "root";
Acquire::Languages "none";
Debug::NoLocking "1";
CONF
export APT_CONFIG="$work/apt.conf"
say "installing a private CUDA $want toolkit from Debian trixie non-free into $dest"
apt-get -qq update >/dev/null 2>"$work/update.err" || { cat "$work/update.err" >&2; die "apt-get update of the trixie source failed"; }
pkgs="nvidia-cuda-toolkit nvidia-cuda-dev libcudart12 libnvvm4 libthrust-dev libcub-dev libcu++-dev"
# shellcheck disable=SC2086
(cd "$work/debs" && apt-get -qq download $pkgs >/dev/null 2>"$work/download.err") ||
	{ cat "$work/download.err" >&2; die "apt-get download failed"; }
for f in "$work"/debs/*.deb; do
	case "$(basename "$f")" in
	nvidia-cuda-dev_*)
		# 2.5 GB unpacked, nearly all of it the math libraries: keep the
		# headers and the runtime's own libraries.
		dpkg-deb --fsys-tarfile "$f" | tar -x -C "$work/root" ./usr/include \
			./usr/lib/x86_64-linux-gnu/libcudart_static.a ./usr/lib/x86_64-linux-gnu/libcudadevrt.a \
			./usr/lib/x86_64-linux-gnu/libculibos.a ./usr/lib/x86_64-linux-gnu/libcudart.so ;;
	*) dpkg-deb -x "$f" "$work/root" ;;
	esac
done

r=$work/root
stage=$dest.new
rm -rf "$stage"
mkdir -p "$stage/bin" "$stage/lib" "$stage/nvvm"
cp -a "$r/usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$r/usr/lib/nvidia-cuda-toolkit/bin/cicc" "$r/usr/lib/nvidia-cuda-toolkit/bin/crt" "$stage/bin/"
for b in ptxas fatbinary nvlink cudafe++ bin2c cuobjdump; do cp -a "$r/usr/bin/$b" "$stage/bin/"; done
cp -a "$r/usr/lib/nvidia-cuda-toolkit/libdevice" "$stage/nvvm/libdevice"
cp -a "$r/usr/include" "$stage/include"
cp -a "$r"/usr/lib/x86_64-linux-gnu/* "$stage/lib/"
# Debian's profile points at /usr; this one at the bundle itself.
cat >"$stage/bin/nvcc.profile" <<'PROFILE'
TOP              = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += $(_HERE_):
INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib"
CUDAFE_FLAGS    +=
PTXAS_FLAGS     +=
PROFILE
printf '%s\n' $pkgs >"$stage/PACKAGES"
"$stage/bin/nvcc" --version | grep -q "release $want" || die "the bundled nvcc does not run: $("$stage/bin/nvcc" --version 2>&1 | tail -2)"
rm -rf "$dest"
mv "$stage" "$dest"
say "CUDA $want toolkit at $dest ($(du -sh "$dest" | cut -f1))"
