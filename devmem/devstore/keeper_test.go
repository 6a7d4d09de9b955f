package devstore_test

import (
	"context"
	"testing"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
)

// TestKeeperMirror: a complete save is kept as the session's mirror and
// handed over once; an incomplete one is not kept; Forget drops it.
func TestKeeperMirror(t *testing.T) {
	ctx := context.Background()
	d := newDevice(t)
	tr := devmem.NewTracker()
	k := &devstore.Keeper{Store: openStore(t)}

	f, sv, err := tr.Save(ctx, d, devmem.SaveRequest{All: true})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := devstore.Open(f, sv)
	if err != nil {
		t.Fatal(err)
	}
	k.KeepMirror("s-1", snap)
	if m := k.TakeMirror("s-2"); m != nil {
		t.Fatal("another session's mirror was handed over")
	}
	m := k.TakeMirror("s-1")
	if m != snap {
		t.Fatal("the complete save was not kept as the mirror")
	}
	if k.TakeMirror("s-1") != nil {
		t.Fatal("a mirror was handed over twice")
	}
	k.KeepMirror("s-1", m)
	k.Forget("s-1")
	if k.TakeMirror("s-1") != nil || m.File != nil {
		t.Fatal("Forget kept the mirror open")
	}

	// Only the changed blocks of an incremental save: not a mirror.
	f, sv, err = tr.Save(ctx, d, devmem.SaveRequest{Base: sv.Gen})
	if err != nil {
		t.Fatal(err)
	}
	part, err := devstore.Open(f, sv)
	if err != nil {
		t.Fatal(err)
	}
	if part.Layout.SentCount() == part.Layout.Blocks {
		t.Fatal("an incremental save of an unchanged device sent every block")
	}
	k.KeepMirror("s-1", part)
	if k.TakeMirror("s-1") != nil || part.File != nil {
		t.Fatal("an incomplete save was kept as a mirror")
	}
}

// TestScratch: a memfd made ahead has the size asked for and reads as
// zeros.
func TestScratch(t *testing.T) {
	f, err := devstore.Scratch(3 << 20)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != 3<<20 {
		t.Fatalf("scratch memfd of %d bytes, want %d", st.Size(), 3<<20)
	}
	b := make([]byte, 3<<20)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	for i, c := range b {
		if c != 0 {
			t.Fatalf("byte %d of a new scratch memfd is %#x", i, c)
		}
	}
}

// TestKeeperStash: a complete save of an ended session is handed to a
// restore of the same save once; a restore of another save, or of another
// session, does not get it; an incomplete save is not kept.
func TestKeeperStash(t *testing.T) {
	ctx := context.Background()
	d := newDevice(t)
	tr := devmem.NewTracker()
	k := &devstore.Keeper{Store: openStore(t)}
	save := func(req devmem.SaveRequest) *devstore.Snapshot {
		t.Helper()
		f, sv, err := tr.Save(ctx, d, req)
		if err != nil {
			t.Fatal(err)
		}
		s, err := devstore.Open(f, sv)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	full := save(devmem.SaveRequest{All: true})
	table := &devstore.Table{Layout: full.Layout}
	other := save(devmem.SaveRequest{All: true})
	otherTable := &devstore.Table{Layout: other.Layout}
	other.Close()

	cases := []struct {
		name    string
		session string
		table   *devstore.Table
		want    bool
	}{
		{"another session", "s-2", table, false},
		{"another save of the session", "s-1", otherTable, false},
		{"no device memory in the image", "s-1", nil, false},
		{"the save it is", "s-1", table, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := save(devmem.SaveRequest{All: true})
			s.Layout = full.Layout // the same save, as far as the keeper can tell
			k.Stash("s-1", s)
			got := k.TakeStash(c.session, c.table)
			if (got != nil) != c.want {
				t.Fatalf("TakeStash(%s) = %v, want a stash: %v", c.session, got != nil, c.want)
			}
			if got != nil {
				if got != s {
					t.Fatal("handed over another snapshot than the one stashed")
				}
				if k.TakeStash("s-1", c.table) != nil {
					t.Fatal("a stash was handed over twice")
				}
				got.Close()
				return
			}
			// Refused for another save: dropped, not kept for later.
			if c.session == "s-1" && (s.File != nil || k.TakeStash("s-1", table) != nil) {
				t.Fatal("a stash of another save was kept")
			}
			k.TakeStash("s-1", nil)
		})
	}
	full.Close()

	b := save(devmem.SaveRequest{All: true})
	gen := b.Layout.Gen
	b.Close()
	part := save(devmem.SaveRequest{Base: gen})
	if part.Layout.SentCount() == part.Layout.Blocks {
		t.Fatal("an incremental save of an unchanged device sent every block")
	}
	k.Stash("s-1", part)
	if part.File != nil || k.TakeStash("s-1", &devstore.Table{Layout: part.Layout}) != nil {
		t.Fatal("an incomplete save was stashed")
	}
}
