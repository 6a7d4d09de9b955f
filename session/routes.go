package session

import (
	"net/http"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/tenant"
)

// Register adds the session listing to the control API:
//
//	GET /v1/sessions       every session, oldest first (array of api.Session)
//	GET /v1/sessions/{id}  one session (api.Session)
//
// A tenant sees its own sessions only; another's is answered as one that
// is not here.
func (m *Manager) Register(mux *http.ServeMux) {
	mux.Handle(api.RouteSessions, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		who := tenant.FromContext(r.Context())
		list := m.List(r.Context())
		out := make([]api.Session, 0, len(list))
		for _, s := range list {
			if who.Owns(s.Tenant) {
				out = append(out, s.reply())
			}
		}
		control.WriteJSON(w, out)
		return nil
	}))
	mux.Handle(api.RouteSession, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		id := control.PathID(r)
		info, err := m.Get(id)
		if err != nil {
			return err
		}
		if !tenant.FromContext(r.Context()).Owns(info.Tenant) {
			return errNoSession(id)
		}
		control.WriteJSON(w, info.reply())
		return nil
	}))
}

// reply is the listing as the control API reports it.
func (i Info) reply() api.Session {
	out := api.Session{ID: i.ID, State: string(i.State), Host: i.Host, Client: i.Client, Created: i.Created,
		MemBytes: i.MemBytes, Device: i.Device, Backend: i.Backend, WorkerPID: i.WorkerPID, Tenant: i.Tenant, Epoch: i.Epoch,
		Priority: i.Priority, Labels: i.Labels, Image: i.Image}
	if out.Labels == nil {
		out.Labels = api.Labels{}
	}
	return out
}
