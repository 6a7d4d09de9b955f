package restore

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/store"
)

// TestAdoptThenCommit: a session adopted from its staging with no image
// keeps what it was reloaded from until its image arrives; an image of
// another checkpoint is refused, and the right one makes that save the
// session's base here and the reloaded copy its mirror.
func TestAdoptThenCommit(t *testing.T) {
	ctx := context.Background()
	st, err := store.Open(ctx, t.TempDir(), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const id, nonce = "s-0123456789ab", "nonce-1"
	l := &devmem.Layout{Version: devmem.LayoutVersion, Gen: 77, Block: 4096, Size: 8192, Blocks: 2,
		Regions: []devmem.Region{{MemRegion: backend.MemRegion{ID: 1 << 20, Size: 8192}}}, Sent: []byte{3}}
	snap, err := devstore.Create(l)
	if err != nil {
		t.Fatal(err)
	}
	for i := range snap.Data[:4096] {
		snap.Data[i] = byte(i)
	}
	commit := func(imgID, n string) *devstore.Table {
		files, err := devstore.FilesAll(snap)
		if err != nil {
			t.Fatal(err)
		}
		m, _, err := images.CommitWith(ctx, st, t.TempDir(), images.Meta{ID: imgID, Session: id, Backend: "emulated", AttachNonce: n}, files)
		if err != nil {
			t.Fatal(err)
		}
		tab, err := devstore.FromManifest(ctx, st, m)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	tab := commit("img-0123456789ab", nonce)
	commit("img-0123456789ac", "nonce-2")
	r := &Restorer{Mem: &devstore.Keeper{Store: st}}
	r.prepared = map[string]*prepared{id: {
		res:   &Result{Session: id, Meta: images.Meta{Session: id, AttachNonce: nonce}, mem: snap, table: tab},
		timer: time.AfterFunc(time.Hour, func() {}),
	}}
	res, err := r.AdoptPrepared(ctx, id, nonce, tab.Gen(), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if res.mem != nil || r.Mem.Base(ctx, id, "") != nil {
		t.Fatal("the adopted save became the session's base before its image arrived")
	}
	if err := r.CommitAdopted(ctx, id, "nonce-2", "img-0123456789ac"); err == nil {
		t.Error("an image of another checkpoint was committed as the session's base")
	}
	if err := r.CommitAdopted(ctx, id, nonce, "img-0123456789ab"); err != nil {
		t.Fatal(err)
	}
	if b := r.Mem.Base(ctx, id, ""); b == nil || b.Gen() != tab.Gen() {
		t.Errorf("the session's base after the commit: %v, want save %x", b, tab.Gen())
	}
	m := r.Mem.TakeMirror(id)
	if m != snap {
		t.Error("the reloaded copy did not become the session's mirror")
	}
	m.Close()
	if err := r.CommitAdopted(ctx, id, nonce, "img-0123456789ab"); err == nil {
		t.Error("a second commit of the same session was taken")
	}
}
