package api

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The routes are the wire contract: these literals are what clients of
// every version send, so a change here is a change of API.
func TestRoutesAreTheContract(t *testing.T) {
	contract := map[string]string{
		RouteHost:           "GET /v1/host",
		RouteSessions:       "GET /v1/sessions",
		RouteSession:        "GET /v1/sessions/{id}",
		RouteCheckpoint:     "POST /v1/sessions/{id}/checkpoint",
		RouteMigrate:        "POST /v1/sessions/{id}/migrate",
		RouteImages:         "GET /v1/images",
		RouteImage:          "GET /v1/images/{id}",
		RouteRemoveImage:    "DELETE /v1/images/{id}",
		RouteRestore:        "POST /v1/images/{id}/restore",
		RouteExport:         "GET /v1/images/{id}/export",
		RouteImport:         "POST /v1/images/import",
		RouteVerify:         "POST /v1/images/verify",
		RouteGC:             "POST /v1/images/gc",
		RouteMissingChunks:  "POST /v1/chunks/missing",
		RoutePutChunks:      "PUT /v1/chunks",
		RouteMetrics:        "GET /metrics",
		RoutePreempt:        "POST /v1/sessions/{id}/preempt",
		RouteResume:         "POST /v1/sessions/{id}/resume",
		RouteDropStaged:     "DELETE /v1/chunks/staged/{id}",
		RouteStageTable:     "PUT /v1/chunks/staged/{id}",
		RouteImageChunks:    "GET /v1/images/{id}/chunks",
		RoutePushImage:      "POST /v1/images/{id}/push",
		RoutePrepareRestore: "PUT /v1/chunks/staged/{id}/restore",
		RouteAdoptPrepared:  "POST /v1/chunks/staged/{id}/adopt",
	}
	for got, want := range contract {
		if got != want {
			t.Errorf("route %q, want %q", got, want)
		}
	}
	// Routes lists each route once, and all of them.
	seen := map[string]bool{}
	for _, r := range Routes() {
		if _, ok := contract[r]; !ok || seen[r] {
			t.Errorf("Routes() has %q twice or out of the contract", r)
		}
		seen[r] = true
	}
	if len(seen) != len(contract) {
		t.Errorf("Routes() has %d routes, the contract %d", len(seen), len(contract))
	}
}

// Every path a client builds reaches its route on a ServeMux that has all
// of them, with the id unescaped intact, whatever the id holds.
func TestPathsReachTheirRoutes(t *testing.T) {
	all := Routes()
	mux := http.NewServeMux()
	for _, p := range all {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, r.Pattern+"|"+r.PathValue(IDWildcard))
			if r.URL.Query().Get(ProgressParam) == "1" {
				io.WriteString(w, "|progress")
			}
		})
	}
	srv := httptest.NewServer(mux)
	defer srv.Close()
	// No redirects: a path the mux had to clean would show up as one.
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(t *testing.T, method, path string) string {
		t.Helper()
		req, err := http.NewRequest(method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s %s", method, path, resp.Status, b)
		}
		return string(b)
	}

	fixed := []struct{ route, path string }{
		{RouteHost, HostPath}, {RouteSessions, SessionsPath}, {RouteImages, ImagesPath}, {RouteImport, ImportPath},
		{RouteVerify, VerifyPath}, {RouteGC, GCPath}, {RouteMissingChunks, MissingChunksPath}, {RoutePutChunks, ChunksPath},
		{RouteMetrics, MetricsPath},
	}
	for _, f := range fixed {
		method, _, _ := strings.Cut(f.route, " ")
		if got := get(t, method, f.path); got != f.route+"|" {
			t.Errorf("%s reached %q, want %q", f.path, got, f.route)
		}
	}
	if got := get(t, http.MethodPost, VerifyProgressPath); got != RouteVerify+"||progress" {
		t.Errorf("%s reached %q", VerifyProgressPath, got)
	}

	ids := []string{"s-0123456789ab", "img-0123456789ab", "a b", "a/b", "..", ".", "...", "../x", "%2F", "50%", "q?x=1", "h#f", "ü"}
	builders := []struct {
		route string
		path  func(string) string
	}{
		{RouteSession, SessionPath}, {RouteCheckpoint, SessionCheckpointPath}, {RouteMigrate, SessionMigratePath},
		{RouteImage, ImagePath}, {RouteRemoveImage, ImagePath}, {RouteRestore, ImageRestorePath}, {RouteExport, ImageExportPath},
		{RouteDropStaged, StagedChunksSessionPath}, {RouteStageTable, StagedChunksSessionPath},
		{RouteImageChunks, ImageChunksPath}, {RoutePushImage, ImagePushPath},
	}
	for _, b := range builders {
		method, _, _ := strings.Cut(b.route, " ")
		for _, id := range ids {
			if got, want := get(t, method, b.path(id)), b.route+"|"+id; got != want {
				t.Errorf("%s %s (id %q) reached %q, want %q", method, b.path(id), id, got, want)
			}
		}
	}
}
