package devstore

import (
	"fmt"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/images"
)

// CopyBlocks copies into dst, on every core, each block of dst that pick
// chooses (by dst's block index) from the same block of src (the same
// region and index, wherever src lays it out) where src holds it, and
// marks them present in dst's layout (in memory only: dst's file keeps its
// layout). It returns how many it copied. A memory pre-copy keeps a
// mirror of the session's device memory this way, and completes the
// freeze's save from it (CompleteFrom).
func CopyBlocks(dst, src *Snapshot, pick func(i int) bool) int {
	to := blockMap(src.Layout, dst.Layout)
	sspans, dspans := src.Layout.Spans(), dst.Layout.Spans()
	var idx []int
	for i, j := range to {
		if j >= 0 && src.Layout.IsSent(i) && pick(j) && sspans[i].Len == dspans[j].Len {
			idx = append(idx, i)
		}
	}
	_ = devmem.Parallel(len(idx), func(k int) error {
		s, d := sspans[idx[k]], dspans[to[idx[k]]]
		copy(dst.Data[d.FileOff:d.FileOff+int64(d.Len)], src.Data[s.FileOff:s.FileOff+int64(s.Len)])
		return nil
	})
	for _, i := range idx {
		j := to[i]
		dst.Layout.Sent[j/8] |= 1 << (j % 8)
	}
	return len(idx)
}

// CompleteFrom is Complete with the blocks s lacks read from src (a
// complete copy of s's base, kept in host memory) instead of the store.
func CompleteFrom(s, src *Snapshot) error {
	l := s.Layout
	if l.SentCount() == l.Blocks {
		return nil
	}
	CopyBlocks(s, src, func(j int) bool { return !l.IsSent(j) })
	// CopyBlocks marked what it filled in s.Layout: whatever is still
	// missing, src did not hold either.
	if n := l.SentCount(); n != l.Blocks {
		return fmt.Errorf("saved device memory: %d of %d blocks are neither in the save nor in the host's copy of its base", l.Blocks-n, l.Blocks)
	}
	return s.writeLayout(l)
}

// FilesAll is Files for a complete save whose base is not in this host's
// store (a memory pre-copy's freeze): every block is stored, none taken
// from the base.
func FilesAll(s *Snapshot) ([]images.MemFile, error) {
	l := s.Layout
	if n := l.SentCount(); n != l.Blocks {
		return nil, fmt.Errorf("saved device memory: %d of %d blocks missing from a save that must be complete", l.Blocks-n, l.Blocks)
	}
	full := *l
	full.Base, full.Changed = 0, nil
	return Files(&Snapshot{File: s.File, Saved: s.Saved, Layout: &full, Data: s.Data}, nil)
}
