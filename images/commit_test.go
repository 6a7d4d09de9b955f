package images

import (
	"bytes"
	"context"
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
		{"realistic, three segments", base},
		{"zero run across a segment edge", zeroAcross},
		{"grown by pages", imagegen.Grow(22, bytes.Clone(base), 1000, 3)},
	}
	st := openStore(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, err := Commit(context.Background(), st, dumpDir(t, tt.pages), Meta{Session: "s-seg"})
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
			if err := chunker.Split(tt.pages, 0, chunker.Default, func(c chunker.Chunk) error {
				w := Chunk{Size: int64(c.Len), Zero: c.Zero}
				if !c.Zero {
					w.Digest = store.Sum(tt.pages[c.Off : c.Off+int64(c.Len)])
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
		})
	}
}
