package images

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/images/imagegen"
)

const commitIndex = "images/commit/index"

// A commit that fails after writing every chunk and before indexing the
// image (a crash there, as far as the store can tell) leaves no image, and
// nothing of it counts as stored: the same commit afterwards stores as
// many bytes as into an empty store. The store checks clean at cleanup.
func TestCommitFailsBeforeIndex(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	src := dumpDir(t, imagegen.Pages(31, 4<<20, imagegen.Realistic))
	boom := errors.New("power cut")
	var fp failpoint.Set
	fp.On(commitIndex, failpoint.Fail(boom))
	if _, _, err := Commit(failpoint.With(ctx, &fp), st, src, Meta{ID: "img-cut", Session: "s-f"}); !errors.Is(err, boom) {
		t.Fatalf("commit with the failpoint armed: %v", err)
	}
	if fp.Hits(commitIndex) != 1 {
		t.Fatalf("failpoint %s reached %d times, want 1", commitIndex, fp.Hits(commitIndex))
	}
	if l, err := List(ctx, st); err != nil || len(l) != 0 {
		t.Fatalf("images after the failed commit: %v, %v", l, err)
	}
	if _, err := GC(ctx, st); err != nil {
		t.Fatal(err)
	}

	fp.Off(commitIndex)
	m, stats, err := Commit(failpoint.With(ctx, &fp), st, src, Meta{ID: "img-cut", Session: "s-f"})
	if err != nil {
		t.Fatal(err)
	}
	_, fresh, err := Commit(ctx, openStore(t), src, Meta{ID: "img-cut", Session: "s-f"})
	if err != nil {
		t.Fatal(err)
	}
	if stats.StoredBytes != fresh.StoredBytes || stats.NewChunks != fresh.NewChunks {
		t.Errorf("after a failed commit: %d bytes, %d chunks new; into an empty store: %d, %d",
			stats.StoredBytes, stats.NewChunks, fresh.StoredBytes, fresh.NewChunks)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Checkout(ctx, st, m.ID, out); err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, out)
}

// The window between a commit's chunk writes and its index update: the
// only image using the chunks it shares is removed and gc runs right
// there. gc must take only the chunks the commit does not use (its ingest
// leases the rest), so the image it then indexes checks out and verifies.
func TestGCInsideTheCommitWindow(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	pages := imagegen.Pages(32, 4<<20, imagegen.Realistic)
	srcA := dumpDir(t, pages)
	if _, _, err := Commit(ctx, st, srcA, Meta{ID: "img-a", Session: "s-w"}); err != nil {
		t.Fatal(err)
	}
	imagegen.Change(33, pages, 0.05, 16)
	srcB := dumpDir(t, pages)

	var fp failpoint.Set
	gate := failpoint.NewGate()
	fp.On(commitIndex, gate.Hook)
	type result struct {
		m     *Manifest
		stats Stats
		err   error
	}
	done := make(chan result, 1)
	go func() {
		m, stats, err := Commit(failpoint.With(ctx, &fp), st, srcB, Meta{ID: "img-b", Session: "s-w", Parent: "img-a"})
		done <- result{m, stats, err}
	}()
	select {
	case <-gate.Reached():
	case r := <-done:
		t.Fatalf("commit finished without reaching %s: %v", commitIndex, r.err)
	case <-time.After(time.Minute):
		t.Fatal("commit never reached the index step")
	}
	if err := Delete(ctx, st, "img-a"); err != nil {
		t.Fatal(err)
	}
	gc, err := GC(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	gate.Release()
	r := <-done
	if r.err != nil {
		t.Fatalf("commit after gc in its window: %v", r.err)
	}
	if r.stats.NewChunks >= r.stats.Chunks {
		t.Fatalf("img-b shares no chunks with img-a (%d of %d new): the test proves nothing", r.stats.NewChunks, r.stats.Chunks)
	}
	if gc.ChunksRemoved == 0 {
		t.Errorf("gc in the window removed nothing, not even the chunks only img-a used")
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Checkout(ctx, st, "img-b", out); err != nil {
		t.Fatal(err)
	}
	sameTree(t, srcB, out)
	if rep, err := Verify(ctx, st, "", nil); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v, %v", rep, err)
	}
}
