package images

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/gpuctl/gpuctl/images/imagegen"
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

// TestCommitObserved: the observer is shown every non-zero chunk of the
// committed directory's files, with their content, and none of the
// in-memory blocks; a ChunkStream of what it saw gives another store all
// of the files' chunks, as a migration's target gets them before the
// push.
func TestCommitObserved(t *testing.T) {
	ctx := context.Background()
	src, dst := openStore(t), openStore(t)
	pages := imagegen.Pages(31, 8<<20, imagegen.Realistic)
	mem := bytes.Repeat([]byte("device memory block "), 1<<15)
	mf := MemFile{Path: "devmem.bin", Data: mem, Blocks: []MemBlock{{Off: 0, Len: len(mem) / 2}, {Off: int64(len(mem) / 2), Len: len(mem) - len(mem)/2}}}
	var (
		mu   sync.Mutex
		seen = map[store.Digest][]byte{}
	)
	m, _, err := CommitObserved(ctx, src, dumpDir(t, pages), Meta{Session: "s-observed"}, []MemFile{mf}, func(ds []store.Digest, data [][]byte) {
		mu.Lock()
		defer mu.Unlock()
		for i, d := range ds {
			seen[d] = bytes.Clone(data[i])
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[store.Digest]bool{}
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			if c.Zero {
				continue
			}
			if f.Path == mf.Path {
				if seen[c.Digest] != nil {
					t.Fatalf("an in-memory block of %s was observed", f.Path)
				}
				continue
			}
			want[c.Digest] = true
		}
	}
	if len(want) == 0 || len(seen) != len(want) {
		t.Fatalf("observed %d distinct chunks, the files have %d", len(seen), len(want))
	}
	var buf bytes.Buffer
	cs := NewChunkStream(&buf)
	var ds []store.Digest
	for d, b := range seen {
		if !want[d] {
			t.Fatalf("observed chunk %s is not one of the files'", d)
		}
		if store.Sum(b) != d {
			t.Fatalf("observed chunk %s came with other content", d)
		}
		if err := cs.Put(d, b); err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	if _, err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	if n, _, err := PutChunks(ctx, dst, &buf); err != nil || n != len(ds) {
		t.Fatalf("PutChunks of the observed chunks: %d, %v; want %d", n, err, len(ds))
	}
	if missing, err := dst.Missing(ctx, ds); err != nil || len(missing) > 0 {
		t.Fatalf("the target lacks %d of the streamed chunks (%v)", len(missing), err)
	}
}

// TestStageChunks: a memory pre-copy's stream hands every chunk, checked,
// to keep and stores none; a chunk that does not match its digest fails
// the stream and is never kept.
func TestStageChunks(t *testing.T) {
	ctx := context.Background()
	blocks := [][]byte{bytes.Repeat([]byte{3}, 1<<20), []byte("short"), bytes.Repeat([]byte{5, 6}, 8192)}
	ds := make([]store.Digest, len(blocks))
	for i, b := range blocks {
		ds[i] = store.Sum(b)
	}
	for _, tamper := range []bool{false, true} {
		st := openStore(t)
		data := make([][]byte, len(blocks))
		for i, b := range blocks {
			data[i] = bytes.Clone(b)
		}
		if tamper {
			data[2][1] ^= 0xff
		}
		var buf bytes.Buffer
		if _, err := WriteRawChunks(ctx, ds, data, &buf); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		kept := map[store.Digest][]byte{}
		n, err := StageChunks(ctx, st, &buf, func(d store.Digest, b []byte) {
			mu.Lock()
			kept[d] = bytes.Clone(b)
			mu.Unlock()
		})
		if missing, merr := st.Missing(ctx, ds); merr != nil || len(missing) != len(ds) {
			t.Errorf("tampered %v: the store took %d chunks of a staging-only stream (%v)", tamper, len(ds)-len(missing), merr)
		}
		if tamper {
			if err == nil {
				t.Errorf("a chunk that does not match its digest was staged (%d chunks)", n)
			}
			if _, ok := kept[ds[2]]; ok {
				t.Error("the tampered chunk was kept")
			}
			continue
		}
		if err != nil || n != len(blocks) {
			t.Fatalf("StageChunks: %d chunks, %v; want %d", n, err, len(blocks))
		}
		for i, d := range ds {
			if !bytes.Equal(kept[d], blocks[i]) {
				t.Errorf("chunk %d kept as %d bytes, want its %d", i, len(kept[d]), len(blocks[i]))
			}
		}
	}
}
