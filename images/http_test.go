package images

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/remoting/backend"
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
	m, _, err := Commit(ctx, st, src, Meta{ID: "img-r", Session: "s-r", AttachNonce: "nn", Epoch: 4, GPUs: []backend.GPU{{Name: "H200", UUID: "GPU-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	list, err := c.Images(ctx)
	if err != nil || len(list) != 1 || list[0].ID != "img-r" || list[0].Session != "s-r" || list[0].Bytes != m.Bytes() {
		t.Fatalf("list: %+v %v", list, err)
	}
	d, err := c.Image(ctx, "img-r")
	if err != nil || d.AttachNonce != "nn" || d.Epoch != 4 || len(d.FileList) != len(m.Files) || len(d.GPUs) != 1 || d.GPUs[0].Name != "H200" || d.Bytes != m.Bytes() {
		t.Fatalf("inspect: %+v %v", d, err)
	}
	rep, err := c.Verify(ctx, api.VerifyRequest{ID: "img-r"}, nil)
	if err != nil || !rep.OK() || rep.Chunks == 0 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
	var file bytes.Buffer
	if _, err := c.Export(ctx, "img-r", &file, nil); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		call func() error
		want errs.Kind
	}{
		{"inspect missing", func() error { _, err := c.Image(ctx, "img-none"); return err }, errs.NotFound},
		{"bad id", func() error { _, err := c.Image(ctx, "../x"); return err }, errs.InvalidArgument},
		{"dots", func() error { _, err := c.Image(ctx, ".."); return err }, errs.InvalidArgument},
		{"export missing", func() error { _, err := c.Export(ctx, "img-none", io.Discard, nil); return err }, errs.NotFound},
		{"delete missing", func() error { _, err := c.RemoveImage(ctx, "img-none"); return err }, errs.NotFound},
		{"verify missing", func() error { _, err := c.Verify(ctx, api.VerifyRequest{ID: "img-none"}, nil); return err }, errs.NotFound},
		{"missing with junk", func() error {
			return rawPost(ctx, c.Addr(), api.MissingChunksPath, `{"digests":["zz"]}`)
		}, errs.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); errs.KindOf(err) != tt.want {
				t.Fatalf("got %v, want kind %s", err, tt.want)
			}
		})
	}
	del, err := c.RemoveImage(ctx, "img-r")
	if err != nil || !del.Deleted || del.Session != "s-r" {
		t.Fatalf("delete: %+v %v", del, err)
	}
	gc, err := c.GC(ctx)
	if err != nil || gc.ChunksRemoved == 0 {
		t.Fatalf("gc: %+v %v", gc, err)
	}
	imp, err := c.Import(ctx, bytes.NewReader(file.Bytes()), int64(file.Len()), nil)
	if err != nil || imp.ID != "img-r" || imp.StoredBytes == 0 {
		t.Fatalf("import: %+v %v", imp, err)
	}
	if _, err := c.RemoveImage(ctx, "img-r"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Import(ctx, bytes.NewReader(file.Bytes()[:file.Len()-9]), -1, nil); !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("truncated import: %v", err)
	}

	// Chunks ahead of their manifest.
	var chunkStream bytes.Buffer
	refs, _ := m.Refs()
	if _, err := WriteChunks(ctx, st, refs[:3], &chunkStream); err != nil {
		t.Fatal(err)
	}
	_, c2 := host(t)
	put, err := c2.PutChunks(ctx, &chunkStream)
	if err != nil || put.Chunks != 3 {
		t.Fatalf("put chunks: %+v %v", put, err)
	}
	miss, err := c2.MissingChunks(ctx, apiDigests(refs))
	if err != nil || len(miss) != len(refs)-3 {
		t.Fatalf("missing after put: %d of %d, %v", len(miss), len(refs), err)
	}
	for _, d := range miss {
		if slices.Contains(refs[:3], store.Digest(d)) {
			t.Fatalf("chunk %s was put but is reported missing", d)
		}
	}
}

// rawPost sends a body no typed call would, and returns the error the
// route answers with.
func rawPost(ctx context.Context, addr, path, body string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+path, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil || resp.StatusCode == http.StatusOK {
		return fmt.Errorf("%s: %v", resp.Status, err)
	}
	return eb.Err()
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
	var announced int64
	n, err := c.Export(ctx, "img-s", io.Discard, func(_, total int64) { announced = total })
	if err != nil || n != want || announced != want {
		t.Fatalf("export: %d bytes, Content-Length %d, planned %d (%v)", n, announced, want, err)
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
