package images

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/store"
)

// hostWith is host with route options of the test's choosing; Dial
// reaches peers with the same token.
func hostWith(t *testing.T, opts RouteOptions) (*store.Store, *control.Client) {
	t.Helper()
	st := openStore(t)
	mux := http.NewServeMux()
	opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	Register(mux, st, opts)
	srv := httptest.NewServer(control.RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return st, control.NewClient(strings.TrimPrefix(srv.URL, "http://"), "tok")
}

// A host asked to push an image sends only what the receiver lacks: a
// receiver holding an earlier image of the session is topped up with the
// changed chunks alone, and one that holds the image is sent nothing.
func TestPushRouteTopsUpAPartialHolder(t *testing.T) {
	ctx := context.Background()
	dial := func(addr string) *control.Client { return control.NewClient(addr, "tok") }
	a, clientA := hostWith(t, RouteOptions{Dial: dial})
	var imported []string // what b reports it gained
	b, clientB := hostWith(t, RouteOptions{Imported: func(_ context.Context, info api.Image) { imported = append(imported, info.ID+" "+info.Session) }})
	pages := imagegen.Pages(5, 8<<20, imagegen.Realistic)
	if _, _, err := Commit(ctx, a, dumpDir(t, pages), Meta{ID: "img-1", Session: "s-p"}); err != nil {
		t.Fatal(err)
	}
	full, err := clientA.PushImage(ctx, "img-1", clientB.Addr())
	if err != nil {
		t.Fatal(err)
	}
	imagegen.Change(6, pages, 0.05, 16)
	src2 := dumpDir(t, pages)
	if _, _, err := Commit(ctx, a, src2, Meta{ID: "img-2", Session: "s-p", Parent: "img-1"}); err != nil {
		t.Fatal(err)
	}
	top, err := clientA.PushImage(ctx, "img-2", clientB.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if top.SentBytes == 0 || top.SentBytes*5 > full.SentBytes || top.AlreadyHeld || top.To != clientB.Addr() {
		t.Fatalf("top-up of a partial holder: %+v; the full push sent %d bytes", top, full.SentBytes)
	}
	out := t.TempDir() + "/out"
	if _, err := Checkout(ctx, b, "img-2", out); err != nil {
		t.Fatal(err)
	}
	sameTree(t, src2, out)
	again, err := clientA.PushImage(ctx, "img-2", clientB.Addr())
	if err != nil || !again.AlreadyHeld || again.SentBytes != 0 {
		t.Fatalf("push to a host that holds the image: %+v, %v", again, err)
	}
	if got := strings.Join(imported, ","); got != "img-1 s-p,img-2 s-p" {
		t.Errorf("b reported importing %q, want img-1 and img-2 once each", got)
	}

	for _, c := range []struct {
		name, id, to string
		kind         errs.Kind
		says         string
	}{
		{"no address", "img-2", "", errs.InvalidArgument, "HOST:PORT"},
		{"not host:port", "img-2", "b-host", errs.InvalidArgument, "HOST:PORT"},
		{"unknown image", "img-nope", clientB.Addr(), errs.NotFound, "img-nope"},
		{"receiver down", "img-2", "127.0.0.1:1", errs.Unavailable, "img-2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := clientA.PushImage(ctx, c.id, c.to)
			if errs.KindOf(err) != c.kind || !strings.Contains(err.Error(), c.says) {
				t.Errorf("push %s to %q: %v (%s), want %s naming %q", c.id, c.to, err, errs.KindOf(err), c.kind, c.says)
			}
		})
	}
	// A host without Dial does not push.
	if _, err := clientB.PushImage(ctx, "img-2", clientA.Addr()); !errs.IsFailedPrecondition(err) {
		t.Errorf("push from a host that does not push: %v", err)
	}
}

// A host refuses to remove an image a session still needs, with its
// reason, and keeps the image.
func TestRemoveRefusedWhileInUse(t *testing.T) {
	ctx := context.Background()
	var removed []string
	st, cl := hostWith(t, RouteOptions{InUse: func(_ context.Context, image string) error {
		if image == "img-u" {
			return errs.New(errs.FailedPrecondition, errs.Image(image), "session s-u is preempted in it on host h")
		}
		return nil
	}, Removed: func(_ context.Context, image string) { removed = append(removed, image) }})
	for _, id := range []string{"img-u", "img-free"} {
		if _, _, err := Commit(ctx, st, dumpDir(t, imagegen.Pages(1, 1<<20, imagegen.Realistic)), Meta{ID: id, Session: "s-u"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.RemoveImage(ctx, "img-u"); !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "s-u") {
		t.Fatalf("remove of an image in use: %v", err)
	}
	if _, err := Stat(ctx, st, "img-u"); err != nil {
		t.Fatalf("refused removal removed it: %v", err)
	}
	if _, err := cl.RemoveImage(ctx, "img-free"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(removed, ","); got != "img-free" {
		t.Errorf("removals reported: %q, want img-free's alone", got)
	}
}
