// Package control is the plumbing of gpud's control API (package api):
// HTTP with JSON bodies and a bearer token, served on gpud's --api address
// and used by gpuctl, by peer gpuds during migration, and by schedulers.
// With a certificate the API is HTTPS (ServerTLS); callers then verify it
// against the CA they are given (ClientTLS, WithTLS).
//
// Each concept (sessions, images, checkpoint, restore, migration)
// registers its own routes on the mux that gpud builds; this package holds
// what they share (authentication, the error envelope) and Client, the
// typed client every caller goes through: one method per route, so that no
// caller builds a path or picks a method itself.
//
// Errors travel as api.ErrorBody with an HTTP status derived from the
// kind, and come back out of Client as *errs.Error with the same kind, so
// a caller on the far side can still ask errs.IsNotFound.
package control

import (
	"crypto/subtle"
	"encoding/json"
	"net/http"
	"strings"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

var kindStatus = map[errs.Kind]int{
	errs.NotFound:           http.StatusNotFound,
	errs.AlreadyExists:      http.StatusConflict,
	errs.InvalidArgument:    http.StatusBadRequest,
	errs.FailedPrecondition: http.StatusPreconditionFailed,
	errs.Unavailable:        http.StatusServiceUnavailable,
	errs.Unauthenticated:    http.StatusUnauthorized,
	errs.PermissionDenied:   http.StatusForbidden,
	errs.ResourceExhausted:  http.StatusInsufficientStorage,
	errs.DataLoss:           http.StatusUnprocessableEntity,
	errs.Internal:           http.StatusInternalServerError,
}

// StatusOf maps an error kind to the HTTP status that carries it.
func StatusOf(k errs.Kind) int {
	if s, ok := kindStatus[k]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// WriteJSON writes v with status 200.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// WriteError writes err in the error envelope.
func WriteError(w http.ResponseWriter, err error) {
	k := errs.KindOf(err)
	if aw, ok := w.(interface{ noteKind(errs.Kind) }); ok {
		aw.noteKind(k)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(StatusOf(k))
	_ = json.NewEncoder(w).Encode(api.ErrorBody{Kind: k, Error: err.Error()})
}

// DecodeJSON reads a request body into v, limited to 1 MiB, and returns
// an InvalidArgument error that says what was wrong.
func DecodeJSON(r *http.Request, v any) error { return DecodeJSONMax(r, v, 1<<20) }

// DecodeJSONMax is DecodeJSON for a body of up to max bytes: a request
// that carries a worker's protocol state (api.AdoptRequest.State).
func DecodeJSONMax(r *http.Request, v any, max int64) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, max))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errs.Wrap(err, errs.InvalidArgument, "", "request body")
	}
	return nil
}

// PathID is the {id} (api.IDWildcard) a request's route matched,
// unescaped.
func PathID(r *http.Request) string { return r.PathValue(api.IDWildcard) }

// WantsProgress reports whether a request asked for streamed progress
// (api.ProgressParam, as api.VerifyProgressPath sets it).
func WantsProgress(r *http.Request) bool { return r.URL.Query().Get(api.ProgressParam) == "1" }

// HandlerFunc is a handler that returns its error instead of writing it.
type HandlerFunc func(w http.ResponseWriter, r *http.Request) error

// Handle adapts h to http.Handler, writing a returned error as the envelope.
func Handle(h HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			WriteError(w, err)
		}
	})
}

// RequireToken wraps next so that only requests bearing token pass. The
// comparison is constant-time. gpud itself uses Authenticate, which also
// knows tenants and writes the audit log.
func RequireToken(token string, next http.Handler) http.Handler {
	want := []byte(token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			WriteError(w, errs.New(errs.Unauthenticated, "", "missing or wrong token; pass the host's token with --token-file"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// decodeError turns the body of an error response back into an
// *errs.Error.
func decodeError(status string, b []byte, subject string) error {
	var body api.ErrorBody
	if err := json.Unmarshal(b, &body); err != nil || body.Error == "" {
		return errs.New(errs.Unknown, subject, "HTTP %s", status)
	}
	return body.Err()
}
