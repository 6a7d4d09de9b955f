package devmem

import (
	"context"
	"errors"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

// Copies between the device and the memfd are pieces of consecutive
// blocks, not blocks: a copy of 1 MiB costs about as much in calls and
// waits as it takes on the bus, one of 32 MiB runs at the bus's speed. The
// pieces go to every core (each drives its own stream), and where the
// backend can pin host memory (backend.HostPinner) the memfd's pages are
// faulted in on every core and pinned first, so that the device copies
// straight into them with no bounce buffer and no page fault.

// copyPiece bounds one copy.
const copyPiece = 32 << 20

// directMin is the least a save or reload copies before pinning pays: a
// few changed blocks go through the backend's own buffers.
const directMin = 64 << 20

// piece is a run of consecutive blocks of one region, contiguous in the
// data file too.
type piece struct {
	region  int
	regOff  uint64
	fileOff int64
	n       int
	span    int // the index in spans of its first block; the rest follow
}

// pieces groups the blocks for which want holds into pieces of at most
// copyPiece bytes that do not cross a backend.PinPart boundary of the
// data (each part is pinned on its own).
func pieces(spans []BlockSpan, want func(i int) bool) []piece {
	var out []piece
	for i, s := range spans {
		if !want(i) {
			continue
		}
		if k := len(out) - 1; k >= 0 {
			p := &out[k]
			end := s.FileOff + int64(s.Len)
			if p.region == s.Region && p.fileOff+int64(p.n) == s.FileOff && p.n+s.Len <= copyPiece &&
				p.fileOff/backend.PinPart == (end-1)/backend.PinPart {
				p.n += s.Len
				continue
			}
		}
		out = append(out, piece{region: s.Region, regOff: s.RegOff, fileOff: s.FileOff, n: s.Len, span: i})
	}
	return out
}

// piecesBytes sums the pieces' lengths.
func piecesBytes(ps []piece) int64 {
	var n int64
	for _, p := range ps {
		n += int64(p.n)
	}
	return n
}

// prepared is the memfd mapping made ready for direct copies.
type prepared struct {
	unpins []func()
	pinned int64 // bytes pinned
	err    error // the first pinning failure (copies then go through the backend's buffers)
}

// prepare faults in the pieces' pages (when populate) and, when pin, pins
// the backend.PinPart parts of data that the pieces touch, on every core. A
// part that cannot be pinned is copied the slow way; nothing fails here.
func prepare(ctx context.Context, dev backend.DeviceMemory, data []byte, ps []piece, populate, pin bool) *prepared {
	pr := &prepared{}
	pinner, canPin := dev.(backend.HostPinner)
	canPin = canPin && pin
	if len(ps) == 0 || (!canPin && !populate) {
		return pr
	}
	var mu sync.Mutex
	if populate {
		// Large pages where the host offers them for shared memory:
		// fewer faults and page-table entries. Harmless when refused.
		_ = unix.Madvise(data, unix.MADV_HUGEPAGE)
		// Fault the pieces' pages in now, a few MiB a core at a time on
		// every core, rather than one by one under the copies (fresh
		// memfd pages fill at about 1.4 GB/s a core on the GPU hosts;
		// whole pinning parts left a small copy to one core). A kernel
		// without it faults them in during the copies.
		const slice = 4 << 20
		var slices [][2]int64
		for _, p := range ps {
			for off := p.fileOff; off < p.fileOff+int64(p.n); off += slice {
				slices = append(slices, [2]int64{off, min(off+slice, p.fileOff+int64(p.n))})
			}
		}
		_ = Parallel(len(slices), func(i int) error {
			if err := unix.Madvise(data[slices[i][0]:slices[i][1]], unix.MADV_POPULATE_WRITE); err != nil && !errors.Is(err, unix.EINVAL) {
				mu.Lock()
				if pr.err == nil {
					pr.err = err
				}
				mu.Unlock()
			}
			return nil
		})
	}
	if !canPin {
		return pr
	}
	var parts []int64
	for _, p := range ps {
		k := p.fileOff / backend.PinPart
		if len(parts) == 0 || parts[len(parts)-1] != k {
			parts = append(parts, k)
		}
	}
	_ = Parallel(len(parts), func(i int) error {
		lo := parts[i] * backend.PinPart
		b := data[lo:min(lo+backend.PinPart, int64(len(data)))]
		unpin, err := pinner.PinHost(ctx, b)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if pr.err == nil {
				pr.err = err
			}
			return nil
		}
		pr.unpins = append(pr.unpins, unpin)
		pr.pinned += int64(len(b))
		return nil
	})
	return pr
}

// release unpins what prepare pinned.
func (pr *prepared) release() {
	_ = Parallel(len(pr.unpins), func(i int) error {
		pr.unpins[i]()
		return nil
	})
	pr.unpins = nil
}
