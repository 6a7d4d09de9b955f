package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/control/tlstest"
)

// TestTLSFlags runs gpuctl against a control API served over TLS.
func TestTLSFlags(t *testing.T) {
	ca := tlstest.NewCA(t, "gpuctl")
	other := tlstest.NewCA(t, "other")
	cert := ca.Issue(t, "gpud", "127.0.0.1", "gpud-a.internal")
	cfg, err := control.ServerTLS(cert.CertFile, cert.KeyFile, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`[{"id":"s-0123456789ab","state":"running","host":"a","created":"2026-11-30T11:55:00Z"}]`))
	})
	srv := httptest.NewUnstartedServer(control.RequireToken("tok", mux))
	srv.TLS = cfg
	srv.StartTLS()
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "https://")
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name     string
		args     []string
		envCA    string // GPUCTL_TLS_CA
		code     int
		contains string // in stdout on success, in stderr otherwise
	}{
		{"--tls-ca", []string{"--tls-ca", ca.CertFile}, "", 0, "s-0123456789ab"},
		{"GPUCTL_TLS_CA", nil, ca.CertFile, 0, "s-0123456789ab"},
		{"server name override", []string{"--tls-ca", ca.CertFile, "--tls-server-name", "gpud-a.internal"}, "", 0, "s-0123456789ab"},
		{"no --tls-ca", nil, "", 4, "serves its API over TLS; pass the CA that signed its certificate with --tls-ca"},
		{"wrong CA", []string{"--tls-ca", other.CertFile}, "", 4, "certificate signed by unknown authority"},
		{"wrong server name", []string{"--tls-ca", ca.CertFile, "--tls-server-name", "gpud-b.internal"}, "", 4, `not valid for "gpud-b.internal"`},
		{"server name without CA", []string{"--tls-server-name", "gpud-a.internal"}, "", 2, "--tls-server-name needs --tls-ca"},
		{"CA file missing", []string{"--tls-ca", filepath.Join(t.TempDir(), "none.pem")}, "", 2, "read --tls-ca"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("GPUCTL_TLS_CA", tc.envCA)
			var out, errOut bytes.Buffer
			args := append([]string{"gpuctl", "--host", addr, "--token-file", tokenFile}, tc.args...)
			code := run(context.Background(), append(args, "sessions"), testEnv(&out, &errOut))
			got := out.String()
			if tc.code != 0 {
				got = errOut.String()
			}
			if code != tc.code || !strings.Contains(got, tc.contains) || strings.Count(errOut.String(), "\n") > 1 {
				t.Fatalf("exit %d, want %d; stdout %q; stderr %q; want %q", code, tc.code, out.String(), errOut.String(), tc.contains)
			}
		})
	}
}
