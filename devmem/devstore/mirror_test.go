package devstore

import (
	"bytes"
	"testing"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// layoutOf lays regions (id and size) out in order, in blocks of 4 KiB,
// with the blocks sent marks.
func layoutOf(regs [][2]uint64, sent ...int) *devmem.Layout {
	l := &devmem.Layout{Version: devmem.LayoutVersion, Gen: 1, Block: 4096}
	for _, r := range regs {
		l.Regions = append(l.Regions, devmem.Region{MemRegion: backend.MemRegion{ID: r[0], Size: r[1]}, Off: l.Size})
		l.Size += int64(r[1])
		l.Blocks += devmem.BlocksOf(r[1], l.Block)
	}
	l.Sent = make([]byte, (l.Blocks+7)/8)
	for _, i := range sent {
		l.Sent[i/8] |= 1 << (i % 8)
	}
	return l
}

func fillBlocks(s *Snapshot, seed byte) {
	for i := range s.Data {
		s.Data[i] = seed + byte(i/4096)
	}
}

// TestCopyBlocks: blocks are matched by region, not by offset, only
// those pick chooses and the source holds are copied, and CompleteFrom
// fills in exactly what a save lacks, or says what neither holds.
func TestCopyBlocks(t *testing.T) {
	// src: region 1 (2 blocks), region 2 (1 block + 100 bytes); dst has
	// region 2 first, then a region 3 src does not know.
	src, err := Create(layoutOf([][2]uint64{{1, 8192}, {2, 4196}}, 0, 1, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fillBlocks(src, 10)
	dst, err := Create(layoutOf([][2]uint64{{2, 4196}, {3, 4096}}, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	copy(dst.Data[4096:4196], bytes.Repeat([]byte{99}, 100)) // dst's own block 1
	n := CopyBlocks(dst, src, func(j int) bool { return !dst.Layout.IsSent(j) })
	if n != 1 {
		t.Fatalf("copied %d blocks, want region 2's first (its second dst holds; region 3 src lacks)", n)
	}
	if !bytes.Equal(dst.Data[:4096], src.Data[8192:12288]) {
		t.Error("region 2's first block did not come from src's offset of it")
	}
	if dst.Data[4096] != 99 {
		t.Error("a block dst held was overwritten")
	}
	if !dst.Layout.IsSent(0) || dst.Layout.IsSent(2) {
		t.Errorf("marks after the copy: %08b", dst.Layout.Sent)
	}
	if err := CompleteFrom(dst, src); err == nil {
		t.Error("CompleteFrom completed a save whose region neither holds")
	}
	// Without region 3, it completes.
	d2, err := Create(layoutOf([][2]uint64{{1, 8192}}, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if err := CompleteFrom(d2, src); err != nil {
		t.Fatal(err)
	}
	if d2.Layout.SentCount() != 2 || !bytes.Equal(d2.Data[:4096], src.Data[:4096]) || d2.Data[4096] != 0 {
		t.Errorf("completed: %d blocks, first from src %v, its own second kept %v", d2.Layout.SentCount(), bytes.Equal(d2.Data[:4096], src.Data[:4096]), d2.Data[4096] == 0)
	}
	if _, err := FilesAll(d2); err != nil {
		t.Errorf("FilesAll of a complete save: %v", err)
	}
	if _, err := FilesAll(dst); err == nil {
		t.Error("FilesAll took an incomplete save")
	}
}
