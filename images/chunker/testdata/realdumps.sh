#!/bin/bash
# Dumps memproc.py twice with CRIU (before and after SIGUSR1) and compares
# the chunking candidates on the two dumps. Usage:
#   images/chunker/testdata/realdumps.sh [CRIU]   (default: .deps/criu/criu)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
criu=${1:-$root/.deps/criu/criu}
export OUT=$(mktemp -d)
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$OUT"' EXIT
setsid python3 "$here/memproc.py" </dev/null >"$OUT/py.log" 2>&1 &
for _ in $(seq 1 200); do [ -f "$OUT/ready" ] && break; sleep 0.2; done
pid=$(cat "$OUT/ready")
mkdir "$OUT/d1" "$OUT/d2"
"$criu" dump -t "$pid" -D "$OUT/d1" --leave-running -o "$OUT/dump1.log"
kill -USR1 "$pid"
for _ in $(seq 1 200); do [ -f "$OUT/changed" ] && break; sleep 0.2; done
"$criu" dump -t "$pid" -D "$OUT/d2" --leave-running -o "$OUT/dump2.log"
cd "$root"
GPUCTL_CHUNK_DIRS="$OUT/d1:$OUT/d2" go test -count=1 -v -run RealDumps ./images/chunker | grep '|'
