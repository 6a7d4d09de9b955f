// Package chunker splits checkpoint files into chunks whose boundaries
// survive the ways memory images change between two checkpoints.
//
// CRIU writes a process's memory as pages-*.img: the contents of every
// dumped page, in the order of its pagemap. Between two checkpoints pages
// change in place, and mappings grow or appear, which shifts every later
// page in the file by whole pages. Fixed-size chunks keep the in-place case
// cheap but lose everything after a shift; byte-granular content-defined
// chunking survives shifts but cuts pages in half and is slow. This
// package cuts only at page boundaries and decides where by looking at the
// page content (a page-aligned content-defined chunker):
//
//   - a run of all-zero pages is one zero chunk, stored as nothing;
//   - otherwise a chunk ends after a page whose fingerprint has the low
//     bits of the mask clear, once the chunk has MinPages, and always at
//     MaxPages.
//
// A page changed in place changes only its own chunk (and its neighbour if
// it moves a boundary); a shift by whole pages re-finds the same
// boundaries after at most one chunk. docs/store.md has the measurements.
package chunker

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// PageSize is the unit boundaries fall on.
const PageSize = 4096

// MaxZeroRun bounds one zero chunk, so sizes fit in 32 bits.
const MaxZeroRun = 1 << 30

// Params shape the chunks.
type Params struct {
	MinPages int // smallest data chunk, in pages (a file's tail may be smaller)
	AvgPages int // expected data chunk size, in pages; a power of two
	MaxPages int // largest data chunk, in pages
	// Fixed cuts every AvgPages pages instead, ignoring content (zero
	// chunks are still detected per AvgPages block). It exists for
	// comparison.
	Fixed bool
}

// Default is what the store uses: 4 KiB to 128 KiB data chunks, 16 KiB on
// average.
var Default = Params{MinPages: 1, AvgPages: 4, MaxPages: 32}

// String names the parameters in manifests.
func (p Params) String() string {
	if p.Fixed {
		return fmt.Sprintf("fixed/%d", p.AvgPages*PageSize)
	}
	return fmt.Sprintf("page-cdc/%d-%d-%d", p.MinPages*PageSize, p.AvgPages*PageSize, p.MaxPages*PageSize)
}

// Validate checks the parameters.
func (p Params) Validate() error {
	if p.AvgPages < 1 || p.AvgPages&(p.AvgPages-1) != 0 {
		return fmt.Errorf("chunker: AvgPages %d is not a power of two", p.AvgPages)
	}
	if !p.Fixed && (p.MinPages < 1 || p.MinPages > p.AvgPages || p.MaxPages < p.AvgPages) {
		return fmt.Errorf("chunker: want 1 <= MinPages <= AvgPages <= MaxPages, got %d, %d, %d", p.MinPages, p.AvgPages, p.MaxPages)
	}
	return nil
}

// Chunk is a piece of the input.
type Chunk struct {
	Off  int64
	Len  int
	Zero bool // every byte is zero
}

var zeroPage [PageSize]byte

func isZero(b []byte) bool {
	for len(b) >= PageSize {
		if !bytes.Equal(b[:PageSize], zeroPage[:]) {
			return false
		}
		b = b[PageSize:]
	}
	return bytes.Equal(b, zeroPage[:len(b)])
}

// fingerprint mixes eight words spread over the page. It only places
// boundaries, so it needs to be cheap and well spread, not collision-proof.
func fingerprint(page []byte) uint64 {
	var h uint64
	step := len(page) / 8 &^ 7
	for i := range 8 {
		w := binary.LittleEndian.Uint64(page[i*step:])
		h = (h ^ w) * 0x9e3779b97f4a7c15
		h ^= h >> 29
	}
	return h
}

// Split calls emit for each chunk of data, in order; the chunks cover data
// exactly. base is added to every offset.
func Split(data []byte, base int64, p Params, emit func(Chunk) error) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if p.Fixed {
		return splitFixed(data, base, p, emit)
	}
	mask := uint64(p.AvgPages - 1)
	start, n := 0, 0 // current chunk: start offset, pages in it
	zero := false
	flush := func(end int) error {
		if end == start {
			return nil
		}
		err := emit(Chunk{Off: base + int64(start), Len: end - start, Zero: zero})
		start, n = end, 0
		return err
	}
	for off := 0; off < len(data); off += PageSize {
		page := data[off:min(off+PageSize, len(data))]
		z := isZero(page)
		if n > 0 && z != zero {
			if err := flush(off); err != nil {
				return err
			}
		}
		zero = z
		n++
		if z {
			if (n+1)*PageSize > MaxZeroRun {
				if err := flush(off + len(page)); err != nil {
					return err
				}
			}
			continue
		}
		if n >= p.MaxPages || (n >= p.MinPages && len(page) == PageSize && fingerprint(page)&mask == 0) {
			if err := flush(off + len(page)); err != nil {
				return err
			}
		}
	}
	return flush(len(data))
}

func splitFixed(data []byte, base int64, p Params, emit func(Chunk) error) error {
	size := p.AvgPages * PageSize
	for off := 0; off < len(data); off += size {
		b := data[off:min(off+size, len(data))]
		if err := emit(Chunk{Off: base + int64(off), Len: len(b), Zero: isZero(b)}); err != nil {
			return err
		}
	}
	return nil
}

// Cuts returns offsets, starting with 0 and rising, at which Split is
// certain to end a chunk, about one per segment bytes. Splitting each
// piece between two consecutive cuts (and the last cut and the end) on its
// own, with base set to the piece's offset, gives exactly the chunks Split
// gives for the whole of data; so the pieces can be chunked in parallel
// without changing a single boundary, and dedup against images chunked in
// one piece is unaffected.
//
// A cut is certain where the state Split carries from page to page is
// reset whatever came before: after a non-zero page whose fingerprint
// ends a chunk (with MinPages 1 any chunk may end there), and where a zero
// run starts or ends. Each segment takes the first such place in it;
// a segment without one (a long zero run) joins the one before. Fixed
// chunking cuts at multiples of the chunk size. Parameters under which no
// place is certain (MinPages above 1) give just 0: one piece.
func Cuts(data []byte, p Params, segment int) []int64 {
	cuts := []int64{0}
	if p.Validate() != nil || segment <= 0 || len(data) <= segment {
		return cuts
	}
	if p.Fixed {
		size := p.AvgPages * PageSize
		step := max(segment/size, 1) * size
		for off := step; off < len(data); off += step {
			cuts = append(cuts, int64(off))
		}
		return cuts
	}
	if p.MinPages != 1 {
		return cuts
	}
	mask := uint64(p.AvgPages - 1)
	segment = max(segment&^(PageSize-1), PageSize)
	for s := segment; s < len(data); s += segment {
		end := min(s+segment, len(data))
		for off := s; off < end; off += PageSize {
			prev := data[off-PageSize : off]
			prevZero := isZero(prev)
			if (!prevZero && fingerprint(prev)&mask == 0) || prevZero != isZero(data[off:min(off+PageSize, len(data))]) {
				cuts = append(cuts, int64(off))
				break
			}
		}
	}
	return cuts
}
