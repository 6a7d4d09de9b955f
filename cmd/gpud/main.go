// Command gpud is the GPU host daemon: it accepts remote CUDA clients on
// --listen and runs each session in its own worker process, serves the
// control API on --api, and keeps its state (token, session records,
// image store, log) under --state-dir.
//
// `gpud worker` is the worker process itself, started only by gpud.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpuctl/gpuctl/migrate/stage"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/remoting/modcache"
	"github.com/gpuctl/gpuctl/remoting/server"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/session"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		os.Exit(worker.Main(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == "registry" {
		os.Exit(registryMain(os.Args[2:], os.Stderr))
	}
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpud:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "gpud:", err)
		os.Exit(1)
	}
}

// config is gpud's command line.
type config struct {
	listen, api, stateDir string
	backend               string
	tokenFile             string
	tenants               string // --tenants FILE; empty: no tenants
	name                  string
	device                string
	grace                 time.Duration
	handshakeTimeout      time.Duration
	emulatedMem           uint64
	criu                  string
	moduleCacheBytes      int64
	logLevel              slog.Level
	// TLS: tlsCert and tlsKey serve --api over HTTPS and --listen over
	// TLS; tlsCA is what this gpud trusts when it calls a peer's API (a
	// migration target). kernelTLS lets the kernel seal --listen's
	// records where it can (kTLS).
	tlsCert, tlsKey, tlsCA string
	kernelTLS              bool
	// registry: comma-separated etcd client URLs; empty: a standalone
	// host (docs/cluster.md).
	registry string
	// registryTTL is this host's lease: it reads down that long after it
	// stops renewing.
	registryTTL time.Duration
	// replicas: how many peers keep a copy of each image this host
	// commits (with --registry; 0: none).
	replicas int
	// cudaPlainMem serves cuMemAlloc from the driver's allocator.
	cudaPlainMem bool
	// park has checkpoints that leave the session running park its
	// device memory (checkpoint.MemParker) instead of copying it.
	park bool
	// reuseDump lets a checkpoint reuse the session's last dump when the
	// worker changed nothing it holds since (checkpoint.Reuser).
	reuseDump bool
	// preempt: gpud preempts sessions of lower priority when the device
	// is full (on by default).
	preempt bool
	// preemptMem, when set, is the device memory sessions share, in
	// place of the GPU's size (headroom for the driver's own use).
	preemptMem uint64
	// stageMaxBytes bounds the device memory staged in memory for the
	// restores of sessions migrating here (package migrate/stage).
	stageMaxBytes int64
	// criuLogLevel is CRIU's verbosity (criu.Options.LogLevel).
	criuLogLevel int
	// durablePrecopy is migrate.Service.DurablePrecopy.
	durablePrecopy bool
	// debugAddr, when set, serves Go's profiler (net/http/pprof) there,
	// on a loopback address only: it has no authentication.
	debugAddr string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("gpud", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var c config
	host, _ := os.Hostname()
	fs.StringVar(&c.listen, "listen", "", "`HOST:PORT` where clients (the interposer) connect (required)")
	fs.StringVar(&c.api, "api", "", "`HOST:PORT` of the control API (required)")
	fs.StringVar(&c.stateDir, "state-dir", "", "`DIR` for the token, session records, image store and log (required)")
	fs.StringVar(&c.backend, "backend", worker.BackendAuto, "device backend: auto, emulated or cuda")
	fs.StringVar(&c.tokenFile, "token-file", "", "`FILE` holding the host token, the administrator's (default: DIR/token, created if missing); mode 0600")
	fs.StringVar(&c.tenants, "tenants", "", "JSON `FILE` of tenants: [{\"name\", \"token_file\", \"max_mem_bytes\", \"max_sessions\"}]; each token acts as its tenant, seeing only its own sessions and images")
	fs.StringVar(&c.name, "name", host, "this host's `NAME` in listings and image manifests")
	fs.StringVar(&c.device, "device", "0", "the GPU sessions use: an ordinal, or a UUID for the cuda backend")
	fs.DurationVar(&c.grace, "grace", session.DefaultGrace, "how long a session whose client disconnected waits for it")
	fs.DurationVar(&c.handshakeTimeout, "handshake-timeout", server.DefaultHandshakeTimeout, "how long a new connection may take to present its token")
	fs.Uint64Var(&c.emulatedMem, "emulated-mem", 16<<30, "device memory of the emulated backend, in bytes")
	fs.BoolVar(&c.cudaPlainMem, "cuda-plain-memory", false, "cuda backend: serve cuMemAlloc from the driver's allocator instead of memory the worker maps and saves itself; checkpoints then copy device memory through the driver's checkpoint (slower)")
	fs.BoolVar(&c.park, "park", true, "checkpoints that leave the session running park its device memory (snapshot it on the device and hold it outside the worker across the dump) instead of copying it to the host while the client waits; false always copies")
	fs.Int64Var(&c.moduleCacheBytes, "module-cache-bytes", modcache.DefaultBytes, "bound of the module cache (DIR/modules) that sessions share, in bytes; 0 turns it off")
	fs.BoolVar(&c.reuseDump, "reuse-dump", true, "a checkpoint of a session whose worker ran only copies, launches, waits and queries since its last image keeps that image's dump of the worker and stores the device memory and the protocol state only (no driver checkpoint, no CRIU), and a live migration of such a session has its target restore that dump before the freeze; false dumps the worker every time")
	fs.BoolVar(&c.durablePrecopy, "durable-precopy", false, "store each live migration's pre-copy rounds on both hosts instead of staging them in the target's memory (slower rounds, which a session rewriting its memory faster than the disks may never finish)")
	fs.IntVar(&c.criuLogLevel, "criu-log-level", 4, "CRIU's verbosity, 1 (errors) to 4 (debug), in the logs a failed dump or restore keeps; lower is a little faster for workers with many mappings")
	fs.StringVar(&c.criu, "criu", "", "the criu `BINARY` (>= 4.1) for checkpoints (default: GPUCTL_CRIU, criu/criu beside gpud, the checkout's .deps/criu/criu for build/bin/gpud, or criu on PATH)")
	fs.StringVar(&c.tlsCert, "tls-cert", "", "serve --api (HTTPS) and --listen over TLS 1.3 with this PEM certificate `FILE` (with --tls-key; default: plaintext)")
	fs.StringVar(&c.tlsKey, "tls-key", "", "the PEM private key `FILE` of --tls-cert")
	fs.StringVar(&c.tlsCA, "tls-ca", "", "PEM CA bundle `FILE` to verify peers' API certificates with; when set, migrations reach targets over HTTPS")
	fs.BoolVar(&c.kernelTLS, "kernel-tls", true, "with --tls-cert, let the kernel encrypt --listen's traffic (kTLS) where it has TLS offload; false keeps it in gpud's workers")
	fs.StringVar(&c.registry, "registry", os.Getenv("GPUD_REGISTRY"), "comma-separated etcd client `URLS` of the cluster registry (default: GPUD_REGISTRY; empty: a standalone host)")
	fs.DurationVar(&c.registryTTL, "registry-ttl", registry.DefaultTTL, "with --registry, this host's lease: it is shown down this long after it stops renewing (2s or more)")
	fs.IntVar(&c.replicas, "replicas", 0, "with --registry, push each new image to `K` compatible peers in the background (0: keep images here only)")
	fs.BoolVar(&c.preempt, "preempt", true, "when an allocation does not fit on the device, preempt sessions of lower priority (checkpoint and release them, resuming them when they fit again); false: the allocation fails")
	fs.Uint64Var(&c.preemptMem, "preempt-mem", 0, "with --preempt, the device memory in bytes that sessions share before gpud preempts (default: the GPU's size, or --emulated-mem)")
	fs.Int64Var(&c.stageMaxBytes, "stage-max-bytes", stage.DefaultMax(), "bound of the pre-copied device memory kept in memory for the restores of sessions migrating here, in bytes (default: half the host's memory); 0 stages nothing")
	fs.StringVar(&c.debugAddr, "debug-addr", "", "serve Go's profiler (/debug/pprof/) on this loopback `HOST:PORT`, for finding where a slow step's time goes; it has no authentication, so only loopback addresses are taken")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn or error")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gpud --listen HOST:PORT --api HOST:PORT --state-dir DIR [--backend auto|emulated|cuda] [--token-file FILE] [--tenants FILE] [--name NAME] [--tls-cert FILE --tls-key FILE] [--tls-ca FILE] [--registry URLS [--replicas K]]\n       gpud registry --data-dir DIR --listen HOST:PORT")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q; see gpud --help", fs.Arg(0))
	}
	for _, req := range []struct{ name, val string }{{"--listen", c.listen}, {"--api", c.api}, {"--state-dir", c.stateDir}} {
		if req.val == "" {
			return c, fmt.Errorf("%s is required; see gpud --help", req.name)
		}
	}
	if (c.tlsCert == "") != (c.tlsKey == "") {
		return c, errors.New("--tls-cert and --tls-key go together: pass both, or neither for plaintext")
	}
	if c.criuLogLevel < 1 || c.criuLogLevel > 4 {
		return c, errors.New("--criu-log-level must be 1 to 4")
	}
	if c.stageMaxBytes < 0 {
		return c, errors.New("--stage-max-bytes must be 0 (off) or a positive size")
	}
	if c.debugAddr != "" {
		if err := checkLoopback(c.debugAddr); err != nil {
			return c, fmt.Errorf("--debug-addr %s: %w", c.debugAddr, err)
		}
	}
	if c.moduleCacheBytes < 0 {
		return c, errors.New("--module-cache-bytes must be 0 (off) or a positive size")
	}
	if c.replicas < 0 || (c.replicas > 0 && c.registry == "") {
		return c, errors.New("--replicas needs --registry (the peers come from it) and must not be negative")
	}
	if c.registryTTL < 2*time.Second {
		return c, errors.New("--registry-ttl must be 2s or more: shorter leases flap while the registry elects a leader")
	}
	if c.grace <= 0 || c.handshakeTimeout <= 0 {
		return c, errors.New("--grace and --handshake-timeout must be positive")
	}
	return c, nil
}
