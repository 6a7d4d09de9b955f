package main

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/migrate"
	"github.com/gpuctl/gpuctl/preempt"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/modcache"
	"github.com/gpuctl/gpuctl/remoting/server"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/session"
	"github.com/gpuctl/gpuctl/store"
	"github.com/gpuctl/gpuctl/tenant"
)

// daemon is everything a running gpud holds.
type daemon struct {
	cfg      config
	log      *slog.Logger
	audit    *slog.Logger // the audit log: one line per control action
	token    string
	host     backend.HostInfo
	workerOp worker.Options
	store    *store.Store
	manager  *session.Manager
	metrics  *session.Metrics
	reaper   *worker.Reaper
	registry *prometheus.Registry
	started  time.Time
	socketNS string      // see migrate.SocketNamespace
	criu     api.CRIU    // the criu binary found at startup, for GET /v1/host
	routes   []router    // the concept packages' control routes
	apiTLS   *tls.Config // --tls-cert/--tls-key, for --api and --listen; nil serves plaintext
	peerTLS  *tls.Config // --tls-ca; nil calls peers over plain HTTP

	// tenants tells who a token stands for: the host token is the
	// administrator's; --tenants adds the tenants'.
	tenants *tenant.Set
	quota   *worker.QuotaServer // nil without tenants or preemption
	preempt *preempt.Service
	cluster *cluster // nil for a standalone host (no --registry)
	ops     *opsMetrics
}

// findCRIU locates the criu binary (criubin.Locate: the flag,
// GPUCTL_CRIU, the bundle beside gpud, the checkout gpud was built in, or
// PATH) and asks its version.
func findCRIU(ctx context.Context, flag string) api.CRIU {
	f, err := criubin.Locate(flag)
	if err != nil {
		return api.CRIU{Error: err.Error()}
	}
	c := api.CRIU{Path: f.Path, Source: string(f.Source)}
	vctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := criubin.VersionOf(vctx, f.Path)
	switch {
	case err != nil:
		c.Error = err.Error()
	case !v.AtLeast(criubin.MinVersion):
		c.Version = v.String()
		c.Error = fmt.Sprintf("criu %s at %s is older than %s; run `make deps` and start gpud with --criu .deps/criu/criu", v, f.Path, criubin.MinVersion)
	default:
		c.Version = v.String()
	}
	return c
}

// run starts gpud and blocks until ctx ends (SIGTERM), then shuts down:
// it stops accepting, lets every worker finish its call in flight and
// exit, and returns nil.
func run(ctx context.Context, cfg config, stderr io.Writer) error {
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return errs.Wrap(err, errs.FailedPrecondition, "", "create --state-dir %s", cfg.stateDir)
	}
	for _, sub := range []string{"work"} {
		if err := os.MkdirAll(filepath.Join(cfg.stateDir, sub), 0o700); err != nil {
			return errs.Wrap(err, errs.FailedPrecondition, "", "create %s under --state-dir", sub)
		}
	}
	logFile, err := os.OpenFile(filepath.Join(cfg.stateDir, "gpud.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return errs.Wrap(err, errs.FailedPrecondition, "", "open the log in --state-dir")
	}
	defer logFile.Close()
	hopts := &slog.HandlerOptions{Level: cfg.logLevel}
	log := slog.New(slog.NewMultiHandler(slog.NewTextHandler(logFile, hopts), slog.NewTextHandler(stderr, hopts)))

	d := &daemon{cfg: cfg, log: log, audit: log.With(slog.String("log", "audit")), started: time.Now().UTC(), socketNS: migrate.SocketNamespace()}
	if d.token, err = loadToken(cfg); err != nil {
		return err
	}
	// An unreachable registry stops gpud here, before anything starts.
	var reg *registry.Client
	if cfg.registry != "" {
		if reg, err = dialRegistry(ctx, cfg.registry, log); err != nil {
			return err
		}
		defer reg.Close()
	}
	d.tenants = tenant.NewSet(d.token)
	if cfg.tenants != "" {
		if d.tenants, err = tenant.Load(cfg.tenants, d.token); err != nil {
			return err
		}
	}
	if cfg.tenants != "" || cfg.preempt {
		// Workers of tenants with a memory limit, and with preemption
		// every worker, ask this before they hold more.
		if d.quota, err = worker.ListenQuota(); err != nil {
			return err
		}
		defer d.quota.Close()
	}
	// TLS files are read once, here, so that a bad one stops gpud at
	// startup instead of failing each caller's handshake.
	if cfg.tlsCert != "" {
		if d.apiTLS, err = control.ServerTLS(cfg.tlsCert, cfg.tlsKey, time.Now()); err != nil {
			return err
		}
	}
	if cfg.tlsCA != "" {
		if d.peerTLS, err = control.ClientTLS(cfg.tlsCA, ""); err != nil {
			return err
		}
	}
	// Workers restored by CRIU are reparented to us; we must be able to
	// reap them.
	if err := worker.SetSubreaper(); err != nil {
		return errs.Wrap(err, errs.Internal, "", "become child subreaper")
	}
	d.reaper = worker.NewReaper(log)
	rctx, stopReaper := context.WithCancel(context.Background())
	defer stopReaper()
	go d.reaper.Run(rctx)

	name, err := worker.Resolve(cfg.backend)
	if err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return errs.Wrap(err, errs.Internal, "", "locate gpud's binary for its workers")
	}
	d.workerOp = worker.Options{Backend: name, Device: cfg.device, EmulatedMemBytes: cfg.emulatedMem, Seed: cfg.name, Exe: exe, Log: log,
		Spawner: worker.NewSpawner(), CUDAPlainMemory: cfg.cudaPlainMem}
	if cfg.moduleCacheBytes > 0 {
		d.workerOp.ModuleCacheDir, d.workerOp.ModuleCacheBytes = filepath.Join(cfg.stateDir, "modules"), cfg.moduleCacheBytes
		mc, err := modcache.Open(d.workerOp.ModuleCacheDir, cfg.moduleCacheBytes, log)
		if err != nil {
			return err
		}
		// A smaller bound than last time takes effect at once.
		if err := mc.Trim(); err != nil {
			log.Warn("module cache trim failed", "err", err)
		}
	}
	if d.host, err = worker.HostInfo(name, d.workerOp); err != nil {
		return err
	}
	if d.store, err = store.Open(ctx, cfg.stateDir, store.Options{Logger: log}); err != nil {
		return err
	}
	defer d.store.Close()

	d.registry = prometheus.NewRegistry()
	d.registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.metrics = session.NewMetrics(d.registry)
	d.ops = newOpsMetrics(d.registry)
	scfg := session.Config{
		Host: cfg.name, Grace: cfg.grace, Worker: d.workerOp, Records: d.store,
		Reaper: d.reaper, Metrics: d.metrics, Log: log, Tenants: d.tenants, DeviceBytes: d.deviceBytes(),
	}
	if d.quota != nil {
		scfg.QuotaSocket = d.quota.Name()
	}
	d.manager, err = session.NewManager(scfg)
	if err != nil {
		return err
	}
	// The quota service answers until the sessions are gone: it stops
	// after the manager's shutdown, below.
	qctx, stopQuota := context.WithCancel(context.Background())
	quotaDone := make(chan struct{})
	if d.quota != nil {
		go func() { d.quota.Serve(qctx, d.manager, log); close(quotaDone) }()
	} else {
		close(quotaDone)
	}
	defer func() { stopQuota(); <-quotaDone }()

	d.criu = findCRIU(ctx, cfg.criu)
	if d.criu.Error != "" {
		// Sessions run without CRIU; checkpoints and restores then fail
		// with this error's advice.
		log.Warn("checkpoints are unavailable until CRIU is installed", "err", d.criu.Error)
	} else {
		log.Info("criu", "path", d.criu.Path, "source", d.criu.Source, "version", d.criu.Version)
		if bp := criubin.Breakpoints(); !bp.Work {
			log.Info("criu runs without hardware breakpoints (CRIU_FAULT=130): they do not trap on this host", "why", bp.Why)
		}
	}
	if reg != nil {
		d.cluster = d.newCluster(reg)
	}
	if d.routes, err = d.routers(); err != nil {
		return err
	}
	pctx, stopPreempt := context.WithCancel(context.Background())
	defer stopPreempt()
	if cfg.preempt {
		go d.preempt.Run(pctx, 2*time.Second)
	}

	if cfg.debugAddr != "" {
		if _, err := serveDebug(ctx, cfg.debugAddr, log); err != nil {
			return errs.Wrap(err, errs.Unavailable, "", "serve the profiler on --debug-addr %s", cfg.debugAddr)
		}
	}
	clientLn, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return errs.Wrap(err, errs.Unavailable, "", "listen for clients on --listen %s", cfg.listen)
	}
	apiLn, err := net.Listen("tcp", cfg.api)
	if err != nil {
		clientLn.Close()
		return errs.Wrap(err, errs.Unavailable, "", "listen for the control API on --api %s", cfg.api)
	}
	api := &http.Server{Handler: withFailpoints(failpoints(log), d.apiHandler()), ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		TLSConfig: d.apiTLS}
	apiDone := make(chan error, 1)
	go func() {
		if d.apiTLS != nil {
			// The certificate is in TLSConfig already.
			apiDone <- api.ServeTLS(apiLn, "", "")
			return
		}
		apiDone <- api.Serve(apiLn)
	}()
	listener := &server.Listener{Sessions: d.manager, Auth: d.tenants, Audit: d.audit, HandshakeTimeout: cfg.handshakeTimeout,
		Metrics: server.NewMetrics(d.registry), Log: log, TLS: d.apiTLS, KernelTLS: cfg.kernelTLS}
	if d.cluster != nil {
		listener.Locate = d.cluster // clients whose host is gone are sent on
	}
	clientDone := make(chan error, 1)
	go func() { clientDone <- listener.Serve(ctx, clientLn) }()
	if d.cluster != nil {
		if err := d.cluster.join(ctx, d, clientAddr(cfg), cfg.api); err != nil {
			return err
		}
	}
	log.Info("gpud ready", "listen", clientLn.Addr().String(), "api", apiLn.Addr().String(), "api_tls", d.apiTLS != nil, "peer_tls", d.peerTLS != nil, "listen_tls", d.apiTLS != nil, "backend", name,
		"gpus", len(d.host.GPUs), "state_dir", cfg.stateDir, "name", cfg.name, "tenants", d.tenants.Len())

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-apiDone:
		runErr = errs.Wrap(runErr, errs.Unavailable, "", "control API stopped")
	case runErr = <-clientDone:
		if runErr != nil {
			runErr = errs.Wrap(runErr, errs.Unavailable, "", "client listener stopped")
		}
	}
	log.Info("gpud shutting down")
	shctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	clientLn.Close()
	_ = api.Shutdown(shctx)
	d.manager.Shutdown(shctx)
	if runErr == nil {
		runErr = waitErr(clientDone)
	}
	if d.cluster != nil {
		d.cluster.left(2 * time.Second)
	}
	log.Info("gpud stopped")
	return runErr
}

func waitErr(ch chan error) error {
	select {
	case err := <-ch:
		return err
	case <-time.After(5 * time.Second):
		return errors.New("client listener did not stop")
	}
}

// loadToken reads --token-file, or DIR/token, creating the latter with a
// fresh random token (mode 0600) on first start. A token file that group
// or others may read is refused (tenant.ReadTokenFile).
func loadToken(cfg config) (string, error) {
	path, create := cfg.tokenFile, false
	if path == "" {
		path, create = filepath.Join(cfg.stateDir, "token"), true
	}
	_, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) && create {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", err
		}
		tok := hex.EncodeToString(raw[:])
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return "", errs.Wrap(err, errs.FailedPrecondition, "", "create token file %s", path)
		}
		if _, err := fmt.Fprintln(f, tok); err != nil {
			f.Close()
			return "", err
		}
		if err := f.Close(); err != nil {
			return "", err
		}
		return tok, nil
	}
	return tenant.ReadTokenFile(path, "host token")
}
