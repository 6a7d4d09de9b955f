// Package devmem saves a session's device memory outside the process
// image: block by block, with a hash per block that tells which blocks
// changed since the last save, into a memory file that gpud turns into
// chunks of the store; and it brings that memory back at the same device
// addresses.
//
// The worker side (Tracker) drives a backend.DeviceMemory: it lists the
// regions, hashes them in blocks (on the device where there is one),
// copies the blocks that changed into a sealed memfd it hands to gpud,
// and releases the physical memory, so that the driver's checkpoint and
// the CRIU dump see only a small process. The same memfd layout is the
// image file devmem.bin; Layout describes it and is stored next to it as
// devmem.json.
package devmem

import (
	"encoding/json"
	"fmt"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

// Image files.
const (
	DataFile   = "gpuctl-devmem.bin"
	LayoutFile = "gpuctl-devmem.json"
)

// DefaultBlock is the block size: the unit of change detection, copy and
// storage (one store chunk per block). See docs/store.md.
const DefaultBlock = 1 << 20

// LayoutVersion is the version of Layout this code writes and reads.
const LayoutVersion = 1

// Region is a device memory region and where its bytes sit in the data
// file: regions follow each other without gaps, in the order listed.
type Region struct {
	backend.MemRegion
	Off int64 `json:"off"`
}

// Layout describes one save.
type Layout struct {
	Version int    `json:"version"`
	Gen     uint64 `json:"gen"`  // this save; the next save's Base when it is committed
	Base    uint64 `json:"base"` // the save the unsent blocks are unchanged from; 0 when all were sent
	Block   uint64 `json:"block"`
	Size    int64  `json:"size"` // bytes of data
	// Regions in data file order.
	Regions []Region `json:"regions"`
	// Sent is a bitmap over blocks in file order (region by region):
	// bit set, the block's bytes are in the data; clear, the block is as
	// it was in save Base.
	Sent []byte `json:"sent,omitempty"`
	// Changed is a bitmap over blocks like Sent: bit set, the block
	// differs from save Base (every bit, when Base is 0). A save that
	// copies every block (SaveRequest.All) still says which changed.
	Changed []byte `json:"changed,omitempty"`
	// Blocks is the number of blocks.
	Blocks int `json:"blocks"`
}

// BlocksOf is how many blocks a region of size bytes has.
func BlocksOf(size, block uint64) int {
	return int((size + block - 1) / block)
}

// IsSent says whether block i's bytes are in the data.
func (l *Layout) IsSent(i int) bool { return l.Sent[i/8]&(1<<(i%8)) != 0 }

func (l *Layout) setSent(i int) { l.Sent[i/8] |= 1 << (i % 8) }

// IsChanged says whether block i differs from save Base.
func (l *Layout) IsChanged(i int) bool {
	if l.Changed == nil {
		return l.IsSent(i)
	}
	return l.Changed[i/8]&(1<<(i%8)) != 0
}

// SentCount is the number of blocks whose bytes are in the data.
func (l *Layout) SentCount() int {
	n := 0
	for i := range l.Blocks {
		if l.IsSent(i) {
			n++
		}
	}
	return n
}

// BlockSpan is block i's place in the data file: which region, the
// offset in the region, and the length.
type BlockSpan struct {
	Region  int
	Index   int // the block's index within its region
	RegOff  uint64
	FileOff int64
	Len     int
}

// Spans lists every block in file order.
func (l *Layout) Spans() []BlockSpan {
	out := make([]BlockSpan, 0, l.Blocks)
	for ri, r := range l.Regions {
		for k := range BlocksOf(r.Size, l.Block) {
			off := uint64(k) * l.Block
			out = append(out, BlockSpan{Region: ri, Index: k, RegOff: off, FileOff: r.Off + int64(off), Len: int(min(l.Block, r.Size-off))})
		}
	}
	return out
}

// Validate checks a layout read from outside (an image, the worker).
func (l *Layout) Validate() error {
	if l.Version != LayoutVersion {
		return fmt.Errorf("device memory layout version %d; this gpud reads version %d", l.Version, LayoutVersion)
	}
	if l.Block == 0 || l.Block > 4<<20 {
		return fmt.Errorf("device memory block of %d bytes (want 1 to 4 MiB)", l.Block)
	}
	var off int64
	blocks := 0
	for i, r := range l.Regions {
		if r.Off != off || r.Size == 0 || r.Size > 1<<42 {
			return fmt.Errorf("device memory region %d (%#x) at offset %d, size %d: regions must follow each other", i, r.ID, r.Off, r.Size)
		}
		off += int64(r.Size)
		blocks += BlocksOf(r.Size, l.Block)
	}
	if off != l.Size || blocks != l.Blocks {
		return fmt.Errorf("device memory layout says %d bytes in %d blocks, its regions hold %d in %d", l.Size, l.Blocks, off, blocks)
	}
	if len(l.Sent) != (blocks+7)/8 || (l.Changed != nil && len(l.Changed) != len(l.Sent)) {
		return fmt.Errorf("device memory layout's block bitmap has %d bytes for %d blocks", len(l.Sent), blocks)
	}
	return nil
}

// ParseLayout decodes and validates a layout.
func ParseLayout(b []byte) (*Layout, error) {
	var l Layout
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, fmt.Errorf("device memory layout: %w", err)
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return &l, nil
}

// key names a region across saves.
type key struct {
	kind uint8
	id   uint64
	size uint64
}

func keyOf(r backend.MemRegion) key { return key{r.Kind, r.ID, r.Size} }
