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
	"github.com/gpuctl/gpuctl/tenant"
)

// router is what a concept package implements to add its routes to the
// control API: sessions, checkpoint, restore, migration and images each
// register their own.
type router interface {
	Register(mux *http.ServeMux)
}

// apiHandler builds the control API in one place. Every route needs a
// token, the host's or a tenant's, and is written to the audit log;
// /metrics, which Prometheus scrapes, needs none, except with tenants:
// then it needs the host token, since its counts would tell a tenant of
// others' sessions.
func (d *daemon) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(api.RouteHost, control.Handle(d.getHost))
	for _, r := range d.routes {
		r.Register(mux)
	}
	root := http.NewServeMux()
	var metrics http.Handler = promhttp.HandlerFor(d.registry, promhttp.HandlerOpts{ErrorLog: nil})
	if d.tenants.Len() > 0 {
		metrics = control.Authenticate(d.tenants, nil, adminOnly("metrics", metrics))
	}
	root.Handle(api.RouteMetrics, metrics)
	root.Handle("/", control.Authenticate(d.tenants, d.audit, mux))
	return root
}

// adminOnly refuses next to tenants.
func adminOnly(what string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := tenant.RequireAdmin(r.Context(), what); err != nil {
			control.WriteError(w, err)
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (d *daemon) getHost(w http.ResponseWriter, r *http.Request) error {
	// A wildcard --listen is reported as the address this request
	// reached, which is one the caller can route to.
	var local string
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		local, _, _ = net.SplitHostPort(a.String())
	}
	sessions := d.manager.List(r.Context())
	h := api.Host{
		Name: d.cfg.name, HostInfo: d.host, Listen: advertised(d.cfg.listen, local), API: d.cfg.api,
		Version: version, GoVersion: runtime.Version(), Started: d.started,
		SocketNS: d.socketNS, CRIU: &d.criu,
	}
	// A tenant is told about itself only: its own sessions, no free
	// memory figure (what others hold would show in it).
	who := tenant.FromContext(r.Context())
	for _, s := range sessions {
		if who.Owns(s.Tenant) {
			h.Sessions++
		}
	}
	if who.IsAdmin() {
		free := d.memFree(sessions)
		h.MemFreeBytes = &free
	}
	usage := map[string]session.Usage{}
	for _, u := range d.manager.Usage() {
		usage[u.Tenant] = u
	}
	for _, t := range d.tenants.Tenants() {
		if !who.IsAdmin() && who.Tenant != t.Name {
			continue
		}
		at := api.Tenant{Name: t.Name, MaxMemBytes: t.MaxMemBytes, MaxSessions: t.MaxSessions,
			Sessions: usage[t.Name].Sessions, MemBytes: usage[t.Name].MemBytes}
		if who.IsAdmin() {
			at.TokenFingerprint = d.tenants.Fingerprint(t.Name)
		}
		h.Tenants = append(h.Tenants, at)
	}
	control.WriteJSON(w, h)
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
