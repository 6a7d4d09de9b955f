package session

import (
	"net/http"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
)

// Register adds the session listing to the control API:
//
//	GET /v1/sessions       every session, oldest first (array of api.Session)
//	GET /v1/sessions/{id}  one session (api.Session)
func (m *Manager) Register(mux *http.ServeMux) {
	mux.Handle(api.RouteSessions, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		list := m.List(r.Context())
		out := make([]api.Session, len(list))
		for i, s := range list {
			out[i] = s.reply()
		}
		control.WriteJSON(w, out)
		return nil
	}))
	mux.Handle(api.RouteSession, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		info, err := m.Get(control.PathID(r))
		if err != nil {
			return err
		}
		control.WriteJSON(w, info.reply())
		return nil
	}))
}

// reply is the listing as the control API reports it.
func (i Info) reply() api.Session {
	return api.Session{ID: i.ID, State: string(i.State), Host: i.Host, Client: i.Client, Created: i.Created,
		MemBytes: i.MemBytes, Device: i.Device, Backend: i.Backend, WorkerPID: i.WorkerPID, Epoch: i.Epoch}
}
