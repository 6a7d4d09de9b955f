package control

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

func TestRoundTripAndErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle(api.RouteSession, Handle(func(w http.ResponseWriter, r *http.Request) error {
		if id := PathID(r); id != "s-1" {
			return errs.New(errs.NotFound, errs.Session(id), "no such session")
		}
		WriteJSON(w, api.Session{ID: "s-1", State: "running"})
		return nil
	}))
	mux.Handle(api.RouteCheckpoint, Handle(func(w http.ResponseWriter, r *http.Request) error {
		var req api.CheckpointRequest
		return DecodeJSON(r, &req)
	}))
	srv := httptest.NewServer(RequireToken("secret", mux))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	tests := []struct {
		name, token, id string
		wantKind        errs.Kind
		wantMsg         string
	}{
		{"ok", "secret", "s-1", "", ""},
		{"kind survives the wire", "secret", "s-9", errs.NotFound, `session "s-9": no such session`},
		{"wrong token", "nope", "s-1", errs.Unauthenticated, "wrong token"},
		{"no id", "secret", "", errs.InvalidArgument, "no session id given"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := NewClient(addr, tt.token).Session(ctx, tt.id)
			if tt.wantKind == "" {
				if err != nil || out.ID != "s-1" || out.State != "running" {
					t.Fatalf("got %+v, %v", out, err)
				}
				return
			}
			if errs.KindOf(err) != tt.wantKind || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got %v (kind %q), want kind %q containing %q", err, errs.KindOf(err), tt.wantKind, tt.wantMsg)
			}
		})
	}
	if _, err := NewClient("127.0.0.1:1", "x").Host(ctx); !errs.IsUnavailable(err) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("unreachable host: %v", err)
	}
	// A body the route cannot decode is a bad request that says so.
	var reply map[string]any
	cl := NewClient(addr, "secret")
	if err := cl.do(ctx, http.MethodPost, api.SessionCheckpointPath("s-1"), map[string]bool{"leave": true}, &reply); !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "request body") {
		t.Fatalf("unknown field: %v", err)
	}
}
