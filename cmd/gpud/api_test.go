package main

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/tenant"
)

// /metrics needs no token, unless the host has tenants: its counts would
// tell one tenant of another's sessions, so it is the administrator's.
func TestMetricsWithTenants(t *testing.T) {
	dir := t.TempDir()
	tok := filepath.Join(dir, "alice")
	if err := os.WriteFile(tok, []byte("alice-tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "tenants.json")
	if err := os.WriteFile(file, []byte(`[{"name":"alice","token_file":"`+tok+`"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	withTenants, err := tenant.Load(file, "host-tok")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		set   *tenant.Set
		token string
		want  int
	}{
		{"no tenants, no token", tenant.NewSet("host-tok"), "", http.StatusOK},
		{"tenants, no token", withTenants, "", http.StatusUnauthorized},
		{"tenants, a tenant's token", withTenants, "alice-tok", http.StatusForbidden},
		{"tenants, the host token", withTenants, "host-tok", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &daemon{tenants: tc.set, registry: prometheus.NewRegistry(), audit: slog.New(slog.DiscardHandler)}
			req := httptest.NewRequest("GET", api.MetricsPath, nil)
			if tc.token != "" {
				req.Header.Set("Authorization", "Bearer "+tc.token)
			}
			rec := httptest.NewRecorder()
			d.apiHandler().ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.want, rec.Body)
			}
		})
	}
}
