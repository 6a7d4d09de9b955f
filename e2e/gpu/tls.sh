#!/usr/bin/env bash
# TLS on the client data path, on a GPU host (whose kernel may have TLS
# offload, which the development machines lack):
#
#   make build gpu-tools        # where Go is: builds build/test/*.test and
#                               # build/bench/{benchremote,remoting-bench}
#   bash e2e/gpu/tls.sh         # on the host, as root
#
# It
#   1. says whether the kernel has TLS offload (loading the tls module if
#      it can);
#   2. runs the record layer's tests, the kernel-offload one and the
#      parallel bulk records included (tlsrec.test), and the end-to-end
#      TLS tests (e2e.test: a workload over TLS with a reconnect, a
#      migration redirect, the handover path, the mismatch lines), which
#      use the kernel's TLS where it has it;
#   3. runs the remoting benchmark against a plaintext gpud, a TLS gpud
#      (kernel TLS where it has it) and, with kernel TLS, once more with
#      records sealed in user space on both ends, and prints the ratios
#      (bulk copies against >= 80% of plaintext, the round trip against
#      <= 1.2x).
#
# Exit status 0 only if every step passed.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
fail=0
step() { echo; echo "== $*"; }

step "kernel TLS offload"
uname -r
modprobe tls 2>/dev/null || true
ulp=$(cat /proc/sys/net/ipv4/tcp_available_ulp 2>/dev/null)
echo "tcp_available_ulp: $ulp"
case " $ulp " in *" tls "*) echo "kernel TLS: available" ;; *) echo "kernel TLS: not available; TLS runs in user space" ;; esac

step "record layer tests"
if [ -x build/test/tlsrec.test ]; then
	(cd remoting/tlsrec && ../../build/test/tlsrec.test -test.v -test.run 'TestOffload|TestAgainstCryptoTLS|TestHandOver|TestKeyUpdate|TestOpenSSLClient' 2>&1 |
		grep -E '^(=== RUN|--- |\s+---|PASS|FAIL|ok)|skip|offload') || fail=1
	# Bulk records sealed and opened on several goroutines, with this
	# host's cores: the top-level results only (the subtests are many).
	(cd remoting/tlsrec && ../../build/test/tlsrec.test -test.run 'TestParallel' 2>&1 |
		grep -E '^(--- |PASS|FAIL|ok)|parallel_test.go') || fail=1
else
	echo "build/test/tlsrec.test is missing: run make gpu-tools where Go is"; fail=1
fi

step "end-to-end tests over TLS"
if [ -x build/test/e2e.test ]; then
	(cd e2e && ../build/test/e2e.test -test.v -test.timeout 20m -test.run 'TestClientOverTLS|TestHandoverOverTLS|TestMigrateOverTLS' 2>&1 |
		grep -E '^(--- |PASS|FAIL|ok)|tls_test.go|kernel TLS') || fail=1
else
	echo "build/test/e2e.test is missing: run make gpu-tools where Go is"; fail=1
fi

step "benchmark: plaintext against TLS"
if [ -x build/bench/benchremote ]; then
	[ -x build/bench/remoting-bench ] || gcc -O2 -Wall -Ibuild/include -o build/bench/remoting-bench remoting/interposer/testdata/bench.c -Lbuild/lib -lcuda
	build/bench/benchremote -root "$ROOT" -bench build/bench/remoting-bench -passes "${PASSES:-3}" || fail=1
else
	echo "build/bench/benchremote is missing: run make gpu-tools where Go is"; fail=1
fi
exit $fail
