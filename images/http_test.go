package images

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/store"
)

// host is a store behind the image routes, as gpud serves them.
func host(t *testing.T) (*store.Store, *control.Client) {
	t.Helper()
	st := openStore(t)
	mux := http.NewServeMux()
	Register(mux, st, RouteOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	srv := httptest.NewServer(control.RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return st, control.NewClient(strings.TrimPrefix(srv.URL, "http://"), "tok")
}

func TestPushSendsOnlyWhatThePeerLacks(t *testing.T) {
	ctx := context.Background()
	a, _ := host(t)
	b, clientB := host(t)
	pages := imagegen.Pages(5, 8<<20, imagegen.Realistic)
	src1 := dumpDir(t, pages)
	m1, s1, err := Commit(ctx, a, src1, Meta{ID: "img-1", Session: "s-m"})
	if err != nil {
		t.Fatal(err)
	}
	sent1, err := Push(ctx, a, m1.ID, clientB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sent1 < s1.StoredBytes {
		t.Fatalf("first push sent %d bytes, image has %d stored", sent1, s1.StoredBytes)
	}
	imagegen.Change(6, pages, 0.05, 16)
	src2 := dumpDir(t, pages)
	m2, _, err := Commit(ctx, a, src2, Meta{ID: "img-2", Session: "s-m", Parent: m1.ID})
	if err != nil {
		t.Fatal(err)
	}
	sent2, err := Push(ctx, a, m2.ID, clientB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sent2*5 > sent1 {
		t.Fatalf("second push sent %d bytes, first %d: dedup is not working", sent2, sent1)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Checkout(ctx, b, m2.ID, out); err != nil {
		t.Fatal(err)
	}
	sameTree(t, src2, out)
	if _, err := Push(ctx, a, m2.ID, clientB, nil); !errs.IsAlreadyExists(err) {
		t.Fatalf("pushing twice: %v", err)
	}
}

func TestRoutes(t *testing.T) {
	ctx := context.Background()
	st, c := host(t)
	src := dumpDir(t, imagegen.Pages(8, 1<<20, imagegen.Realistic))
	m, _, err := Commit(ctx, st, src, Meta{ID: "img-r", Session: "s-r", AttachNonce: "nn"})
	if err != nil {
		t.Fatal(err)
	}
	var list []Info
	if err := c.Do(ctx, "GET", "/v1/images", nil, &list); err != nil || len(list) != 1 || list[0].ID != "img-r" || list[0].Session != "s-r" || list[0].Bytes != m.Bytes() {
		t.Fatalf("list: %+v %v", list, err)
	}
	var d Detail
	if err := c.Do(ctx, "GET", "/v1/images/img-r", nil, &d); err != nil || d.AttachNonce != "nn" || len(d.FileList) != len(m.Files) {
		t.Fatalf("inspect: %+v %v", d, err)
	}
	var rep Report
	if err := c.Do(ctx, "POST", "/v1/images/verify", VerifyRequest{ID: "img-r"}, &rep); err != nil || !rep.OK() || rep.Chunks == 0 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	resp, err := c.Stream(ctx, "GET", "/v1/images/img-r/export", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	file, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	tests := []struct {
		name, method, path string
		body               any
		want               errs.Kind
	}{
		{"inspect missing", "GET", "/v1/images/img-none", nil, errs.NotFound},
		{"bad id", "GET", "/v1/images/..%2Fx", nil, errs.InvalidArgument},
		{"export missing", "GET", "/v1/images/img-none/export", nil, errs.NotFound},
		{"delete missing", "DELETE", "/v1/images/img-none", nil, errs.NotFound},
		{"verify missing", "POST", "/v1/images/verify", VerifyRequest{ID: "img-none"}, errs.NotFound},
		{"missing with junk", "POST", "/v1/chunks/missing", map[string]any{"digests": []string{"zz"}}, errs.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := c.Do(ctx, tt.method, tt.path, tt.body, nil); errs.KindOf(err) != tt.want {
				t.Fatalf("got %v, want kind %s", err, tt.want)
			}
		})
	}
	var del DeleteReply
	if err := c.Do(ctx, "DELETE", "/v1/images/img-r", nil, &del); err != nil || !del.Deleted || del.Session != "s-r" {
		t.Fatalf("delete: %+v %v", del, err)
	}
	var gc store.GCStats
	if err := c.Do(ctx, "POST", "/v1/images/gc", nil, &gc); err != nil || gc.ChunksRemoved == 0 {
		t.Fatalf("gc: %+v %v", gc, err)
	}
	resp, err = c.Stream(ctx, "POST", "/v1/images/import", bytes.NewReader(file), "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if err := c.Do(ctx, "DELETE", "/v1/images/img-r", nil, nil); err != nil {
		t.Fatal(err)
	}
	resp, err = c.Stream(ctx, "POST", "/v1/images/import", bytes.NewReader(file[:len(file)-9]), "application/octet-stream")
	if !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated import: %v", err)
	}
	_ = resp

	// Chunks ahead of their manifest.
	var chunkStream bytes.Buffer
	refs, _ := m.Refs()
	if _, err := WriteChunks(ctx, st, refs[:3], &chunkStream); err != nil {
		t.Fatal(err)
	}
	_, c2 := host(t)
	resp, err = c2.Stream(ctx, "PUT", "/v1/chunks", &chunkStream, "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	var miss MissingReply
	if err := c2.Do(ctx, "POST", "/v1/chunks/missing", MissingRequest{Digests: refs}, &miss); err != nil || len(miss.Missing) != len(refs)-3 {
		t.Fatalf("missing after put: %d of %d, %v", len(miss.Missing), len(refs), err)
	}
}

func TestExportSizeIsExact(t *testing.T) {
	ctx := context.Background()
	st, c := host(t)
	src := dumpDir(t, imagegen.Pages(11, 2<<20, imagegen.Realistic))
	m, _, err := Commit(ctx, st, src, Meta{ID: "img-s", Session: "s-s"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := ExportSize(ctx, st, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Stream(ctx, "GET", "/v1/images/img-s/export", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || int64(len(b)) != want || resp.ContentLength != want {
		t.Fatalf("export: %d bytes, Content-Length %d, planned %d (%v)", len(b), resp.ContentLength, want, err)
	}
}

// The streamed verify a terminal gets: progress lines, then the report or
// the error, through the client.
func TestVerifyWithProgress(t *testing.T) {
	ctx := context.Background()
	st, c := host(t)
	src := dumpDir(t, imagegen.Pages(12, 1<<20, imagegen.Realistic))
	if _, _, err := Commit(ctx, st, src, Meta{ID: "img-p", Session: "s-p"}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id      string
		wantErr errs.Kind
	}{{"img-p", ""}, {"", ""}, {"img-gone", errs.NotFound}, {"../x", errs.InvalidArgument}} {
		var last, total int64
		rep, err := c.Verify(ctx, api.VerifyRequest{ID: tt.id}, func(done, t int64) { last, total = done, t })
		if tt.wantErr != "" {
			if errs.KindOf(err) != tt.wantErr {
				t.Fatalf("%q: got %v, want %s", tt.id, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !rep.OK() || rep.Chunks == 0 || rep.Images != 1 {
			t.Fatalf("%q: %+v %v", tt.id, rep, err)
		}
		if last > total {
			t.Fatalf("%q: progress %d of %d", tt.id, last, total)
		}
	}
}
