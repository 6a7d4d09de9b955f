package control

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

type callerKey struct{}

// tokens is an Authenticator that knows a fixed set of tokens.
type tokens map[string]string

func (t tokens) Authenticate(ctx context.Context, tok string) (context.Context, string, bool) {
	who, ok := t[tok]
	if !ok {
		return ctx, "", false
	}
	return context.WithValue(ctx, callerKey{}, who), who, true
}

func TestAuthenticateAndAudit(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(api.RouteSession, Handle(func(w http.ResponseWriter, r *http.Request) error {
		if r.Context().Value(callerKey{}) != "alice" {
			return errs.New(errs.NotFound, errs.Session(PathID(r)), "no such session on this host")
		}
		WriteJSON(w, api.Session{ID: PathID(r)})
		return nil
	}))
	mux.Handle(api.RouteImport, Handle(func(w http.ResponseWriter, r *http.Request) error {
		NoteSubject(r.Context(), "image img-new")
		Note(r.Context(), slog.String("bytes", "42"))
		WriteJSON(w, api.ImportReply{})
		return nil
	}))
	mux.Handle(api.RouteExport, Handle(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusOK)
		panic(http.ErrAbortHandler)
	}))
	mux.Handle(api.RouteVerify, Handle(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusOK)
		NoteError(r.Context(), errs.New(errs.DataLoss, "", "damaged"))
		return nil
	}))
	var buf bytes.Buffer
	audit := slog.New(slog.NewJSONHandler(&buf, nil))
	srv := httptest.NewServer(Authenticate(tokens{"tok-a": "alice", "tok-b": "bob"}, audit, mux))
	defer srv.Close()

	do := func(method, path, token string) int {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader("{}"))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return -1 // the aborted export
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	type line struct {
		Msg, Tenant, Action, Subject, Result, Bytes string
		Status                                      int
	}
	for _, tc := range []struct {
		name, method, path, token string
		status                    int
		want                      line
	}{
		{"allowed", "GET", api.SessionPath("s-1"), "tok-a", 200, line{Tenant: "alice", Action: "session.get", Subject: "session s-1", Result: "ok", Status: 200}},
		{"not found", "GET", api.SessionPath("s-1"), "tok-b", 404, line{Tenant: "bob", Action: "session.get", Subject: "session s-1", Result: "not_found", Status: 404}},
		{"wrong token", "GET", api.SessionPath("s-1"), "tok-x", 401, line{Tenant: "(none)", Action: "session.get", Subject: "GET /v1/sessions/s-1", Result: "unauthenticated", Status: 401}},
		{"no token", "POST", api.ImportPath, "", 401, line{Tenant: "(none)", Action: "image.import", Subject: "POST /v1/images/import", Result: "unauthenticated", Status: 401}},
		{"subject from the handler", "POST", api.ImportPath, "tok-b", 200, line{Tenant: "bob", Action: "image.import", Subject: "image img-new", Result: "ok", Status: 200, Bytes: "42"}},
		{"aborted stream", "GET", api.ImageExportPath("img-1"), "tok-a", -1, line{Tenant: "alice", Action: "image.export", Subject: "image img-1", Result: "aborted", Status: 200}},
		{"error inside a stream", "POST", api.VerifyPath, "tok-a", 200, line{Tenant: "alice", Action: "images.verify", Result: "data_loss", Status: 200}},
		{"no such route", "GET", "/v1/nothing", "tok-a", 404, line{Tenant: "alice", Action: "unknown", Subject: "GET /v1/nothing", Result: "Not Found", Status: 404}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf.Reset()
			if got := do(tc.method, tc.path, tc.token); got != tc.status {
				t.Errorf("status %d, want %d", got, tc.status)
			}
			// One line per request; the client sends an idempotent request
			// again when the server cut the first one off.
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(lines) != 1 && tc.status != -1 {
				t.Fatalf("%d audit lines, want 1: %q", len(lines), buf.String())
			}
			tc.want.Msg = "audit"
			for _, l := range lines {
				var got line
				if err := json.Unmarshal([]byte(l), &got); err != nil {
					t.Fatalf("%v: %s", err, l)
				}
				if got != tc.want {
					t.Fatalf("audit line %+v, want %+v", got, tc.want)
				}
			}
		})
	}
}

func TestEveryRouteHasAnAction(t *testing.T) {
	seen := map[string]string{}
	for _, r := range api.Routes() {
		a := Action(r)
		if a == "unknown" {
			t.Errorf("route %q has no audit action", r)
		}
		if other, dup := seen[a]; dup {
			t.Errorf("routes %q and %q share the action %q", r, other, a)
		}
		seen[a] = r
	}
}
