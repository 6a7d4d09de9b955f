package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

// openTest opens a store in a fresh dir and registers a consistency check
// that runs when the test ends.
func openTest(t testing.TB, opts Options) *Store {
	t.Helper()
	return openAt(t, t.TempDir(), opts)
}

func openAt(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	s, err := Open(context.Background(), dir, opts)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Check(context.Background()); err != nil {
			t.Errorf("consistency check at end of test: %v", err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

// chunkData makes deterministic test content of a given kind.
func chunkData(kind string, seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	switch kind {
	case "random":
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	case "text":
		line := fmt.Sprintf("line %d of a repetitive log;", seed)
		for i := range b {
			b[i] = line[i%len(line)]
		}
	}
	return b
}

// commitImage stores chunks and an image using them.
func commitImage(t testing.TB, s *Store, id, session string, chunks ...[]byte) []Digest {
	t.Helper()
	ctx := context.Background()
	in := s.NewIngest()
	defer in.Abort()
	var refs []Digest
	for _, c := range chunks {
		d, _, err := in.Put(ctx, c)
		if err != nil {
			t.Fatalf("put: %v", err)
		}
		refs = append(refs, d)
	}
	info, _ := json.Marshal(map[string]any{"session": session, "chunks": len(refs)})
	if err := in.Commit(ctx, &ImageRecord{ID: id, Info: info, Manifest: []byte("m-" + id), Refs: refs}); err != nil {
		t.Fatalf("commit %s: %v", id, err)
	}
	return refs
}

func TestPutAndRead(t *testing.T) {
	tests := []struct {
		name     string
		data     []byte
		wantErr  errs.Kind
		wantComp bool
	}{
		{"random stays raw", chunkData("random", 1, 16<<10), "", false},
		{"text compresses", chunkData("text", 2, 64<<10), "", true},
		{"one byte", []byte{9}, "", false},
		{"largest", chunkData("text", 3, MaxChunkSize), "", true},
		{"too large", make([]byte, MaxChunkSize+1), errs.InvalidArgument, false},
		{"empty", nil, errs.InvalidArgument, false},
	}
	s := openTest(t, Options{})
	ctx := context.Background()
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := s.NewIngest()
			defer in.Abort()
			d, n, err := in.Put(ctx, tt.data)
			if tt.wantErr != "" {
				if !errs.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want kind %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || n <= 0 {
				t.Fatalf("put: %d, %v", n, err)
			}
			if err := in.Commit(ctx, &ImageRecord{ID: fmt.Sprint("img-", i), Info: []byte(`{}`), Refs: []Digest{d}}); err != nil {
				t.Fatal(err)
			}
			got, err := s.ReadChunk(ctx, d)
			if err != nil || !bytes.Equal(got, tt.data) {
				t.Fatalf("read back: %v (equal %v)", err, bytes.Equal(got, tt.data))
			}
			ci, err := s.Stat(ctx, d)
			if err != nil || ci.Encoded != tt.wantComp || ci.Refs != 1 || ci.Raw != len(tt.data) {
				t.Fatalf("stat %+v, %v", ci, err)
			}
			if tt.wantComp && ci.Stored >= ci.Raw/2 {
				t.Fatalf("compressible chunk stored in %d of %d bytes", ci.Stored, ci.Raw)
			}
		})
	}
}

func TestDedupRefcountsAndGC(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{PackSize: 64 << 10})
	shared := chunkData("random", 10, 32<<10)
	a := chunkData("random", 11, 32<<10)
	b := chunkData("random", 12, 32<<10)
	commitImage(t, s, "img-a", "s-1", shared, a, a)
	in := s.NewIngest()
	_, n, err := in.Put(ctx, shared)
	if err != nil || n != 0 {
		t.Fatalf("putting a stored chunk again added %d bytes (%v)", n, err)
	}
	in.Abort()
	commitImage(t, s, "img-b", "s-1", shared, b)

	tests := []struct {
		chunk []byte
		refs  int
	}{{shared, 2}, {a, 1}, {b, 1}}
	for _, tt := range tests {
		if ci, err := s.Stat(ctx, Sum(tt.chunk)); err != nil || ci.Refs != tt.refs {
			t.Fatalf("refs of %s = %d (%v), want %d", Sum(tt.chunk).Short(), ci.Refs, err, tt.refs)
		}
	}
	if ids, _ := s.ImagesOfSession(ctx, "s-1"); strings.Join(ids, ",") != "img-a,img-b" {
		t.Fatalf("session index: %v", ids)
	}
	if err := s.DeleteImage(ctx, "img-a"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteImage(ctx, "img-a"); !errs.IsNotFound(err) {
		t.Fatalf("second delete: %v", err)
	}
	st, err := s.GC(ctx)
	if err != nil || st.ChunksRemoved != 1 || st.BytesFreed <= 0 {
		t.Fatalf("gc: %+v, %v", st, err)
	}
	if _, err := s.ReadChunk(ctx, Sum(a)); !errs.IsNotFound(err) {
		t.Fatalf("collected chunk still readable: %v", err)
	}
	for _, c := range [][]byte{shared, b} {
		if got, err := s.ReadChunk(ctx, Sum(c)); err != nil || !bytes.Equal(got, c) {
			t.Fatalf("surviving chunk: %v", err)
		}
	}
	if err := s.DeleteImage(ctx, "img-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(s.packsDir()); len(ents) != 0 {
		t.Fatalf("packs left after every image went: %d", len(ents))
	}
}

func TestGCRewritesMostlyDeadPacks(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{})
	var keep, drop [][]byte
	for i := range 8 {
		keep = append(keep, chunkData("random", uint64(100+i), 8<<10))
		drop = append(drop, chunkData("random", uint64(200+i), 24<<10))
	}
	commitImage(t, s, "img-keep", "s-1", keep...)
	commitImage(t, s, "img-drop", "s-2", drop...)
	// One pack holding both: commit them together instead.
	in := s.NewIngest()
	var all []Digest
	for i := range keep {
		for _, c := range [][]byte{chunkData("text", uint64(300+i), 8<<10), chunkData("random", uint64(400+i), 24<<10)} {
			d, _, err := in.Put(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			all = append(all, d)
		}
	}
	if err := in.Commit(ctx, &ImageRecord{ID: "img-mixed", Info: []byte(`{}`), Refs: all}); err != nil {
		t.Fatal(err)
	}
	in = s.NewIngest()
	var small []Digest
	for i := range keep {
		d, _, _ := in.Put(ctx, chunkData("text", uint64(300+i), 8<<10))
		small = append(small, d)
	}
	if err := in.Commit(ctx, &ImageRecord{ID: "img-small", Info: []byte(`{}`), Refs: small}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteImage(ctx, "img-mixed"); err != nil {
		t.Fatal(err)
	}
	st, err := s.GC(ctx)
	if err != nil || st.PacksRewritten != 1 || st.ChunksRemoved != 8 {
		t.Fatalf("gc: %+v, %v", st, err)
	}
	for i, d := range small {
		if got, err := s.ReadChunk(ctx, d); err != nil || !bytes.Equal(got, chunkData("text", uint64(300+i), 8<<10)) {
			t.Fatalf("chunk %d after rewrite: %v", i, err)
		}
	}
}

func TestCorruptPackIsNamed(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{})
	good := chunkData("random", 1, 16<<10)
	commitImage(t, s, "img-good", "", good)
	badData := chunkData("text", 2, 16<<10)
	refs := commitImage(t, s, "img-bad", "", badData, chunkData("random", 3, 8<<10))
	r, err := s.lookup(ctx, refs[0])
	if err != nil {
		t.Fatal(err)
	}
	flipByte(t, s.packPath(r.Pack), int64(r.Offset)+int64(r.Stored)/2)

	if _, err := s.ReadChunk(ctx, refs[0]); !errs.Is(err, errs.DataLoss) || !strings.Contains(err.Error(), refs[0].String()) {
		t.Fatalf("read of corrupt chunk: %v", err)
	}
	bad, err := s.Verify(ctx, nil, nil)
	if err != nil || len(bad) != 1 || bad[0].Digest != refs[0] {
		t.Fatalf("verify: %v, %v", bad, err)
	}
	if got, err := s.ReadChunk(ctx, Sum(good)); err != nil || !bytes.Equal(got, good) {
		t.Fatalf("other image's chunk: %v", err)
	}
	// GC must not spread the damage: the pack stays put.
	if err := s.DeleteImage(ctx, "img-good"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if bad, _ := s.Verify(ctx, nil, nil); len(bad) != 1 {
		t.Fatalf("after gc: %v", bad)
	}
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x5a
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

func TestCommitRules(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{})
	commitImage(t, s, "img-1", "", chunkData("random", 1, 4096))
	tests := []struct {
		name string
		run  func() error
		want errs.Kind
	}{
		{"duplicate id", func() error {
			in := s.NewIngest()
			d, _, _ := in.Put(ctx, []byte("x"))
			return in.Commit(ctx, &ImageRecord{ID: "img-1", Info: []byte(`{}`), Refs: []Digest{d}})
		}, errs.AlreadyExists},
		{"ref neither put nor required", func() error {
			in := s.NewIngest()
			return in.Commit(ctx, &ImageRecord{ID: "img-2", Info: []byte(`{}`), Refs: []Digest{Sum([]byte("nope"))}})
		}, errs.Internal},
		{"required but absent", func() error {
			in := s.NewIngest()
			d := Sum([]byte("absent"))
			if miss, err := in.Require(ctx, []Digest{d}); err != nil || len(miss) != 1 {
				return fmt.Errorf("require: %v %v", miss, err)
			}
			return in.Commit(ctx, &ImageRecord{ID: "img-3", Info: []byte(`{}`), Refs: []Digest{d}})
		}, errs.FailedPrecondition},
		{"empty id", func() error { return s.NewIngest().Commit(ctx, &ImageRecord{}) }, errs.InvalidArgument},
		{"commit twice", func() error {
			in := s.NewIngest()
			_ = in.Commit(ctx, nil)
			return in.Commit(ctx, nil)
		}, errs.FailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); !errs.Is(err, tt.want) {
				t.Fatalf("got %v, want kind %s", err, tt.want)
			}
		})
	}
	if imgs, _ := s.ListImages(ctx); len(imgs) != 1 {
		t.Fatalf("failed commits left images: %v", imgs)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(s.tmpDir()); len(ents) != 0 {
		t.Fatalf("tmp files left: %d", len(ents))
	}
}

func TestPendingChunksSurviveGC(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		grace    bool
		wantKept bool
	}{{"within grace", true, true}, {"grace over", false, false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openTest(t, Options{})
			if !tt.grace {
				s.opts.PendingGrace = -1 // already expired when committed
			}
			data := chunkData("random", 5, 4096)
			in := s.NewIngest()
			d, _, _ := in.Put(ctx, data)
			if err := in.Commit(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := s.GC(ctx); err != nil {
				t.Fatal(err)
			}
			_, err := s.ReadChunk(ctx, d)
			if (err == nil) != tt.wantKept {
				t.Fatalf("read after gc: %v, want kept=%v", err, tt.wantKept)
			}
		})
	}
}

func TestSessions(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{})
	steps := []struct {
		op, id, rec string
		want        errs.Kind
		wantIDs     string
	}{
		{"put", "s-1", `{"state":"running"}`, "", "s-1"},
		{"put", "s-2", `{"state":"stopped"}`, "", "s-1,s-2"},
		{"put", "s-1", `{"state":"detached"}`, "", "s-1,s-2"},
		{"get", "s-1", `{"state":"detached"}`, "", "s-1,s-2"},
		{"get", "s-9", "", errs.NotFound, "s-1,s-2"},
		{"put", "", `{}`, errs.InvalidArgument, "s-1,s-2"},
		{"delete", "s-2", "", "", "s-1"},
		{"delete", "s-2", "", "", "s-1"},
	}
	for i, st := range steps {
		var err error
		switch st.op {
		case "put":
			err = s.PutSession(ctx, st.id, []byte(st.rec))
		case "get":
			var got []byte
			got, err = s.GetSession(ctx, st.id)
			if err == nil && string(got) != st.rec {
				t.Fatalf("step %d: got %s", i, got)
			}
		case "delete":
			err = s.DeleteSession(ctx, st.id)
		}
		if errs.KindOf(err) != st.want && !(st.want == "" && err == nil) {
			t.Fatalf("step %d %s %s: %v, want %q", i, st.op, st.id, err, st.want)
		}
		list, _ := s.ListSessions(ctx)
		var ids []string
		for id := range list {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		if strings.Join(ids, ",") != st.wantIDs {
			t.Fatalf("step %d: sessions %v, want %s", i, ids, st.wantIDs)
		}
	}
}

func TestSecondOpenIsRefused(t *testing.T) {
	dir := t.TempDir()
	openAt(t, dir, Options{})
	_, err := Open(context.Background(), dir, Options{LockTimeout: 100 * 1e6})
	if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "another gpud") {
		t.Fatalf("second open: %v", err)
	}
}

func TestConcurrentReadersWritersAndGC(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{PackSize: 256 << 10})
	shared := make([][]byte, 16)
	for i := range shared {
		shared[i] = chunkData("text", uint64(i), 16<<10)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for w := range 4 {
		wg.Go(func() {
			for n := range 6 {
				id := fmt.Sprintf("img-%d-%d", w, n)
				chunks := append([][]byte{}, shared[(w+n)%16:]...)
				chunks = append(chunks, chunkData("random", uint64(1000*w+n), 24<<10))
				in := s.NewIngest()
				var refs []Digest
				for _, c := range chunks {
					d, _, err := in.Put(ctx, c)
					if err != nil {
						errc <- err
						in.Abort()
						return
					}
					refs = append(refs, d)
				}
				if err := in.Commit(ctx, &ImageRecord{ID: id, Info: []byte(`{"session":"s-c"}`), Refs: refs}); err != nil {
					errc <- err
					return
				}
				for i, c := range chunks {
					if got, err := s.ReadChunk(ctx, refs[i]); err != nil || !bytes.Equal(got, c) {
						errc <- fmt.Errorf("%s chunk %d: %v", id, i, err)
						return
					}
				}
				if n%2 == 0 {
					if err := s.DeleteImage(ctx, id); err != nil {
						errc <- err
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 10 {
			if _, err := s.GC(ctx); err != nil {
				errc <- err
				return
			}
		}
	})
	wg.Go(func() {
		for range 10 {
			if err := s.Check(ctx); err != nil {
				errc <- err
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if _, err := s.GC(ctx); err != nil {
		t.Fatal(err)
	}
	if bad, err := s.Verify(ctx, nil, nil); err != nil || len(bad) != 0 {
		t.Fatalf("verify: %v %v", bad, err)
	}
	if imgs, _ := s.ListImages(ctx); len(imgs) != 12 {
		t.Fatalf("images: %d, want 12", len(imgs))
	}
}

func TestPacksDirIgnoresForeignFiles(t *testing.T) {
	s := openTest(t, Options{})
	foreign := filepath.Join(s.packsDir(), "README")
	if err := os.WriteFile(foreign, []byte("hi"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GC(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Fatalf("gc removed a file that is not a pack: %v", err)
	}
}

// The digest is part of the on-disk and export formats: it must never
// change silently.
func TestDigestIsBLAKE3(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
		{"abc", "6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85"},
	}
	for _, tt := range tests {
		if got := Sum([]byte(tt.in)).String(); got != tt.want {
			t.Errorf("Sum(%q) = %s, want %s", tt.in, got, tt.want)
		}
		d, err := ParseDigest(tt.want)
		if err != nil || d.String() != tt.want {
			t.Errorf("ParseDigest(%s) = %s, %v", tt.want, d, err)
		}
	}
	for _, bad := range []string{"", "xyz", strings.Repeat("g", 64), strings.Repeat("a", 63)} {
		if _, err := ParseDigest(bad); !errs.IsInvalidArgument(err) {
			t.Errorf("ParseDigest(%q): %v", bad, err)
		}
	}
}

// A reader's hold keeps chunks through a delete and a gc; releasing it
// lets the next gc take them.
func TestHoldKeepsChunksFromGC(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{})
	data := chunkData("random", 77, 8<<10)
	refs := commitImage(t, s, "img-h", "s-h", data)
	release := s.Hold(refs)
	if err := s.DeleteImage(ctx, "img-h"); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name     string
		before   func()
		wantKept bool
	}{
		{"held", func() {}, true},
		{"released", func() { release(); release() }, false}, // a second release is harmless
	}
	for _, st := range steps {
		st.before()
		if _, err := s.GC(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := s.ReadChunk(ctx, refs[0])
		if kept := err == nil && bytes.Equal(got, data); kept != st.wantKept {
			t.Fatalf("%s: kept=%v (%v), want %v", st.name, kept, err, st.wantKept)
		}
	}
}
