#!/usr/bin/env bash
# Installs Slurm (Debian's slurm-wlm: slurmctld, slurmd and the client
# commands) and munge from the system's own apt sources, for the
# end-to-end test that runs a single-host Slurm (TestSlurmPreemptRequeue).
# Installed once; later runs find the commands and install nothing. The
# packages' own services are left as the packages set them up and are not
# used: the test starts its own daemons with a private configuration, key
# and socket.
# Idempotent; prints one line saying what it found or installed.
set -euo pipefail

say() { printf 'slurm: %s\n' "$*"; }
die() { printf 'slurm: %s\n' "$*" >&2; exit 1; }

missing=0
for c in slurmctld slurmd sbatch scontrol squeue munged; do
	command -v "$c" >/dev/null || missing=1
done
if [ $missing -eq 0 ]; then
	say "$(slurmctld -V 2>/dev/null | head -1) and $(munged -V 2>/dev/null | head -1 | awk '{print $1}') found"
	exit 0
fi
command -v apt-get >/dev/null || die "apt-get not found; install Slurm (slurmctld, slurmd, sbatch) and munge by hand"
[ "$(id -u)" -eq 0 ] || die "need root to install slurm-wlm and munge; install them by hand"
apt-get -qq update >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends slurm-wlm munge >/dev/null
say "installed slurm-wlm and munge ($(slurmctld -V 2>/dev/null))"
