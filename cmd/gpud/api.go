package main

import (
	"net"
	"net/http"
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/session"
)

// router is what a concept package implements to add its routes to the
// control API: sessions, checkpoint, restore, migration and images each
// register their own.
type router interface {
	Register(mux *http.ServeMux)
}

// apiHandler builds the control API in one place. Every route needs the
// host token except /metrics, which Prometheus scrapes.
func (d *daemon) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(api.RouteHost, control.Handle(d.getHost))
	for _, r := range d.routes {
		r.Register(mux)
	}
	root := http.NewServeMux()
	root.Handle(api.RouteMetrics, promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{ErrorLog: nil}))
	root.Handle("/", control.RequireToken(d.token, mux))
	return root
}

func (d *daemon) getHost(w http.ResponseWriter, r *http.Request) error {
	// A wildcard --listen is reported as the address this request
	// reached, which is one the caller can route to.
	var local string
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		local, _, _ = net.SplitHostPort(a.String())
	}
	sessions := d.manager.List(r.Context())
	free := d.memFree(sessions)
	control.WriteJSON(w, api.Host{
		Name: d.cfg.name, HostInfo: d.host, Listen: advertised(d.cfg.listen, local), API: d.cfg.api,
		Version: version, GoVersion: runtime.Version(), Started: d.started,
		Sessions: len(sessions),
		SocketNS: d.socketNS, MemFreeBytes: &free, CRIU: &d.criu,
	})
	return nil
}

// memFree is the served device's memory less what sessions hold.
func (d *daemon) memFree(sessions []session.Info) uint64 {
	total := servedGPU(d.host.GPUs, d.cfg.device).MemoryBytes
	var held uint64
	for _, s := range sessions {
		held += s.MemBytes
	}
	if held >= total {
		return 0
	}
	return total - held
}

// servedGPU is the GPU --device names (an index or a UUID), else the first.
func servedGPU(gpus []backend.GPU, device string) backend.GPU {
	for _, g := range gpus {
		if g.UUID == device || strconv.Itoa(g.Index) == device {
			return g
		}
	}
	if len(gpus) == 0 {
		return backend.GPU{}
	}
	return gpus[0]
}

// version is gpud's version, set at link time with -X main.version=...
var version = "dev"
