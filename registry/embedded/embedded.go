// Package embedded runs a single-member etcd inside gpud (`gpud
// registry`), for small sites and tests. Real sites run their own etcd
// cluster (docs/cluster.md) and point --registry at it.
//
// The server is configured for a registry's small metadata: an explicit
// backend quota, periodic auto-compaction so that the history of lease
// renewals and ownership changes does not fill it, and its data in a
// directory of its own, never a gpud state dir (a chunk store's writes
// would otherwise compete with etcd's fsyncs, and a full store would take
// the registry down with it).
package embedded

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/server/v3/embed"

	"github.com/gpuctl/gpuctl/errs"
)

// Defaults of Config.
const (
	DefaultQuotaBytes = 512 << 20 // 512 MiB; etcd's own default is 2 GiB
	// DefaultCompaction keeps this much history: what a watcher that
	// fell behind can still catch up on.
	DefaultCompaction = 5 * time.Minute
)

// Config configures the embedded member.
type Config struct {
	// DataDir holds etcd's data (its member/ directory). It must not be a
	// gpud state dir.
	DataDir string
	// Listen is the client address, HOST:PORT.
	Listen string
	// Peer is the peer address, HOST:PORT; empty picks Listen's port + 1
	// on Listen's host.
	Peer string
	// Metrics is an address for etcd's own /metrics, HOST:PORT; empty:
	// none. etcd registers its metrics with the Prometheus default
	// registry, which gpud's own /metrics never serves.
	Metrics string
	// QuotaBytes bounds the backend database; zero is DefaultQuotaBytes.
	QuotaBytes int64
	// Compaction is the periodic auto-compaction retention; zero is
	// DefaultCompaction.
	Compaction time.Duration
	// Name is the member's name; empty is "gpuctl-registry".
	Name string
	// LogFile receives etcd's own log; empty is DataDir/etcd.log.
	LogFile string
}

// Server is a running member.
type Server struct {
	e      *embed.Etcd
	client string
}

// Start starts the member and waits until it serves, or ctx ends.
func Start(ctx context.Context, c Config) (*Server, error) {
	if c.DataDir == "" || c.Listen == "" {
		return nil, errs.New(errs.InvalidArgument, "", "gpud registry needs --data-dir DIR and --listen HOST:PORT")
	}
	if _, err := os.Stat(filepath.Join(c.DataDir, "gpud.db")); err == nil {
		return nil, errs.New(errs.InvalidArgument, "", "--data-dir %s is a gpud state dir (it holds gpud.db); give the registry a directory of its own", c.DataDir)
	}
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, errs.Wrap(err, errs.FailedPrecondition, "", "create --data-dir %s", c.DataDir)
	}
	if c.QuotaBytes == 0 {
		c.QuotaBytes = DefaultQuotaBytes
	}
	if c.Compaction == 0 {
		c.Compaction = DefaultCompaction
	}
	if c.Name == "" {
		c.Name = "gpuctl-registry"
	}
	if c.LogFile == "" {
		c.LogFile = filepath.Join(c.DataDir, "etcd.log")
	}
	cu, err := url.Parse("http://" + c.Listen)
	if err != nil || cu.Port() == "" {
		return nil, errs.New(errs.InvalidArgument, "", "--listen %q is not HOST:PORT", c.Listen)
	}
	if c.Peer == "" {
		var port int
		fmt.Sscan(cu.Port(), &port)
		c.Peer = fmt.Sprintf("%s:%d", cu.Hostname(), port+1)
	}
	pu, err := url.Parse("http://" + c.Peer)
	if err != nil || pu.Port() == "" {
		return nil, errs.New(errs.InvalidArgument, "", "peer address %q is not HOST:PORT", c.Peer)
	}

	cfg := embed.NewConfig()
	cfg.Name = c.Name
	cfg.Dir = filepath.Join(c.DataDir, "etcd")
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*cu}, []url.URL{*cu}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*pu}, []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(c.Name)
	cfg.QuotaBackendBytes = c.QuotaBytes
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = c.Compaction.String()
	cfg.Metrics = "basic"
	if c.Metrics != "" {
		mu, err := url.Parse("http://" + c.Metrics)
		if err != nil {
			return nil, errs.New(errs.InvalidArgument, "", "--metrics %q is not HOST:PORT", c.Metrics)
		}
		cfg.ListenMetricsUrls = []url.URL{*mu}
	}
	cfg.Logger, cfg.LogLevel, cfg.LogOutputs = "zap", "warn", []string{c.LogFile}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, errs.Wrap(err, errs.Unavailable, "", "start the embedded etcd on %s (data in %s)", c.Listen, cfg.Dir)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, errs.Wrap(err, errs.Unavailable, "", "embedded etcd on %s stopped", c.Listen)
	case <-ctx.Done():
		e.Server.Stop()
		e.Close()
		return nil, ctx.Err()
	case <-time.After(60 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, errs.New(errs.Unavailable, "", "embedded etcd on %s did not become ready within 60 s; see %s", c.Listen, c.LogFile)
	}
	return &Server{e: e, client: cu.String()}, nil
}

// Endpoint is the client URL, for --registry.
func (s *Server) Endpoint() string { return s.client }

// Err reports a fatal server error.
func (s *Server) Err() <-chan error { return s.e.Err() }

// Close stops the member.
func (s *Server) Close() { s.e.Close() }
