package images

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gpuctl/gpuctl/store"
)

// The freeze of a pre-copied migration stores an image whose device
// memory is all reused chunks, then pushes it to a target that holds all
// of them: per-chunk work on both sides, in the downtime, that grows with
// the session. 32,768 blocks are a 32 GiB session of 1 MiB blocks (the
// blocks here are 4 KiB: the chunks' bytes are not what is measured).
func BenchmarkReusedImage(b *testing.B) {
	const blocks, blk = 32768, 4 << 10
	ctx := context.Background()
	src, dst := openStore(b), openStore(b)
	data := make([]byte, blocks*blk)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	mf := MemFile{Path: "devmem.bin", Data: data}
	for i := range blocks {
		mf.Blocks = append(mf.Blocks, MemBlock{Off: int64(i * blk), Len: blk})
	}
	dir := b.TempDir()
	first, _, err := CommitWith(ctx, src, dir, Meta{Session: "s-0123456789ab"}, []MemFile{mf})
	if err != nil {
		b.Fatal(err)
	}
	var exp bytes.Buffer
	if _, err := Export(ctx, src, first.ID, &exp, nil); err != nil {
		b.Fatal(err)
	}
	if _, _, err := Import(ctx, dst, &exp, ImportOptions{}); err != nil {
		b.Fatal(err)
	}
	reused := MemFile{Path: mf.Path}
	chunks := first.Files[len(first.Files)-1].Chunks
	for i := range blocks {
		reused.Blocks = append(reused.Blocks, MemBlock{Off: int64(i * blk), Len: blk, Reuse: &chunks[i]})
	}
	b.ResetTimer()
	for n := range b.N {
		m, st, err := CommitWith(ctx, src, dir, Meta{Session: "s-0123456789ab"}, []MemFile{reused})
		if err != nil {
			b.Fatal(err)
		}
		only := map[store.Digest]bool{}
		var out bytes.Buffer
		if _, err := export(ctx, src, m.ID, &out, only, nil); err != nil {
			b.Fatal(err)
		}
		_, ist, err := Import(ctx, dst, &out, ImportOptions{})
		if err != nil {
			b.Fatal(err)
		}
		if n == 0 {
			b.Log(fmt.Sprintf("store %v (index %v), import of %d bytes (index %v)", st.Duration, st.Index, out.Len(), ist.Index))
		}
	}
}
