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
}

// precopyBatch bounds the bytes read in one pause of the session: the
// client waits at most this long a copy between two of its requests
// (a few milliseconds on a GPU's bus, copied on every core).
const precopyBatch = 32 << 20

// Precopy reads dev's memory while the session runs and copies the blocks
// that changed since round req.Base into a new memfd laid out as Save
// writes it (Layout.Sent and Layout.Changed mark them). It reads through
// between, which runs a function while no request of the session
// executes, a batch of blocks at a time, so the client pauses for one
// batch's copy at most; it hashes the bytes it read rather than the
// device, so a block that work still in flight on the device tore shows as
// changed at the next round or at the freeze (Save with Base set to this
// round's Gen), which sends it again. Nothing is released.
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
	}
	l.Sent = make([]byte, (l.Blocks+7)/8)
	l.Changed = make([]byte, len(l.Sent))

	fd, err := unix.MemfdCreate("gpuctl-devmem", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, Saved{}, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "devmem")
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	spans := l.Spans()
	buf := make([]byte, precopyBatch+int(t.Block))
	var sent int64
	for lo := 0; lo < len(spans); {
		if err := ctx.Err(); err != nil {
			return nil, Saved{}, err
		}
		// One batch: consecutive blocks up to precopyBatch bytes.
		hi, n := lo, 0
		for hi < len(spans) && (hi == lo || n+spans[hi].Len <= precopyBatch) {
			n += spans[hi].Len
			hi++
		}
		failed := make([]bool, hi-lo)
		offs := make([]int, hi-lo)
		for i, pos := lo, 0; i < hi; i++ {
			offs[i-lo] = pos
			pos += spans[i].Len
		}
		// The batch's blocks are read on every core, as a save reads
		// them: one copy at a time left the bus idle between blocks and
		// the client waiting the longer for it.
		hold(func() {
			_ = parallel(hi-lo, func(k int) error {
				s := spans[lo+k]
				r := l.Regions[s.Region].MemRegion
				if _, alive := next.m[keyOf(r)]; !alive {
					failed[k] = true
				} else if dev.ReadMem(ctx, r, s.RegOff, buf[offs[k]:offs[k]+s.Len]) != nil {
					failed[k] = true
				}
				return nil
			})
		})
		err := parallel(hi-lo, func(k int) error {
			if failed[k] {
				return nil
			}
			s := spans[lo+k]
			b := buf[offs[k] : offs[k]+s.Len]
			h := HashBlock(t.seed, b)
			k0 := keyOf(l.Regions[s.Region].MemRegion)
			next.m[k0][s.Index] = h // distinct elements: no race
			if base != nil {
				if old, ok := base.m[k0]; ok && old[s.Index] == h {
					return nil
				}
			}
			_, err := f.WriteAt(b, s.FileOff)
			return err
		})
		if err != nil {
			return nil, Saved{}, fmt.Errorf("copy device memory: %w", err)
		}
		for k := range failed {
			if failed[k] {
				// The region went away while the round ran (the client
				// freed it): nothing of it counts as sent, and the freeze
				// sends it whole if it is back by then.
				delete(next.m, keyOf(l.Regions[spans[lo+k].Region].MemRegion))
			}
		}
		lo = hi
	}
	// Which blocks went into the memfd: the ones whose hash is new.
	for i, s := range spans {
		k0 := keyOf(l.Regions[s.Region].MemRegion)
		hs, alive := next.m[k0]
		if !alive {
			continue
		}
		if base != nil {
			if old, ok := base.m[k0]; ok && old[s.Index] == hs[s.Index] {
				continue
			}
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
