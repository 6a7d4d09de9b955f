package images

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/store"
	"github.com/gpuctl/gpuctl/tenant"
)

// tenantSet makes a host token "host" and tenants alice and bob (tokens
// "alice-tok", "bob-tok").
func tenantSet(t *testing.T) *tenant.Set {
	t.Helper()
	dir := t.TempDir()
	var entries []string
	for _, name := range []string{"alice", "bob"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(name+"-tok\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, `{"name":"`+name+`","token_file":"`+p+`"}`)
	}
	file := filepath.Join(dir, "tenants.json")
	if err := os.WriteFile(file, []byte("["+strings.Join(entries, ",")+"]"), 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := tenant.Load(file, "host")
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// tenantHost is a store behind the image routes with gpud's
// authentication; known are the tenants it knows (nil: none).
func tenantHost(t *testing.T, set *tenant.Set, known func(string) bool) (*store.Store, func(token string) *control.Client) {
	t.Helper()
	st := openStore(t)
	mux := http.NewServeMux()
	Register(mux, st, RouteOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Known: known})
	srv := httptest.NewServer(control.Authenticate(set, nil, mux))
	t.Cleanup(srv.Close)
	return st, func(tok string) *control.Client {
		return control.NewClient(strings.TrimPrefix(srv.URL, "http://"), tok)
	}
}

func TestTenantImages(t *testing.T) {
	ctx := context.Background()
	set := tenantSet(t)
	st, as := tenantHost(t, set, set.Known)
	admin, alice, bob := as("host"), as("alice-tok"), as("bob-tok")
	pages := imagegen.Pages(3, 1<<20, imagegen.Realistic)
	for _, m := range []Meta{{ID: "img-a", Session: "s-a", Tenant: "alice"}, {ID: "img-b", Session: "s-b", Tenant: "bob"}, {ID: "img-h", Session: "s-h"}} {
		if _, _, err := Commit(ctx, st, dumpDir(t, pages), m); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(cl *control.Client) string {
		list, err := cl.Images(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, in := range list {
			out = append(out, in.ID+":"+in.Tenant)
		}
		return strings.Join(out, " ")
	}
	for cl, want := range map[*control.Client]string{admin: "img-a:alice img-b:bob img-h:", alice: "img-a:alice", bob: "img-b:bob"} {
		if got := ids(cl); got != want {
			t.Errorf("listing %q, want %q", got, want)
		}
	}

	// To alice, bob's image and the administrator's are as absent as one
	// that never existed: the same kind and the same words.
	ops := []struct {
		name string
		do   func(id string) error
	}{
		{"inspect", func(id string) error { _, err := alice.Image(ctx, id); return err }},
		{"remove", func(id string) error { _, err := alice.RemoveImage(ctx, id); return err }},
		{"export", func(id string) error { _, err := alice.Export(ctx, id, io.Discard, nil); return err }},
		{"verify", func(id string) error { _, err := alice.Verify(ctx, api.VerifyRequest{ID: id}, nil); return err }},
		{"verify with progress", func(id string) error {
			_, err := alice.Verify(ctx, api.VerifyRequest{ID: id}, func(int64, int64) {})
			return err
		}},
	}
	for _, op := range ops {
		missing := op.do("img-zz")
		if !errs.IsNotFound(missing) {
			t.Fatalf("%s of a missing image: %v", op.name, missing)
		}
		for _, other := range []string{"img-b", "img-h"} {
			err := op.do(other)
			if !errs.IsNotFound(err) || strings.ReplaceAll(err.Error(), other, "img-zz") != missing.Error() {
				t.Errorf("%s of %s as alice: %v; of a missing image: %v", op.name, other, err, missing)
			}
		}
	}
	if got := ids(admin); got != "img-a:alice img-b:bob img-h:" {
		t.Fatalf("alice's attempts changed the store: %q", got)
	}
	// Restoring reads the image through Checkout, which answers the same.
	asAlice := tenant.NewContext(ctx, tenant.Principal{Tenant: "alice"})
	if _, err := Checkout(asAlice, st, "img-b", t.TempDir()); !errs.IsNotFound(err) {
		t.Errorf("checkout of bob's image as alice: %v", err)
	}
	if m, err := Checkout(asAlice, st, "img-a", t.TempDir()); err != nil || m.Tenant != "alice" {
		t.Errorf("checkout of alice's image as alice: %v", err)
	}

	// Verifying everything covers alice's own images, and not the
	// host-wide index.
	rep, err := alice.Verify(ctx, api.VerifyRequest{}, nil)
	if err != nil || rep.Images != 1 || !rep.OK() {
		t.Fatalf("alice's verify: %+v %v", rep, err)
	}
	if rep, err := admin.Verify(ctx, api.VerifyRequest{}, nil); err != nil || rep.Images != 3 {
		t.Fatalf("the administrator's verify: %+v %v", rep, err)
	}

	// Host-wide operations are the administrator's.
	if _, err := alice.GC(ctx); !errs.IsPermissionDenied(err) || !strings.Contains(err.Error(), "garbage collection") {
		t.Errorf("gc as alice: %v", err)
	}
	if _, err := admin.GC(ctx); err != nil {
		t.Errorf("gc as the administrator: %v", err)
	}
	if _, err := alice.MissingChunks(ctx, []api.Digest{{1}}); !errs.IsPermissionDenied(err) {
		t.Errorf("chunk question as alice: %v", err)
	}
	if _, err := alice.PutChunks(ctx, bytes.NewReader(nil)); !errs.IsPermissionDenied(err) {
		t.Errorf("chunk upload as alice: %v", err)
	}

	// Export and import keep the owner; a tenant imports only its own.
	var fileA, fileB bytes.Buffer
	if _, err := alice.Export(ctx, "img-a", &fileA, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Export(ctx, "img-b", &fileB, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := alice.RemoveImage(ctx, "img-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Import(ctx, bytes.NewReader(fileA.Bytes()), -1, nil); !errs.IsPermissionDenied(err) || !strings.Contains(err.Error(), `belongs to tenant "alice"`) {
		t.Errorf("bob importing alice's image: %v", err)
	}
	imp, err := alice.Import(ctx, bytes.NewReader(fileA.Bytes()), -1, nil)
	if err != nil || imp.ID != "img-a" || imp.Tenant != "alice" {
		t.Fatalf("alice importing her image: %+v %v", imp, err)
	}

	// A host that does not know the owner refuses the image, whoever
	// brings it; one that does keeps its owner.
	_, asNone := tenantHost(t, set, nil)
	if _, err := asNone("host").Import(ctx, bytes.NewReader(fileB.Bytes()), -1, nil); !errs.IsFailedPrecondition(err) ||
		!strings.Contains(err.Error(), `tenant "bob", which this host does not know`) {
		t.Errorf("import of bob's image where bob is unknown: %v", err)
	}
	_, asOther := tenantHost(t, set, set.Known)
	if imp, err := asOther("host").Import(ctx, bytes.NewReader(fileB.Bytes()), -1, nil); err != nil || imp.Tenant != "bob" {
		t.Errorf("the administrator importing bob's image: %+v %v", imp, err)
	}
}
