package control

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

func TestRoundTripAndErrors(t *testing.T) {
	mux := http.NewServeMux()
	mux.Handle("GET /ok", Handle(func(w http.ResponseWriter, r *http.Request) error {
		WriteJSON(w, map[string]string{"id": "s-1"})
		return nil
	}))
	mux.Handle("GET /missing", Handle(func(w http.ResponseWriter, r *http.Request) error {
		return errs.New(errs.NotFound, errs.Session("s-9"), "no such session")
	}))
	srv := httptest.NewServer(RequireToken("secret", mux))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()

	tests := []struct {
		name, token, path string
		wantKind          errs.Kind
		wantMsg           string
	}{
		{"ok", "secret", "/ok", "", ""},
		{"kind survives the wire", "secret", "/missing", errs.NotFound, `session "s-9": no such session`},
		{"wrong token", "nope", "/ok", errs.Unauthenticated, "wrong token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out map[string]string
			err := NewClient(addr, tt.token).Do(ctx, "GET", tt.path, nil, &out)
			if tt.wantKind == "" {
				if err != nil || out["id"] != "s-1" {
					t.Fatalf("got %v, %v", out, err)
				}
				return
			}
			if errs.KindOf(err) != tt.wantKind || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got %v (kind %q), want kind %q containing %q", err, errs.KindOf(err), tt.wantKind, tt.wantMsg)
			}
		})
	}
	if err := NewClient("127.0.0.1:1", "x").Do(ctx, "GET", "/ok", nil, nil); !errs.IsUnavailable(err) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("unreachable host: %v", err)
	}
}
