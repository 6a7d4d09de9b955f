package devmem

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

// PrecopyRequest asks a worker for one round of a live migration's
// pre-copy: the blocks that changed since the previous round, read while
// the session runs.
type PrecopyRequest struct {
	// Base is the previous round (its Saved.Gen); 0, or a round the
	// worker does not know, copies every block.
	Base uint64 `json:"base,omitempty"`
	// Into, when set, is the memfd of an earlier round, which gpud is
	// done with, to copy into instead of a new one: its pages are there
	// already, and faulting in gigabytes of a new memfd took most of a
	// round's copy. It travels with the request as a descriptor; the
	// round's memfd is then that one.
	Into *os.File `json:"-"`
}

// precopyBatch bounds the bytes read in one pause of the session: the
// client waits at most this long a copy between two of its requests (a
// few milliseconds on a GPU's bus, the pieces copied on every core).
const precopyBatch = 64 << 20

// Precopy copies the blocks of dev's memory that changed since round
// req.Base into a new memfd laid out as Save writes it (Layout.Sent and
// Layout.Changed mark them), while the session runs. Every call into dev
// goes through between, which runs a function while no request of the
// session executes, so the client pauses for one step at a time: the
// device's hashes of a region, or one batch of copies.
//
// With a base, the device hashes every block first (a kernel on the GPU)
// and only the blocks whose hash differs from the base's are read; the
// first round reads everything. Blocks are copied as a save copies them:
// runs of consecutive blocks in pieces, on every core, straight into the
// memfd, whose pages are faulted in before the pause. The round records
// the hashes of the bytes it read, not the device's: a block that work
// still in flight on the device tore shows as changed at the next round or
// at the freeze (Save with Base set to this round's Gen), which sends it
// again. Nothing is released.
//
// Saved.PauseNS says how long the session was held back in all.
func (t *Tracker) Precopy(ctx context.Context, dev backend.DeviceMemory, between func(func()), req PrecopyRequest) (*os.File, Saved, error) {
	var (
		regs []backend.MemRegion
		err  error
		held time.Duration
	)
	hold := func(f func()) {
		between(func() {
			t0 := time.Now()
			f()
			held += time.Since(t0)
		})
	}
	hold(func() { regs, err = dev.MemRegions(ctx) })
	if err != nil {
		return nil, Saved{}, fmt.Errorf("list device memory: %w", err)
	}
	var base *hashes
	if req.Base != 0 && t.pre != nil && t.pre.gen == req.Base {
		base = t.pre
	}
	l := &Layout{Version: LayoutVersion, Gen: random64(), Block: t.Block}
	if base != nil {
		l.Base = base.gen
	}
	next := &hashes{gen: l.Gen, m: make(map[key][]uint64, len(regs))}
	for _, r := range regs {
		l.Regions = append(l.Regions, Region{MemRegion: r, Off: l.Size})
		l.Size += int64(r.Size)
		n := BlocksOf(r.Size, t.Block)
		l.Blocks += n
		next.m[keyOf(r)] = make([]uint64, n)
		// The regions in layout order: a freeze's save into a mirror of
		// this round (SaveRequest.Mirror) checks it has the same ones.
		next.regs = append(next.regs, keyOf(r))
	}
	l.Sent = make([]byte, (l.Blocks+7)/8)
	l.Changed = make([]byte, len(l.Sent))
	spans := l.Spans()
	gone := make([]bool, len(l.Regions)) // freed while the round ran

	// Which blocks to read: all of them, or those the device says changed.
	want := make([]bool, len(spans))
	first := 0 // the first span of region ri
	for ri, rg := range l.Regions {
		k := keyOf(rg.MemRegion)
		hs := next.m[k]
		old, known := []uint64(nil), false
		if base != nil {
			old, known = base.m[k]
		}
		if known {
			var herr error
			hold(func() { herr = dev.HashBlocks(ctx, rg.MemRegion, t.Block, t.seed, hs) })
			if herr != nil {
				// The client freed it meanwhile: nothing of it counts
				// as sent, and the freeze sends it whole if it is back.
				gone[ri] = true
			}
		}
		for j := range hs {
			switch {
			case gone[ri]:
			case known && old[j] == hs[j]:
				// Unchanged: the target holds these bytes already.
			default:
				want[first+j] = true
			}
		}
		first += len(hs)
	}

	f := req.Into
	if f == nil {
		fd, err := unix.MemfdCreate("gpuctl-devmem", unix.MFD_CLOEXEC)
		if err != nil {
			return nil, Saved{}, fmt.Errorf("memfd: %w", err)
		}
		f = os.NewFile(uintptr(fd), "devmem")
	}
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	ps := pieces(spans, func(i int) bool { return want[i] })
	if len(ps) > 0 {
		if err := f.Truncate(l.Size); err != nil {
			return nil, Saved{}, fmt.Errorf("size the memfd: %w", err)
		}
		data, err := mapFile(f, l.Size)
		if err != nil {
			return nil, Saved{}, fmt.Errorf("map the memfd: %w", err)
		}
		err = t.precopyPieces(ctx, dev, hold, l, spans, ps, data, next, gone)
		t.unmapLater(data)
		if err != nil {
			return nil, Saved{}, err
		}
	}
	var sent int64
	for i, s := range spans {
		k := keyOf(l.Regions[s.Region].MemRegion)
		if gone[s.Region] {
			delete(next.m, k)
			continue
		}
		if !want[i] {
			next.m[k][s.Index] = base.m[k][s.Index]
			continue
		}
		l.setSent(i)
		l.Changed[i/8] |= 1 << (i % 8)
		sent += int64(s.Len)
	}
	lj, err := json.Marshal(l)
	if err != nil {
		return nil, Saved{}, err
	}
	sv := Saved{LayoutOff: (l.Size + 4095) &^ 4095, LayoutLen: int64(len(lj)), Gen: l.Gen, Bytes: l.Size, SentBytes: sent}
	if err := f.Truncate(sv.LayoutOff + sv.LayoutLen); err != nil {
		return nil, Saved{}, fmt.Errorf("size the memfd: %w", err)
	}
	if _, err := f.WriteAt(lj, sv.LayoutOff); err != nil {
		return nil, Saved{}, fmt.Errorf("write the layout: %w", err)
	}
	sv.PauseNS = held.Nanoseconds()
	t.pre = next
	ok = true
	return f, sv, nil
}

// precopyPieces copies ps into data a batch at a time, each batch in one
// pause on every core, and then hashes the blocks it read into next while
// the session runs. A piece that cannot be read marks its region gone.
func (t *Tracker) precopyPieces(ctx context.Context, dev backend.DeviceMemory, hold func(func()), l *Layout, spans []BlockSpan, ps []piece, data []byte, next *hashes, gone []bool) error {
	// Every piece's pages faulted in on every core before any pause.
	prepare(ctx, dev, data, ps, true, false).release()
	for lo := 0; lo < len(ps); {
		if err := ctx.Err(); err != nil {
			return err
		}
		hi, n := lo, 0
		for hi < len(ps) && (hi == lo || n+ps[hi].n <= precopyBatch) {
			n += ps[hi].n
			hi++
		}
		batch := ps[lo:hi]
		failed := make([]bool, len(batch))
		hold(func() {
			_ = Parallel(len(batch), func(k int) error {
				p := batch[k]
				if gone[p.region] {
					failed[k] = true
					return nil
				}
				if dev.ReadMem(ctx, l.Regions[p.region].MemRegion, p.regOff, data[p.fileOff:p.fileOff+int64(p.n)]) != nil {
					failed[k] = true
				}
				return nil
			})
		})
		for k, p := range batch {
			if failed[k] {
				gone[p.region] = true
			}
		}
		// The hashes of what was read, block by block, on every core.
		var blocks []int
		for k, p := range batch {
			if failed[k] {
				continue
			}
			// A piece's blocks are consecutive spans from its first.
			for i, n := p.span, 0; n < p.n; i++ {
				blocks = append(blocks, i)
				n += spans[i].Len
			}
		}
		_ = Parallel(len(blocks), func(k int) error {
			s := spans[blocks[k]]
			h := HashBlock(t.seed, data[s.FileOff:s.FileOff+int64(s.Len)])
			next.m[keyOf(l.Regions[s.Region].MemRegion)][s.Index] = h // distinct elements: no race
			return nil
		})
		lo = hi
	}
	return nil
}
