package store

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
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
