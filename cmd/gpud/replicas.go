package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/replicate"
)

// newReplicator is the replication loop of a host in a cluster: with
// --replicas it keeps copies on peers; with none (K 0) it only records
// this host's own images in the registry, so that gpuctl knows where an
// image is also while its host is down.
func (d *daemon) newReplicator(r *registry.Client) *replicate.Replicator {
	return replicate.New(replicate.Config{
		Self: d.self(), K: d.cfg.replicas, Registry: r, Store: d.store,
		Dial:      func(api string) *control.Client { return control.NewClient(api, d.token, control.WithTLS(d.peerTLS)) },
		Connected: func() bool { return d.cluster != nil && d.cluster.member != nil && d.cluster.member.Connected() },
		Metrics:   replicate.NewMetrics(d.registry),
		Log:       d.log,
	})
}

// self is this host as it registers.
func (d *daemon) self() registry.Host {
	return registry.Host{Name: d.cfg.name, API: d.cfg.api, Listen: clientAddr(d.cfg), Backend: d.host.Backend, Driver: d.host.DriverVersion,
		GPUs: d.host.GPUs, Version: version, Started: d.started}
}

// stepDone follows the checkpoint service's finished steps: once a
// checkpoint's image is stored (whichever way the pipeline committed it),
// a host in a cluster looks for new images to record and replicate at
// once.
func (d *daemon) stepDone(step string) {
	if step == "store" && d.cluster != nil && d.cluster.replicas != nil {
		d.cluster.replicas.Rescan()
	}
}

// clientAddr is the address clients reach this host's --listen at, as
// the registry records it: --listen itself when it names a host, else
// (0.0.0.0, ::) its port on the host --api names, or "" when neither
// names one.
func clientAddr(cfg config) string {
	if a := advertised(cfg.listen, ""); a != "" {
		return a
	}
	host, _, err := net.SplitHostPort(cfg.api)
	if err != nil || host == "" {
		return ""
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		return ""
	}
	return advertised(cfg.listen, host)
}

// Locate is server.Locator: where a session this host does not run lives
// now, as the registry says. A client whose host died asks any gpud it
// knows; this one sends it to the session's live owner, or tells it to
// wait while the session is in an image or its owner is down.
func (c *cluster) Locate(ctx context.Context, id string) (addr, wait string) {
	if c.member == nil || !c.member.Connected() {
		return "", ""
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	o, err := c.r.Owner(ctx, id)
	if err != nil {
		return "", ""
	}
	switch {
	case !o.Live:
		return "", fmt.Sprintf("session %s waits in image %s (owner %s) until it is restored; retry", id, orDash(o.Image), o.Host)
	case o.Host == c.host:
		// Live here by the registry, yet not in the session table: a
		// restore here is bringing it up.
		return "", fmt.Sprintf("session %s is being restored on this host; retry", id)
	}
	h, err := c.r.Host(ctx, o.Host)
	switch {
	case err != nil:
		return "", ""
	case h.State != registry.StateUp:
		return "", fmt.Sprintf("session %s's host %s is down; retry until it is restored elsewhere", id, o.Host)
	case h.Listen == "":
		return "", fmt.Sprintf("session %s runs on host %s, which registered no client address; retry", id, o.Host)
	}
	c.log.Info("sending a client to its session's host, from the registry", "session", id, "host", o.Host, "listen", h.Listen)
	return h.Listen, ""
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
