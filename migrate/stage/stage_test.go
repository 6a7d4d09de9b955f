package stage

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/store"
)

func digest(b byte) store.Digest {
	var d store.Digest
	d[0] = b
	return d
}

func TestKeepTakeRelease(t *testing.T) {
	s := &Stager{Max: 3 << 10}
	keep := s.Keep("s-0123456789ab")
	a := bytes.Repeat([]byte{1}, 1<<10)
	keep(digest(1), a)
	a[0] = 9 // the stager copied it
	keep(digest(1), a)
	keep(digest(2), bytes.Repeat([]byte{2}, 1<<10))
	keep(digest(3), bytes.Repeat([]byte{3}, 2<<10)) // over the bound
	if got := s.Used(); got != 2<<10 {
		t.Fatalf("used %d bytes, want %d", got, 2<<10)
	}
	if s.Keep("not a session") != nil {
		t.Error("a malformed session id got a staging")
	}
	g := s.Take("s-0123456789ab")
	if g == nil {
		t.Fatal("nothing to take")
	}
	if s.Take("s-0123456789ab") != nil {
		t.Error("taken twice")
	}
	_, n, b, skipped := g.Stats()
	if n != 2 || b != 2<<10 || skipped != 1 {
		t.Errorf("stats %d chunks, %d bytes, %d skipped; want 2, %d, 1", n, b, skipped, 2<<10)
	}
	if got := g.Get(digest(1)); len(got) != 1<<10 || got[0] != 1 {
		t.Errorf("chunk 1 reads %d bytes starting %v", len(got), got[:1])
	}
	if g.Get(digest(3)) != nil {
		t.Error("the chunk over the bound was staged")
	}
	keep(digest(4), []byte{4}) // a late chunk for a taken group
	if g.Get(digest(4)) != nil {
		t.Error("a taken group took another chunk")
	}
	g.Release()
	g.Release()
	if got := s.Used(); got != 0 {
		t.Errorf("after release %d bytes staged, want 0", got)
	}
	var nilGroup *Group
	nilGroup.Release()
	if nilGroup.Get(digest(1)) != nil {
		t.Error("a nil group holds a chunk")
	}
}

func TestZeroBoundStagesNothing(t *testing.T) {
	s := &Stager{}
	s.Keep("s-0123456789ab")(digest(1), []byte{1})
	g := s.Take("s-0123456789ab")
	defer g.Release()
	if _, n, _, skipped := g.Stats(); n != 0 || skipped != 1 {
		t.Errorf("%d chunks staged, %d skipped; want 0 and 1", n, skipped)
	}
}

func TestIdleStagingIsDropped(t *testing.T) {
	s := &Stager{Max: 1 << 20, Idle: 50 * time.Millisecond}
	s.Keep("s-0123456789ab")(digest(1), []byte{1, 2, 3})
	deadline := time.Now().Add(5 * time.Second)
	for s.Used() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d bytes still staged after the idle time", s.Used())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if s.Take("s-0123456789ab") != nil {
		t.Error("an expired staging could still be taken")
	}
}

func TestDropRoute(t *testing.T) {
	s := &Stager{Max: 1 << 20}
	mux := http.NewServeMux()
	s.Register(mux)
	s.Keep("s-0123456789ab")(digest(1), []byte{1})
	for _, tc := range []struct {
		path string
		code int
		body string
	}{
		{api.StagedChunksSessionPath("s-0123456789ab"), http.StatusOK, `{"dropped":true}`},
		{api.StagedChunksSessionPath("s-0123456789ab"), http.StatusOK, `{"dropped":false}`},
		{api.StagedChunksSessionPath("bad id"), http.StatusBadRequest, ""},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, tc.path, nil))
		if rec.Code != tc.code {
			t.Errorf("DELETE %s: status %d, want %d (%s)", tc.path, rec.Code, tc.code, rec.Body)
		}
		if tc.body != "" && !bytes.Contains(rec.Body.Bytes(), []byte(tc.body)) {
			t.Errorf("DELETE %s: body %s, want %s", tc.path, rec.Body, tc.body)
		}
	}
	if s.Used() != 0 {
		t.Errorf("%d bytes staged after the drop", s.Used())
	}
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// table is four blocks of 4 KiB in two regions, with the given contents
// (nil for a zero block), each put into st.
func table(t *testing.T, st *store.Store, blocks ...[]byte) *devstore.Table {
	t.Helper()
	const bs = 4 << 10
	l := &devmem.Layout{Version: devmem.LayoutVersion, Gen: 7, Block: bs, Size: 4 * bs, Blocks: 4,
		Regions: []devmem.Region{{MemRegion: backend.MemRegion{ID: 1 << 20, Size: 2 * bs}}, {MemRegion: backend.MemRegion{ID: 2 << 20, Size: 2 * bs}, Off: 2 * bs}}}
	l.Sent = []byte{0x0f}
	tab := &devstore.Table{Layout: l}
	in := st.NewIngest()
	for _, b := range blocks {
		c := images.Chunk{Size: bs, Zero: b == nil}
		if b != nil {
			d, _, err := in.Put(context.Background(), b)
			if err != nil {
				t.Fatal(err)
			}
			c.Digest = d
		}
		tab.Chunks = append(tab.Chunks, c)
	}
	if err := in.Commit(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	return tab
}

// TestTable: chunks land in the blocks the table gives them; blocks the
// store already holds are read in the background; the restore's table
// reads only its changed block from the store; the file it gets holds
// the image's bytes.
func TestTable(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	blk := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4<<10) }
	// Round 1: blocks 1 and 3 are already in the store, block 0 comes as
	// a chunk, block 2 is zero.
	round1 := table(t, st, blk(1), blk(2), nil, blk(4))
	s := &Stager{Store: st, Max: 1 << 20}
	const id = "s-0123456789ab"
	// The target lacks block 0's chunk: take it out of the store view by
	// staging a table whose block 0 is new content.
	fresh := blk(9)
	round1.Chunks[0].Digest = store.Sum(fresh)
	if err := s.Table(ctx, id, round1, false); err != nil {
		t.Fatal(err)
	}
	s.Keep(id)(round1.Chunks[0].Digest, fresh)
	// The freeze's image: block 3 changed since the round.
	img := table(t, st, fresh, blk(2), nil, blk(5))
	g := s.Take(id)
	if blocks, _, _, _ := g.Stats(); blocks != 4 {
		t.Fatalf("%d of 4 blocks staged", blocks)
	}
	snap, hits, err := g.Load(ctx, st, img)
	g.Release()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if hits != 3 {
		t.Errorf("%d blocks came from the staging, want 3", hits)
	}
	want := slices.Concat(fresh, blk(2), make([]byte, 4<<10), blk(5))
	if !bytes.Equal(snap.Data, want) {
		t.Error("the staged file does not hold the image's bytes")
	}
	if snap.Layout.Gen != img.Layout.Gen || s.Used() != 0 {
		t.Errorf("layout gen %x (want %x); %d bytes still staged", snap.Layout.Gen, img.Layout.Gen, s.Used())
	}
}

// A table over the bound is not staged, and says so in the log: the
// restore then reads the whole session from the store.
func TestTableOverTheBound(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	blk := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4<<10) }
	round := table(t, st, blk(1), blk(2), nil, blk(3))
	var logged bytes.Buffer
	s := &Stager{Store: st, Max: round.Layout.Size - 1, Log: slog.New(slog.NewTextHandler(&logged, nil))}
	const id = "s-0123456789ab"
	if err := s.Table(ctx, id, round, false); err != nil {
		t.Fatal(err)
	}
	g := s.Take(id)
	defer g.Release()
	if blocks, _, _, skipped := g.Stats(); blocks != 0 || skipped != 1 || s.Used() != 0 {
		t.Fatalf("over the bound: %d blocks staged, %d skipped, %d bytes used; want 0, 1, 0", blocks, skipped, s.Used())
	}
	if !strings.Contains(logged.String(), "over the staging bound") || !strings.Contains(logged.String(), id) {
		t.Errorf("log %q does not say the session was not staged", logged.String())
	}
}

func TestDefaultMaxIsHalfTheMemory(t *testing.T) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		t.Skip(err)
	}
	if got, want := DefaultMax(), int64(si.Totalram)*int64(si.Unit)/2; got != want {
		t.Errorf("DefaultMax() = %d, want %d (half of %d)", got, want, 2*want)
	}
}

// TestMemoryStaging: a memory staging is refused over the bound, takes
// chunks only once laid out, and Await returns once every block of the
// awaited save holds its chunk (and not before, nor for another save).
func TestMemoryStaging(t *testing.T) {
	ctx := context.Background()
	blk := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4<<10) }
	// The blocks' digests only: the target's store holds none of them.
	tab := table(t, openStore(t), blk(1), blk(2), nil, blk(4))
	const id = "s-0123456789ab"
	if err := (&Stager{Store: openStore(t), Max: 8 << 10}).Table(ctx, id, tab, true); err == nil || !strings.Contains(err.Error(), "staging bound") {
		t.Errorf("a memory staging over the bound: %v, want refused", err)
	}
	s := &Stager{Store: openStore(t), Max: 1 << 20}
	if _, err := s.KeepMemory(id); err == nil {
		t.Error("memory chunks were taken with no staging laid out")
	}
	if err := s.Table(ctx, id, tab, true); err != nil {
		t.Fatal(err)
	}
	keep, err := s.KeepMemory(id)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := s.Await(short, id, tab.Gen()); err == nil {
		t.Fatal("Await returned with three blocks still to come")
	}
	keep(tab.Chunks[0].Digest, blk(1))
	keep(tab.Chunks[1].Digest, blk(2))
	done := make(chan error, 1)
	go func() { done <- s.Await(ctx, id, tab.Gen()) }()
	select {
	case err := <-done:
		t.Fatalf("Await returned (%v) with block 3 still to come", err)
	case <-time.After(20 * time.Millisecond):
	}
	keep(tab.Chunks[3].Digest, blk(4))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	other, cancel2 := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel2()
	if err := s.Await(other, id, tab.Gen()+1); err == nil {
		t.Error("Await returned for a save the staging does not hold")
	}
	s.Drop(id)
	if err := s.Await(ctx, id, tab.Gen()); err == nil {
		t.Error("Await of a dropped staging returned no error")
	}
}

// TestMemoryStagingRegionsChange: a memory pre-copy's freeze finds the
// session's regions changed since the last round (one freed, one
// allocated): the source sends only the new region's blocks, and the
// blocks it kept come from the old file, so the staging completes.
func TestMemoryStagingRegionsChange(t *testing.T) {
	ctx := context.Background()
	blk := func(b byte) []byte { return bytes.Repeat([]byte{b}, 4<<10) }
	src := openStore(t) // the source's digests: the target's store holds none
	round := table(t, src, blk(1), blk(2), nil, blk(4))
	const id = "s-0123456789ab"
	s := &Stager{Store: openStore(t), Max: 1 << 20}
	if err := s.Table(ctx, id, round, true); err != nil {
		t.Fatal(err)
	}
	keep, err := s.KeepMemory(id)
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range [][]byte{blk(1), blk(2), nil, blk(4)} {
		if b != nil {
			keep(round.Chunks[i].Digest, b)
		}
	}
	if err := s.Await(ctx, id, round.Gen()); err != nil {
		t.Fatal(err)
	}
	// The freeze: region 1 freed, region 2 kept, a region 3 allocated.
	freeze := table(t, src, blk(4), nil, blk(7), blk(8))
	freeze.Chunks[0] = round.Chunks[3]
	freeze.Chunks[1] = round.Chunks[2]
	freeze.Layout.Gen = 8
	freeze.Layout.Regions = []devmem.Region{round.Layout.Regions[1], {MemRegion: backend.MemRegion{ID: 3 << 20, Size: 8 << 10}, Off: 8 << 10}}
	freeze.Layout.Regions[0].Off = 0
	if err := s.Table(ctx, id, freeze, true); err != nil {
		t.Fatal(err)
	}
	keep(freeze.Chunks[2].Digest, blk(7))
	keep(freeze.Chunks[3].Digest, blk(8))
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := s.Await(short, id, freeze.Gen()); err != nil {
		t.Fatalf("the kept blocks did not come from the old file: %v", err)
	}
	g := s.Take(id)
	snap, _, err := g.Load(ctx, s.Store, freeze)
	g.Release()
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close()
	if want := slices.Concat(blk(4), make([]byte, 4<<10), blk(7), blk(8)); !bytes.Equal(snap.Data, want) {
		t.Error("the staged file does not hold the freeze's bytes")
	}
	if s.Used() != 0 {
		t.Errorf("%d bytes still staged after the release", s.Used())
	}
}
