# Shared by demo.sh and bench.sh: two gpud hosts and a client, in network
# namespaces joined by a bridge when run as root, else on loopback ports.
# Source it; it sets $work, $bin, $root and an EXIT trap that stops what
# it started and removes the namespaces.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
bin=$root/build/bin
work=$(mktemp -d "${TMPDIR:-/tmp}/gpuctl-demo.XXXXXX")
uid=$$
pids=()
nets=()
in_a=() in_b=() in_c=()

bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }
say() { printf '[%s] %s\n' "${tag:-demo}" "$*"; }
die() { printf '[%s] FAILED: %s\n' "${tag:-demo}" "$*" >&2; exit 1; }
ms() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }
# jnum FIELD: the first numeric value of "FIELD" in the JSON on stdin.
jnum() { sed -n "s/.*\"$1\": *\([0-9][0-9]*\).*/\1/p" | head -1; }
# jstr FIELD: the first string value of "FIELD" in the JSON on stdin.
jstr() { sed -n "s/.*\"$1\": *\"\([^\"]*\)\".*/\1/p" | head -1; }

cleanup() {
	local rc=$?
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	for n in "${nets[@]}"; do ip netns del "$n" 2>/dev/null || true; done
	if [ $rc -ne 0 ]; then
		for f in "$work"/*.log; do
			[ -f "$f" ] || continue
			echo "---- tail of $(basename "$f")" >&2
			tail -n 15 "$f" >&2
		done
	fi
	if [ "${DEMO_KEEP:-}" = 1 ]; then say "work directory kept: $work"; else rm -rf "$work"; fi
	exit $rc
}
trap cleanup EXIT INT TERM

# setup_hosts: the topology, and $listen_a $api_a $listen_b $api_b.
setup_hosts() {
	[ -x "$bin/gpud" ] && [ -x "$bin/gpuctl" ] && [ -f "$root/build/lib/libcuda.so.1" ] ||
		die "build/ is incomplete; run it through make (which builds first)"
	local addr_a=127.0.0.1 addr_b=127.0.0.1
	if [ "$(id -u)" -eq 0 ] && ip netns add "gdemo$uid-sw" 2>/dev/null; then
		nets+=("gdemo$uid-sw")
		local sw=(ip netns exec "gdemo$uid-sw") n=0 net="10.77.$((uid % 200))"
		"${sw[@]}" ip link set lo up
		"${sw[@]}" ip link add br0 type bridge
		"${sw[@]}" ip link set br0 up
		for h in a b c; do
			n=$((n + 1))
			local ns="gdemo$uid-$h"
			ip netns add "$ns"
			nets+=("$ns")
			ip link add "gd$uid$h" type veth peer name "gs$uid$h"
			ip link set "gd$uid$h" netns "$ns"
			ip link set "gs$uid$h" netns "gdemo$uid-sw"
			"${sw[@]}" ip link set "gs$uid$h" master br0 up
			ip -n "$ns" link set lo up
			ip -n "$ns" addr add "$net.$((n + 1))/24" dev "gd$uid$h"
			ip -n "$ns" link set "gd$uid$h" up
		done
		addr_a=$net.2 addr_b=$net.3
		in_a=(ip netns exec "gdemo$uid-a")
		in_b=(ip netns exec "gdemo$uid-b")
		in_c=(ip netns exec "gdemo$uid-c")
		say "hosts in network namespaces: A $addr_a, B $addr_b, client $net.4"
	else
		say "not root (or no netns): hosts share loopback"
	fi
	local base=$((17000 + uid % 1000 * 10))
	listen_a=$addr_a:$base api_a=$addr_a:$((base + 1))
	listen_b=$addr_b:$((base + 2)) api_b=$addr_b:$((base + 3))
	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/token"
	chmod 600 "$work/token"
	start_gpud a "$listen_a" "$api_a" "${in_a[@]}"
	start_gpud b "$listen_b" "$api_b" "${in_b[@]}"
	wait_up "$api_a"
	wait_up "$api_b"
}

start_gpud() { # NAME LISTEN API [NETNS PREFIX...]
	local name=$1 listen=$2 api=$3
	shift 3
	mkdir -p "$work/$name"
	"$@" "$bin/gpud" --listen "$listen" --api "$api" --state-dir "$work/$name" \
		--token-file "$work/token" --name "host-$name" --backend "${GPUCTL_BACKEND:-auto}" \
		${GPUD_ARGS:-} >"$work/gpud-$name.log" 2>&1 &
	pids+=($!)
}

# ctl ARGS: gpuctl from the client's host.
ctl() { "${in_c[@]}" "$bin/gpuctl" --token-file "$work/token" "$@"; }

wait_up() { # API
	for i in $(seq 150); do
		ctl --host "$1" sessions >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	die "gpud at $1 did not come up"
}

build_workload() {
	gcc -O2 -o "$work/workload" "$root/e2e/demo/workload.c" -I"$root/build/include" \
		-L"$root/build/lib" -lcuda -Wl,-rpath,"$root/build/lib" ||
		die "could not compile e2e/demo/workload.c"
}

# start_workload LISTEN LOG ARGS...: the workload through gpuctl run, in
# the background; sets $app.
start_workload() {
	local listen=$1 log=$2
	shift 2
	"${in_c[@]}" "$bin/gpuctl" run --server "$listen" --token-file "$work/token" -- \
		"$work/workload" "$@" > >(sed -u 's/^/  [app] /' | tee "$log") 2>&1 &
	app=$!
	pids+=($app)
}

# session_ids API: the ids of the sessions that host lists now.
session_ids() { { ctl --host "$1" sessions --json 2>/dev/null || true; } | { grep -o 's-[0-9a-f]\{12\}' || true; } | sort -u; }

# find_session API [KNOWN_IDS]: waits for a session on that host that is
# not among KNOWN_IDS (a host keeps listing released sessions as stopped
# for a while); prints its id.
find_session() {
	local s=""
	for i in $(seq 300); do
		s=$(session_ids "$1" | grep -vxF -e "${2:-none}" | head -1 || true)
		[ -n "$s" ] && { echo "$s"; return 0; }
		kill -0 "$app" 2>/dev/null || die "the workload ended before its session appeared"
		sleep 0.1
	done
	die "no session appeared at $1"
}
