#!/usr/bin/env bash
# Installs what the tests, the demo and the benchmarks need:
#   - CRIU >= 4.1. Debian 12's criu 3.17 cannot dump on kernels >= 6.13, so
#     when no good one is on PATH this builds a private bundle under
#     .deps/criu/ from Debian 13's packages, with its own libc and loader,
#     and leaves the system's libraries and apt sources alone;
#   - iproute2, gcc and zstd, from the system's own apt sources;
#   - Slurm (slurm-wlm) and munge, likewise, for the Slurm end-to-end
#     test: scripts/slurm.sh;
#   - nvcc (CUDA 12.4, a private bundle under .deps/nvcc/ from Debian 13's
#     non-free archive) for the runtime-API end-to-end tests: scripts/nvcc.sh.
# It is idempotent and prints one line per thing it found or installed.
#
# Environment:
#   GPUCTL_CRIU            use this criu binary; nothing is built
#   GPUCTL_DEBIAN_MIRROR   archive URI for the trixie packages (default: the
#                          first Debian archive URI in the system's apt sources)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bundle="$root/.deps/criu"
min_major=4 min_minor=1

say() { printf 'deps: %s\n' "$*"; }
die() { printf 'deps: %s\n' "$*" >&2; exit 1; }

# criu_ok BIN: true when BIN runs and reports a version >= 4.1.
criu_ok() {
	local v
	v=$("$1" --version 2>/dev/null | awk '/^Version:/{print $2}') || return 1
	[ -n "$v" ] || return 1
	local major=${v%%.*} rest=${v#*.}
	local minor=${rest%%.*}
	[ "$major" -gt "$min_major" ] || { [ "$major" -eq "$min_major" ] && [ "$minor" -ge "$min_minor" ]; }
}

criu_version() { "$1" --version 2>/dev/null | awk '/^Version:/{print $2}'; }

apt_updated=0
apt_install() {
	[ "$(id -u)" -eq 0 ] || die "need root to install $*; install them by hand"
	if [ $apt_updated -eq 0 ]; then
		apt-get -qq update >/dev/null
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends "$@" >/dev/null
	say "installed $*"
}

# Test tools from the system's own sources.
need=()
command -v ip >/dev/null || need+=(iproute2)
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v zstd >/dev/null || need+=(zstd)
command -v dpkg-deb >/dev/null || need+=(dpkg)
[ ${#need[@]} -eq 0 ] || apt_install "${need[@]}"

# nvcc for the runtime-API end-to-end tests (GPUCTL_NVCC_DIR moves it).
bash "$root/scripts/nvcc.sh"

# Slurm and munge for the Slurm end-to-end test, which skips without them.
bash "$root/scripts/slurm.sh" || say "Slurm is not installed; the Slurm end-to-end test will skip"

# A criu the user chose, or one already on PATH, or a bundle built earlier.
if [ -n "${GPUCTL_CRIU:-}" ]; then
	criu_ok "$GPUCTL_CRIU" || die "GPUCTL_CRIU=$GPUCTL_CRIU is not a working criu >= $min_major.$min_minor"
	say "criu $(criu_version "$GPUCTL_CRIU") at $GPUCTL_CRIU (GPUCTL_CRIU)"
	exit 0
fi
if sys=$(command -v criu) && criu_ok "$sys"; then
	say "criu $(criu_version "$sys") at $sys"
	exit 0
fi
if [ -x "$bundle/criu" ] && criu_ok "$bundle/criu"; then
	say "criu $(criu_version "$bundle/criu") at $bundle/criu"
	exit 0
fi

[ "$(uname -m)" = x86_64 ] || die "the CRIU bundle is built for x86_64 only; install criu >= $min_major.$min_minor and set GPUCTL_CRIU"
command -v apt-get >/dev/null || die "apt-get not found; install criu >= $min_major.$min_minor and set GPUCTL_CRIU"

mirror=${GPUCTL_DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
	# The archive (not the security) URI from deb822 or one-line sources.
	mirror=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/{for(i=2;i<=NF;i++)print $i}' | grep -v security | grep -m1 /debian || true)
fi
if [ -z "$mirror" ]; then
	mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk '$1=="deb"{for(i=2;i<=NF;i++)if($i ~ /:\/\//){print $i;break}}' | grep -v security | grep -m1 /debian || true)
fi
[ -n "$mirror" ] || die "no Debian archive found in the apt sources; set GPUCTL_DEBIAN_MIRROR to one"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || apt_install debian-archive-keyring

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuctl-deps.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/etc/apt.conf.d" "$work/etc/preferences.d" "$work/etc/sources.list.d" \
	"$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"
: >"$work/status"
cat >"$work/etc/sources.list.d/trixie.sources" <<EOF
Types: deb
URIs: $mirror
Suites: trixie
Components: main
Signed-By: $keyring
EOF
# A private apt configuration: apt reads APT_CONFIG before its parts
# directory, so pointing Dir::Etc here keeps the system's sources, lists,
# preferences and dpkg status out of this resolution entirely.
cat >"$work/apt.conf" <<EOF
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
EOF
export APT_CONFIG="$work/apt.conf"
say "building a private CRIU bundle from trixie packages"
apt-get -qq update >/dev/null 2>"$work/update.err" || { cat "$work/update.err" >&2; die "apt-get update of the trixie source failed"; }
# criu and everything it needs at run time, resolved against an empty
# status file so that libc and the loader come along too.
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts \
	--no-breaks --no-replaces --no-enhances criu | grep -v '^ ' | grep -v '^<' | sort -u)
[ -n "$pkgs" ] || die "could not resolve criu's dependencies in trixie"
# shellcheck disable=SC2086
(cd "$work/debs" && apt-get -qq download $pkgs >/dev/null 2>"$work/download.err") ||
	{ cat "$work/download.err" >&2; die "apt-get download failed"; }
for f in "$work"/debs/*.deb; do dpkg-deb -x "$f" "$work/root"; done

stage="$bundle.new"
rm -rf "$stage"
mkdir -p "$stage/lib"
install -m 0755 "$work/root/usr/sbin/criu" "$stage/criu.bin"
# Only the top-level shared objects: criu needs no gconv modules or tools.
for d in "$work/root/usr/lib/x86_64-linux-gnu" "$work/root/lib/x86_64-linux-gnu" "$work/root/lib64" "$work/root/usr/lib64"; do
	[ -d "$d" ] || continue
	find "$d" -maxdepth 1 \( -type f -o -type l \) -name '*.so*' -exec cp -an {} "$stage/lib/" \;
done
[ -e "$stage/lib/ld-linux-x86-64.so.2" ] || die "the bundle lacks ld-linux-x86-64.so.2"
cat >"$stage/criu" <<'EOF'
#!/bin/sh
# CRIU with its own libc: the loader runs criu.bin against the libraries
# next to it, so the system's libraries are never touched.
d=$(dirname "$(readlink -f "$0")")
exec "$d/lib/ld-linux-x86-64.so.2" --library-path "$d/lib" "$d/criu.bin" "$@"
EOF
chmod 0755 "$stage/criu"
printf '%s\n' $pkgs >"$stage/PACKAGES"
criu_ok "$stage/criu" || die "the bundled criu does not run: $("$stage/criu" --version 2>&1 | head -3)"
rm -rf "$bundle"
mv "$stage" "$bundle"
say "criu $(criu_version "$bundle/criu") at $bundle/criu ($(du -sh "$bundle" | cut -f1))"
if ! out=$("$bundle/criu" check 2>&1); then
	printf '%s\n' "$out" | tail -5 >&2
	say "warning: criu check failed; see above (gpuctl doctor explains)"
fi
