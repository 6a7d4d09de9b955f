package images

import (
	"bytes"
	"context"
	"testing"

	"github.com/gpuctl/gpuctl/store"
)

// TestWriteRawChunks: a pre-copy round's stream, written straight from
// memory, is taken by PutChunks chunk for chunk; a block whose bytes no
// longer match the digest sent with it is refused, and nothing of that
// stream is kept.
func TestWriteRawChunks(t *testing.T) {
	ctx := context.Background()
	blocks := [][]byte{bytes.Repeat([]byte{1}, 1<<20), []byte("a short last block"), bytes.Repeat([]byte{7, 9}, 4096)}
	ds := make([]store.Digest, len(blocks))
	for i, b := range blocks {
		ds[i] = store.Sum(b)
	}
	for _, tc := range []struct {
		name   string
		tamper bool
	}{{"as sent", false}, {"torn after hashing", true}} {
		t.Run(tc.name, func(t *testing.T) {
			st := openStore(t)
			data := make([][]byte, len(blocks))
			for i, b := range blocks {
				data[i] = bytes.Clone(b)
			}
			if tc.tamper {
				data[1][0] ^= 0xff
			}
			var buf bytes.Buffer
			if _, err := WriteRawChunks(ctx, ds, data, &buf); err != nil {
				t.Fatal(err)
			}
			n, _, err := PutChunks(ctx, st, &buf)
			if tc.tamper {
				if err == nil {
					t.Fatalf("a chunk that does not match its digest was taken (%d chunks)", n)
				}
				missing, merr := st.Missing(ctx, ds)
				if merr != nil || len(missing) != len(ds) {
					t.Fatalf("after a refused stream the store lacks %d of %d chunks (%v), want all", len(missing), len(ds), merr)
				}
				return
			}
			if err != nil || n != len(blocks) {
				t.Fatalf("PutChunks: %d chunks, %v; want %d", n, err, len(blocks))
			}
			for i, d := range ds {
				got, err := st.ReadChunk(ctx, d)
				if err != nil || !bytes.Equal(got, blocks[i]) {
					t.Fatalf("chunk %d read back %d bytes (%v), want its %d", i, len(got), err, len(blocks[i]))
				}
			}
		})
	}
	if _, err := WriteRawChunks(ctx, ds[:1], blocks, &bytes.Buffer{}); err == nil {
		t.Fatal("digests and chunks of different counts were written")
	}
}
