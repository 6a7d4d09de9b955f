// Package worker is a session's worker process and gpud's handle on it:
// two halves of one program that meet over a control socket.
//
// The worker half runs in the worker process, `gpud worker` (Main, in
// main.go): it finishes its namespaces (InitNamespace), opens the
// session's device backend, serves the client socket it is handed with
// package dispatch, and obeys the control socket on fd 3: attach, quiesce,
// resume, detach (then dial back @gpuctl-attach-<nonce> when told), stats,
// exit. It is PID 1 of its own PID and mount namespaces, holds nothing
// that changes, and is what CRIU dumps.
//
// The gpud half runs in gpud and in the tests that stand in for it: Start
// and Reattach return a Handle whose methods send those requests and wait
// for the replies (handle.go); Spawner forks workers from a thread that
// lives as long as gpud; Reaper reaps workers that CRIU restored and the
// kernel reparented to gpud; Resolve and HostInfo pick and describe a
// backend without opening a session; Command and SysProcAttr shape any
// process like a worker.
//
// The worker also counts its session's device memory (meter.go) and, for
// a tenant with a memory limit, asks gpud before it holds more, on a
// socket of its own (quota.go: the worker's client and gpud's
// QuotaServer).
//
// proto.go is the contract between the halves: one JSON message per
// SOCK_SEQPACKET packet, with a client socket riding as SCM_RIGHTS on the
// packet that asks the worker to serve it.
package worker
