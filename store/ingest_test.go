package store

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

// Many workers putting at once fill several packs at a time and seal full
// ones in the background; whatever the interleaving, every chunk must be
// indexed once, read back intact, and an aborted ingest must leave no
// file behind.
func TestParallelPutsAcrossStripesAndSeals(t *testing.T) {
	tests := []struct {
		name    string
		workers int
		pack    int64
		abort   bool
		packs   int // exactly this many packs; 0: more than one per stripe
	}{
		{"one stripe, many seals", 4, 64 << 10, false, 0},
		{"three stripes, many seals", 24, 64 << 10, false, 0},
		{"three stripes, one pack each", 24, 256 << 20, false, 3},
		{"three stripes, aborted with seals in flight", 24, 64 << 10, true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			dir := t.TempDir()
			s := openAt(t, dir, Options{Workers: tt.workers, PackSize: tt.pack})
			if got, want := s.packStripes(), (tt.workers+7)/8; got != want {
				t.Fatalf("%d stripes, want %d", got, want)
			}
			in := s.NewIngest()
			defer in.Abort()
			const perWorker = 40
			chunks := make([][]byte, tt.workers*perWorker)
			for i := range chunks {
				kind := "random"
				if i%3 == 0 {
					kind = "text"
				}
				chunks[i] = chunkData(kind, uint64(i%(len(chunks)-7)), 4<<10+i*61%(20<<10))
			}
			var wg sync.WaitGroup
			errc := make(chan error, tt.workers)
			for w := range tt.workers {
				wg.Go(func() {
					for _, c := range chunks[w*perWorker : (w+1)*perWorker] {
						if _, _, err := in.Put(ctx, c); err != nil {
							errc <- err
							return
						}
					}
				})
			}
			wg.Wait()
			close(errc)
			for err := range errc {
				t.Fatalf("put: %v", err)
			}
			refs := make([]Digest, len(chunks))
			for i, c := range chunks {
				refs[i] = Sum(c)
			}
			if tt.abort {
				in.Abort()
				for _, sub := range []string{"packs", "tmp"} {
					if ents, _ := os.ReadDir(filepath.Join(dir, "blobs", sub)); len(ents) != 0 {
						t.Fatalf("abort left %d files in blobs/%s", len(ents), sub)
					}
				}
				if missing, _ := s.Missing(ctx, refs); len(missing) == 0 {
					t.Fatal("aborted chunks are indexed")
				}
				return
			}
			info, _ := json.Marshal(map[string]any{"session": "s-par"})
			if err := in.Commit(ctx, &ImageRecord{ID: "img-par", Info: info, Manifest: []byte("m"), Refs: refs}); err != nil {
				t.Fatalf("commit: %v", err)
			}
			for i, c := range chunks {
				if got, err := s.ReadChunk(ctx, refs[i]); err != nil || !bytes.Equal(got, c) {
					t.Fatalf("chunk %d reads back wrong (%v)", i, err)
				}
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "blobs", "tmp")); len(ents) != 0 {
				t.Fatalf("commit left %d temporary packs", len(ents))
			}
			packs, _ := os.ReadDir(filepath.Join(dir, "blobs", "packs"))
			if (tt.packs > 0 && len(packs) != tt.packs) || (tt.packs == 0 && len(packs) <= s.packStripes()) {
				t.Fatalf("%d packs for %d stripes (want %d)", len(packs), s.packStripes(), tt.packs)
			}
		})
	}
}

func TestReadChunkTo(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{})
	raw := chunkData("random", 5, 12<<10)       // stored as is
	packed := chunkData("text", 6, 40<<10)      // stored compressed
	damaged := chunkData("text", 7, 20<<10)     // compressed, then a byte flipped
	damagedRaw := chunkData("random", 8, 8<<10) // raw, then a byte flipped
	refs := commitImage(t, s, "img-to", "", raw, packed, damaged, damagedRaw)
	for _, d := range refs[2:] {
		r, err := s.lookup(ctx, d)
		if err != nil {
			t.Fatal(err)
		}
		flipByte(t, s.packPath(r.Pack), int64(r.Offset)+int64(r.Stored)/2)
	}
	tests := []struct {
		name    string
		d       Digest
		size    int
		want    []byte
		errKind errs.Kind
	}{
		{"raw", refs[0], len(raw), raw, errs.Unknown},
		{"compressed", refs[1], len(packed), packed, errs.Unknown},
		{"buffer too short", refs[1], len(packed) - 1, nil, errs.DataLoss},
		{"buffer too long", refs[0], len(raw) + 4096, nil, errs.DataLoss},
		{"damaged compressed", refs[2], len(damaged), nil, errs.DataLoss},
		{"damaged raw", refs[3], len(damagedRaw), nil, errs.DataLoss},
		{"not stored", Sum([]byte("absent")), 6, nil, errs.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := make([]byte, tt.size)
			err := s.ReadChunkTo(ctx, tt.d, dst)
			if tt.want != nil {
				if err != nil || !bytes.Equal(dst, tt.want) {
					t.Fatalf("read back wrong (%v)", err)
				}
				return
			}
			if !errs.Is(err, tt.errKind) || !strings.Contains(err.Error(), tt.d.String()) {
				t.Fatalf("want a %v error naming the chunk, got %v", tt.errKind, err)
			}
		})
	}
}

func TestReadChunksTo(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{})
	a, b, c := chunkData("random", 9, 12<<10), chunkData("text", 10, 40<<10), chunkData("text", 11, 4<<10)
	refs := commitImage(t, s, "img-many", "", a, b, c)
	absent := Sum([]byte("absent"))
	tests := []struct {
		name    string
		ds      []Digest
		sizes   []int
		errKind errs.Kind // Unknown: must succeed
	}{
		{"three", refs, []int{len(a), len(b), len(c)}, errs.Unknown},
		{"repeated", []Digest{refs[1], refs[1]}, []int{len(b), len(b)}, errs.Unknown},
		{"none", nil, nil, errs.Unknown},
		{"one absent", []Digest{refs[0], absent, refs[2]}, []int{len(a), 6, len(c)}, errs.NotFound},
		{"wrong size", []Digest{refs[0], refs[1]}, []int{len(a), len(b) - 1}, errs.DataLoss},
		{"fewer buffers", refs, []int{len(a)}, errs.Internal},
	}
	want := map[Digest][]byte{refs[0]: a, refs[1]: b, refs[2]: c}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dsts := make([][]byte, len(tt.sizes))
			for i, n := range tt.sizes {
				dsts[i] = make([]byte, n)
			}
			err := s.ReadChunksTo(ctx, tt.ds, dsts)
			if tt.errKind != errs.Unknown {
				if !errs.Is(err, tt.errKind) {
					t.Fatalf("want a %v error, got %v", tt.errKind, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, d := range tt.ds {
				if !bytes.Equal(dsts[i], want[d]) {
					t.Fatalf("buffer %d holds the wrong bytes", i)
				}
			}
		})
	}
}

func TestPutFrames(t *testing.T) {
	ctx := context.Background()
	src := openTest(t, Options{})
	a, b := chunkData("random", 12, 12<<10), chunkData("text", 13, 40<<10)
	refs := commitImage(t, src, "img-src", "", a, b)
	fa, err := src.ReadFrame(ctx, refs[0])
	if err != nil {
		t.Fatal(err)
	}
	fb, err := src.ReadFrame(ctx, refs[1])
	if err != nil || !fb.Zstd {
		t.Fatalf("want a compressed frame for text: %+v, %v", fb.Zstd, err)
	}
	bad := fb
	bad.Payload = append([]byte(nil), fb.Payload...)
	bad.Payload[len(bad.Payload)/2] ^= 1
	tests := []struct {
		name    string
		frames  []Frame
		errKind errs.Kind // Unknown: must succeed
	}{
		{"raw and compressed", []Frame{fa, fb}, errs.Unknown},
		{"repeats stored once", []Frame{fb, fa, fb, fa}, errs.Unknown},
		{"damaged frame refuses the batch", []Frame{fa, bad}, errs.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := openTest(t, Options{})
			in := dst.NewIngest()
			defer in.Abort()
			n, err := in.PutFrames(ctx, tt.frames)
			if tt.errKind != errs.Unknown {
				if !errs.Is(err, tt.errKind) || n != 0 || in.StoredBytes() != 0 {
					t.Fatalf("want a %v error and nothing stored, got %v (%d bytes)", tt.errKind, err, in.StoredBytes())
				}
				return
			}
			if err != nil || n != int64(len(fa.Payload)+len(fb.Payload)) {
				t.Fatalf("added %d bytes, want %d (%v)", n, len(fa.Payload)+len(fb.Payload), err)
			}
			if err := in.Commit(ctx, &ImageRecord{ID: "img-dst", Info: []byte(`{"session":""}`), Manifest: []byte("m"), Refs: refs}); err != nil {
				t.Fatal(err)
			}
			for i, want := range [][]byte{a, b} {
				if got, err := dst.ReadChunk(ctx, refs[i]); err != nil || !bytes.Equal(got, want) {
					t.Fatalf("chunk %d reads back wrong (%v)", i, err)
				}
			}
		})
	}
}

func TestReadFramesAndStatAll(t *testing.T) {
	ctx := context.Background()
	s := openTest(t, Options{})
	a, b := chunkData("random", 14, 12<<10), chunkData("text", 15, 40<<10)
	refs := commitImage(t, s, "img-frames", "", a, b)
	absent := Sum([]byte("absent"))
	tests := []struct {
		name    string
		ds      []Digest
		errKind errs.Kind // Unknown: must succeed
	}{
		{"two", refs, errs.Unknown},
		{"repeated", []Digest{refs[1], refs[0], refs[1]}, errs.Unknown},
		{"none", nil, errs.Unknown},
		{"one absent", []Digest{refs[0], absent}, errs.NotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs, ferr := s.ReadFrames(ctx, tt.ds)
			infos, serr := s.StatAll(ctx, tt.ds)
			if tt.errKind != errs.Unknown {
				if !errs.Is(ferr, tt.errKind) || !errs.Is(serr, tt.errKind) {
					t.Fatalf("want %v errors, got %v and %v", tt.errKind, ferr, serr)
				}
				return
			}
			if ferr != nil || serr != nil || len(fs) != len(tt.ds) || len(infos) != len(tt.ds) {
				t.Fatalf("%d frames (%v), %d infos (%v) for %d digests", len(fs), ferr, len(infos), serr, len(tt.ds))
			}
			for i, d := range tt.ds {
				one, err := s.ReadFrame(ctx, d)
				if err != nil {
					t.Fatal(err)
				}
				if fs[i].Digest != d || fs[i].Raw != one.Raw || fs[i].Zstd != one.Zstd || !bytes.Equal(fs[i].Payload, one.Payload) {
					t.Fatalf("frame %d differs from ReadFrame's", i)
				}
				if infos[i].Digest != d || infos[i].Stored != len(one.Payload) || infos[i].Raw != one.Raw {
					t.Fatalf("info %d: %+v, frame has %d stored of %d", i, infos[i], len(one.Payload), one.Raw)
				}
			}
		})
	}
}
