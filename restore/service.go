package restore

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/tenant"
)

// Adopter is gpud's session table as the restore route uses it.
type Adopter interface {
	// Adopt registers a restored session, detached and waiting for its
	// client (which reconnects with the session's id and secret), served
	// by w, and owned by owner (the image's tenant; empty for the
	// administrator). A session with that id already live here is
	// errs.AlreadyExists; one its tenant's limits here leave no room for
	// errs.ResourceExhausted.
	Adopt(ctx context.Context, id string, w checkpoint.Worker, image, owner string) error
}

// attributeSetter is a session table that records sessions' priorities
// and labels, which images carry (images.Meta).
type attributeSetter interface {
	SetAttributes(id string, prio int32, labels api.Labels) error
}

// Service restores images on request; gpud builds one and registers its
// route.
type Service struct {
	Restorer *Restorer
	Sessions Adopter
	// Listen is this gpud's --listen address, returned so that a
	// migrating host can send the client here.
	Listen string
	Log    *slog.Logger
}

// Register adds POST /v1/images/{id}/restore and PUT
// /v1/chunks/staged/{id}/restore (the administrator's, as the other
// staging routes) to mux.
func (s *Service) Register(mux *http.ServeMux) {
	mux.Handle(api.RoutePrepareRestore, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		id, err := adminSession(r, "preparing a migration's restore")
		if err != nil {
			return err
		}
		defer s.Restorer.preparing(id)()
		h, files, err := readPrepare(r.Body)
		if err != nil {
			return errs.Wrap(err, errs.InvalidArgument, errs.Session(id), "prepared restore")
		}
		if h.Meta.Session != id {
			return errs.New(errs.InvalidArgument, errs.Session(id), "prepared restore: the header is of session %q", h.Meta.Session)
		}
		t0 := time.Now()
		steps, err := s.Restorer.Prepare(r.Context(), files, h.Meta, h.Gen, h.Ahead)
		if err != nil {
			return err
		}
		control.WriteJSON(w, &api.RestoreReply{Session: id, Listen: s.Listen, DurationMS: time.Since(t0).Milliseconds(), Steps: checkpoint.StepTimings(steps)})
		return nil
	}))
	mux.Handle(api.RouteAdoptPrepared, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		id, err := adminSession(r, "adopting a migration's prepared restore")
		if err != nil {
			return err
		}
		var req api.AdoptRequest
		if err := control.DecodeJSONMax(r, &req, api.MaxAdoptBody); err != nil {
			return err
		}
		if req.Image != "" {
			if err := ids.CheckImage(req.Image); err != nil {
				return err
			}
			if err := s.Restorer.CommitAdopted(r.Context(), id, req.Nonce, req.Image); err != nil {
				return err
			}
			if is, ok := s.Sessions.(imageSetter); ok && !is.SetImage(id, req.Image) {
				s.log().Info("the migrated session's image arrived after it had another; kept the other", "session", id, "image", req.Image)
			}
			control.WriteJSON(w, &api.RestoreReply{Session: id, Image: req.Image, Listen: s.Listen})
			return nil
		}
		res, err := s.Restorer.AdoptPrepared(r.Context(), id, req.Nonce, req.Gen, req.State, req.Epoch)
		if err != nil {
			return err
		}
		rep, err := s.register(r.Context(), res, "")
		if err != nil {
			return err
		}
		control.WriteJSON(w, rep)
		return nil
	}))
	mux.Handle(api.RouteRestore, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		q := r.URL.Query()
		res, err := s.RestoreAfter(r.Context(), control.PathID(r), q.Get(api.PreparedParam), q.Get(api.NonceParam))
		if err != nil {
			return err
		}
		control.Note(r.Context(), slog.String("session", res.Session))
		control.WriteJSON(w, res)
		return nil
	}))
}

// adminSession checks that the administrator makes request r (what names
// it in the refusal) and returns the session id in its path.
func adminSession(r *http.Request, what string) (string, error) {
	if err := tenant.RequireAdmin(r.Context(), what); err != nil {
		return "", err
	}
	id := control.PathID(r)
	return id, ids.CheckSession(id)
}

// imageSetter is the session table's SetImage (session.Manager).
type imageSetter interface {
	SetImage(id, image string) bool
}

// Restore restores image and registers its session here.
func (s *Service) Restore(ctx context.Context, image string) (*api.RestoreReply, error) {
	return s.RestoreAfter(ctx, image, "", "")
}

// RestoreAfter is Restore after the prepared restore of session, when
// it names one (Restorer.RestoreAfter).
func (s *Service) RestoreAfter(ctx context.Context, image, session, nonce string) (*api.RestoreReply, error) {
	if err := ids.CheckImage(image); err != nil {
		return nil, err
	}
	if session != "" {
		if err := ids.CheckSession(session); err != nil {
			return nil, err
		}
	}
	res, err := s.Restorer.RestoreAfter(ctx, image, session, nonce)
	if err != nil {
		return nil, err
	}
	return s.register(ctx, res, image)
}

// register adopts a restored worker as its session here; image is what
// it was restored from ("" for none yet).
func (s *Service) register(ctx context.Context, res *Result, image string) (*api.RestoreReply, error) {
	subject := errs.Image(image)
	if image == "" {
		subject = errs.Session(res.Session)
	}
	if err := s.Sessions.Adopt(ctx, res.Session, res.Worker, image, res.Meta.Tenant); err != nil {
		// Nothing may run that no session owns.
		if kerr := kill(res.PID); kerr != nil {
			s.log().Error("restored worker left running", "pid", res.PID, "err", kerr)
		}
		if s.Restorer.Unadmit != nil {
			s.Restorer.Unadmit(res.Meta)
		}
		return nil, errs.Wrap(err, errs.KindOf(err), subject, "register restored session %s", res.Session)
	}
	if s.Restorer.Adopted != nil {
		s.Restorer.Adopted(res.Meta)
	}
	if a, ok := s.Sessions.(attributeSetter); ok && (res.Meta.Priority != 0 || len(res.Meta.Labels) > 0) {
		if err := a.SetAttributes(res.Session, res.Meta.Priority, res.Meta.Labels); err != nil {
			s.log().Warn("restored session's priority and labels not recorded", "session", res.Session, "err", err)
		}
	}
	s.log().Info("session restored", "session", res.Session, "image", image, "pid", res.PID, "took_ms", res.DurationMS)
	return &api.RestoreReply{Session: res.Session, Image: image, PID: res.PID, Listen: s.Listen, DurationMS: res.DurationMS, Steps: checkpoint.StepTimings(res.Steps)}, nil
}

func (s *Service) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}
