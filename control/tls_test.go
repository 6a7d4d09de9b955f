package control

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control/tlstest"
	"github.com/gpuctl/gpuctl/errs"
)

// tlsServer serves GET /v1/sessions/{id} (token "secret") over TLS with
// cert.
func tlsServer(t *testing.T, cert tlstest.Cert) string {
	t.Helper()
	cfg, err := ServerTLS(cert.CertFile, cert.KeyFile, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(RequireToken("secret", okMux()))
	srv.TLS = cfg
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "https://")
}

func okMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(api.RouteSession, Handle(func(w http.ResponseWriter, r *http.Request) error {
		WriteJSON(w, api.Session{ID: PathID(r)})
		return nil
	}))
	return mux
}

func TestTLSClient(t *testing.T) {
	ca := tlstest.NewCA(t, "good")
	other := tlstest.NewCA(t, "other")
	now := time.Now()
	good := tlsServer(t, ca.Issue(t, "gpud", "127.0.0.1"))
	named := tlsServer(t, ca.Issue(t, "named", "gpud-a.internal"))
	expiredCert := ca.IssueValid(t, "old", now.Add(-48*time.Hour), now.Add(-time.Hour), "127.0.0.1")
	// ServerTLS refuses an expired certificate, so serve this one as is.
	pair, err := tls.LoadX509KeyPair(expiredCert.CertFile, expiredCert.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	expSrv := httptest.NewUnstartedServer(okMux())
	expSrv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}}
	expSrv.StartTLS()
	defer expSrv.Close()
	expired := strings.TrimPrefix(expSrv.URL, "https://")
	plainSrv := httptest.NewServer(RequireToken("secret", okMux()))
	defer plainSrv.Close()
	plain := strings.TrimPrefix(plainSrv.URL, "http://")

	clientTLS := func(caFile, name string) *tls.Config {
		cfg, err := ClientTLS(caFile, name)
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	tls12 := clientTLS(ca.CertFile, "")
	tls12.MaxVersion = tls.VersionTLS12
	tls12.MinVersion = tls.VersionTLS12

	tests := []struct {
		name    string
		addr    string
		cfg     *tls.Config // nil: plain HTTP
		wantErr string      // empty: the call succeeds
	}{
		{"good CA", good, clientTLS(ca.CertFile, ""), ""},
		{"server name override", named, clientTLS(ca.CertFile, "gpud-a.internal"), ""},
		{"wrong CA", good, clientTLS(other.CertFile, ""), "certificate signed by unknown authority; pass the CA that signed gpud's certificate with --tls-ca"},
		{"name not in certificate", named, clientTLS(ca.CertFile, ""), `not valid for "127.0.0.1" (it is for gpud-a.internal)`},
		{"expired certificate", expired, clientTLS(ca.CertFile, ""), "certificate is expired or not yet valid"},
		{"TLS client, plain gpud", plain, clientTLS(ca.CertFile, ""), "answered in plain HTTP, not TLS"},
		{"plain client, TLS gpud", good, nil, "serves its API over TLS; pass the CA that signed its certificate with --tls-ca"},
		{"TLS 1.2 client refused", good, tls12, "TLS handshake failed"},
		{"plain client, plain gpud", plain, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			out, err := NewClient(tt.addr, "secret", WithTLS(tt.cfg)).Session(ctx, "s-1")
			if tt.wantErr == "" {
				if err != nil || out.ID != "s-1" {
					t.Fatalf("got %v, %v", out, err)
				}
				return
			}
			if !errs.IsUnavailable(err) {
				t.Fatalf("got %v (kind %q), want unavailable", err, errs.KindOf(err))
			}
			msg := err.Error()
			t.Log(msg)
			if !strings.Contains(msg, tt.wantErr) || !strings.Contains(msg, errs.Host(tt.addr)) || strings.Contains(msg, "\n") {
				t.Fatalf("got %q, want one line naming %s and containing %q", msg, errs.Host(tt.addr), tt.wantErr)
			}
		})
	}
}

func TestServerAndClientTLSFiles(t *testing.T) {
	ca := tlstest.NewCA(t, "files")
	now := time.Now()
	good := ca.Issue(t, "gpud", "127.0.0.1")
	old := ca.IssueValid(t, "old", now.Add(-48*time.Hour), now.Add(-time.Hour), "127.0.0.1")
	notPEM := filepath.Join(t.TempDir(), "ca.txt")
	if err := os.WriteFile(notPEM, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	server := []struct {
		name, cert, key string
		wantKind        errs.Kind // empty: loads
		wantMsg         string
	}{
		{"good", good.CertFile, good.KeyFile, "", ""},
		{"key missing", good.CertFile, "", errs.InvalidArgument, "--tls-cert and --tls-key go together"},
		{"key of another certificate", good.CertFile, old.KeyFile, errs.InvalidArgument, "load --tls-cert"},
		{"expired", old.CertFile, old.KeyFile, errs.FailedPrecondition, "expired at"},
	}
	for _, tt := range server {
		t.Run("server "+tt.name, func(t *testing.T) {
			cfg, err := ServerTLS(tt.cert, tt.key, now)
			if tt.wantKind == "" {
				if err != nil || cfg.MinVersion != tls.VersionTLS13 || len(cfg.Certificates) != 1 {
					t.Fatalf("got %+v, %v", cfg, err)
				}
				return
			}
			if errs.KindOf(err) != tt.wantKind || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got %v (kind %q), want kind %q containing %q", err, errs.KindOf(err), tt.wantKind, tt.wantMsg)
			}
		})
	}

	client := []struct {
		name, file string
		wantMsg    string // empty: loads
	}{
		{"CA bundle", ca.CertFile, ""},
		{"missing file", filepath.Join(t.TempDir(), "none.pem"), "read --tls-ca"},
		{"no PEM in file", notPEM, "holds no PEM certificate"},
	}
	for _, tt := range client {
		t.Run("client "+tt.name, func(t *testing.T) {
			cfg, err := ClientTLS(tt.file, "")
			if tt.wantMsg == "" {
				if err != nil || cfg.RootCAs == nil || cfg.MinVersion != tls.VersionTLS13 {
					t.Fatalf("got %+v, %v", cfg, err)
				}
				return
			}
			if !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("got %v, want invalid argument containing %q", err, tt.wantMsg)
			}
		})
	}
}
