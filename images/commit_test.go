package images

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/gpuctl/gpuctl/images/chunker"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/store"
)

// Commit chunks large files in parallel segments; the chunks must be
// exactly those of one sequential pass, or images committed before and
// after would stop sharing chunks.
func TestParallelCommitChunksLikeOnePass(t *testing.T) {
	base := imagegen.Pages(21, 2*commitSegment+5*imagegen.PageSize+77, imagegen.Realistic)
	zeroAcross := bytes.Clone(base)
	clear(zeroAcross[commitSegment-3*imagegen.PageSize : commitSegment+9*imagegen.PageSize])
	tests := []struct {
		name  string
		pages []byte
	}{
		{"realistic", base},
		{"zero run across a segment edge", zeroAcross},
		{"grown by pages", imagegen.Grow(22, bytes.Clone(base), 1000, 3)},
	}
	// Many workers cut the same files into 1 MiB segments, few into
	// 32 MiB ones.
	for _, workers := range []int{1, 2, 64} {
		st := openStoreWorkers(t, workers)
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s, %d workers", tt.name, workers), func(t *testing.T) {
				commitLikeOnePass(t, st, tt.pages)
			})
		}
	}
}

func commitLikeOnePass(t *testing.T, st *store.Store, pages []byte) {
	t.Helper()
	m, _, err := Commit(context.Background(), st, dumpDir(t, pages), Meta{Session: "s-seg"})
	if err != nil {
		t.Fatal(err)
	}
	var got []Chunk
	for _, f := range m.Files {
		if f.Path == "pages-1.img" {
			got = f.Chunks
		}
	}
	var want []Chunk
	if err := chunker.Split(pages, 0, chunker.Default, func(c chunker.Chunk) error {
		w := Chunk{Size: int64(c.Len), Zero: c.Zero}
		if !c.Zero {
			w.Digest = store.Sum(pages[c.Off : c.Off+int64(c.Len)])
		}
		want = append(want, w)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("commit made %d chunks, one pass %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("chunk %d: commit %+v, one pass %+v", i, got[i], want[i])
		}
	}
}

func TestSegmentFor(t *testing.T) {
	for _, tc := range []struct {
		size    int64
		workers int
		want    int
	}{
		{60 << 20, 16, (60 << 20) / 32}, // a CUDA worker's process image
		{60 << 20, 1, 30 << 20},
		{60 << 20, 0, 30 << 20},
		{8 << 30, 16, commitSegment},
		{4 << 20, 16, minCommitSegment},
	} {
		if got := segmentFor(tc.size, tc.workers); got != tc.want {
			t.Errorf("segmentFor(%d, %d) = %d, want %d", tc.size, tc.workers, got, tc.want)
		}
	}
}

// BenchmarkCommitProcessImage stores a 64 MiB pages file, a migration's
// process image, in 32 MiB segments (as before segmentFor) and in
// segmentFor's: on a host of many cores the second keeps them busy.
func BenchmarkCommitProcessImage(b *testing.B) {
	for _, seg := range []struct {
		name string
		size int
	}{{"segment=32MiB", commitSegment}, {"segment=auto", 0}} {
		b.Run(seg.name, func(b *testing.B) {
			st := openStore(b)
			b.SetBytes(64 << 20)
			b.StopTimer()
			for n := range b.N {
				// New content each time: every chunk is stored, as a
				// process image's mostly are.
				dir := dumpDir(b, imagegen.Pages(uint64(100+n), 64<<20, imagegen.Realistic))
				b.StartTimer()
				if _, _, err := commitSegmented(context.Background(), st, dir, Meta{Session: "s-bench"}, nil, seg.size, nil); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
			}
		})
	}
}
