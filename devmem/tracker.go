package devmem

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

// SaveRequest is what gpud asks of a worker's Tracker.
type SaveRequest struct {
	// Base is the save gpud holds complete (in an image or staged on a
	// migration target): blocks unchanged since it are not copied. 0, or
	// a save the worker does not know, copies every block.
	Base uint64 `json:"base,omitempty"`
	// All copies every block into the data even when unchanged (a
	// checkpoint that resumes the session from the copy).
	All bool `json:"all,omitempty"`
	// Release drops the physical memory once it is copied.
	Release bool `json:"release,omitempty"`
	// Into, when set, is the memfd to save into instead of a new one:
	// one gpud sized and faulted in before the session paused, or, with
	// Mirror, the memfd of an earlier save. It travels with the request
	// as a descriptor.
	Into *os.File `json:"-"`
	// Mirror is the save whose data Into holds, every block of it, laid
	// out as that save laid it out; 0 when Into holds nothing. When it is
	// the save Base names and the regions are the same, only the changed
	// blocks are copied and the data is still complete.
	Mirror uint64 `json:"mirror,omitempty"`
	// Snapshot saves the snapshot the last Unpark kept (park.go), not
	// the live memory, while the session runs; with Release the
	// snapshot is dropped after.
	Snapshot bool `json:"snapshot,omitempty"`
}

// Saved is where a save's memfd holds what: the data (Layout.Size bytes)
// at offset 0 and the layout's JSON at LayoutOff.
type Saved struct {
	LayoutOff int64  `json:"layout_off"`
	LayoutLen int64  `json:"layout_len"`
	Gen       uint64 `json:"gen"`
	SentBytes int64  `json:"sent_bytes"` // bytes of the blocks that changed since the base
	Bytes     int64  `json:"bytes"`
	// Where a save's time went: hashing the blocks, preparing the memfd
	// (faulting its pages in and pinning them), copying, releasing the
	// device memory.
	HashNS    int64 `json:"hash_ns,omitempty"`
	PrepareNS int64 `json:"prepare_ns,omitempty"`
	CopyNS    int64 `json:"copy_ns,omitempty"`
	ReleaseNS int64 `json:"release_ns,omitempty"`
	// CopiedBytes is what was copied from the device (less than Bytes
	// when the memfd held the unchanged blocks already), PinnedBytes how
	// much of the memfd was pinned for direct copies; PinError says why
	// some could not be.
	CopiedBytes int64  `json:"copied_bytes,omitempty"`
	PinnedBytes int64  `json:"pinned_bytes,omitempty"`
	PinError    string `json:"pin_error,omitempty"`
	// TrimError says why the contexts' own reservations could not all be
	// trimmed after the release (backend.ContextTrimmer); the save is
	// good all the same, its dump only larger.
	TrimError string `json:"trim_error,omitempty"`
	// PauseNS is how long a pre-copy round held the session's requests
	// back (Tracker.Precopy).
	PauseNS int64 `json:"pause_ns,omitempty"`
}

// hashes are one save's block hashes, by region.
type hashes struct {
	gen  uint64
	m    map[key][]uint64
	regs []key // in layout order
}

// Reloaded is where a reload's time went: backing the regions again,
// looking for blocks of zeros, pinning the memfd, copying, unpinning and
// setting the contexts' trimmed limits back.
type Reloaded struct {
	Bytes    int64 `json:"bytes"`
	Copied   int64 `json:"copied"`
	BackNS   int64 `json:"back_ns"`
	ScanNS   int64 `json:"scan_ns"`
	PinNS    int64 `json:"pin_ns"`
	CopyNS   int64 `json:"copy_ns"`
	UnpinNS  int64 `json:"unpin_ns"`
	UntrimNS int64 `json:"untrim_ns"`
	// Before the copy: reading and checking the layout (LayoutNS),
	// draining the contexts to list the regions (RegionsNS, the first
	// calls into a just-restored driver) and mapping the file (MapNS).
	LayoutNS  int64 `json:"layout_ns"`
	RegionsNS int64 `json:"regions_ns"`
	MapNS     int64 `json:"map_ns"`
}

// Tracker is a worker's memory of what it saved. It lives in the worker's
// memory, so it travels in the checkpoint image with the session: a
// restored worker knows the hashes of the image it came from.
type Tracker struct {
	Block uint64
	seed  uint64
	// committed is a save gpud confirmed (by naming it as a base);
	// pending the latest save, which gpud may still be storing.
	committed, pending *hashes
	// pre is the last pre-copy round: the hashes of the bytes a
	// migration target holds.
	pre *hashes
	// LastReload is where the last Reload's time went.
	LastReload Reloaded
	// Pin has a backend that can pin host memory (backend.HostPinner)
	// pin the memfd so that it copies straight into and out of it. Off
	// by default: on the GPU hosts pinning costs more than it saves
	// (cuMemHostRegister of 1 GiB takes longer than copying it through
	// the backend's own pinned buffers on every core).
	Pin bool
	// unmaps counts the mappings of memfds still being dropped (see
	// unmapLater).
	unmaps sync.WaitGroup
}

// unmapLater drops a memfd's mapping on a thread of its own. Unmapping
// a mapping whose pages were all touched costs about 65 ms a GiB on the
// GPU hosts (the page tables of every 4 KiB page torn down): 540 ms of
// an 8 GiB reload that is otherwise 240 ms, and the session waits for
// the reload. Nothing reads the mapping after a copy; Settle waits for
// the unmaps, and the worker settles before every dump, which must not
// find the mapping.
//
// It unmaps the mapping a piece at a time: munmap holds the process's
// mmap lock for writing while it tears a piece down, and anything in the
// worker that maps memory meanwhile (the Go runtime growing its heap for
// the next request's reply) waited for all of an 8 GiB unmap, 0.5 to
// 0.6 s of a migration's downtime on the H200 after the reload.
func (t *Tracker) unmapLater(b []byte) {
	t.unmaps.Add(1)
	go func() {
		defer t.unmaps.Done()
		for len(b) > 0 {
			n := min(len(b), unmapPiece)
			_ = unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(b)), uintptr(n))
			b = b[n:]
		}
	}()
}

// unmapPiece is what unmapLater unmaps at once: about 4 ms of the lock.
const unmapPiece = 64 << 20

// mapFile maps size bytes of f shared, for reading and writing, for
// unmapLater to drop (it is not known to unix.Munmap).
func mapFile(f *os.File, size int64) ([]byte, error) {
	p, err := unix.MmapPtr(int(f.Fd()), 0, nil, uintptr(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), size), nil
}

// Settle waits until every mapping unmapLater was given is gone.
func (t *Tracker) Settle() { t.unmaps.Wait() }

// NewTracker returns a tracker with a fresh hash seed.
func NewTracker() *Tracker {
	return &Tracker{Block: DefaultBlock, seed: random64()}
}

func random64() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// base returns the hashes of save gen, promoting the pending save when
// gpud names it: it is then complete on gpud's side.
func (t *Tracker) base(gen uint64) *hashes {
	if gen == 0 {
		return nil
	}
	if t.pending != nil && t.pending.gen == gen {
		t.committed = t.pending
	}
	if t.pre != nil && t.pre.gen == gen {
		// The freeze of a live migration: the target holds that round.
		t.committed, t.pre = t.pre, nil
	}
	if t.committed != nil && t.committed.gen == gen {
		return t.committed
	}
	return nil
}

// Save copies dev's memory (what changed since req.Base, or all of it)
// into a memfd (req.Into, or a new one) and returns it with its
// description. On error nothing was released.
func (t *Tracker) Save(ctx context.Context, dev backend.DeviceMemory, req SaveRequest) (*os.File, Saved, error) {
	t0 := time.Now()
	if req.Snapshot {
		s, err := snapshotOf(dev)
		if err != nil {
			return nil, Saved{}, err
		}
		dev = s
	}
	regs, err := dev.MemRegions(ctx)
	if err != nil {
		return nil, Saved{}, fmt.Errorf("list device memory: %w", err)
	}
	l := &Layout{Version: LayoutVersion, Gen: random64(), Block: t.Block}
	next := &hashes{gen: l.Gen, m: make(map[key][]uint64, len(regs))}
	for _, r := range regs {
		l.Regions = append(l.Regions, Region{MemRegion: r, Off: l.Size})
		l.Size += int64(r.Size)
		n := BlocksOf(r.Size, t.Block)
		l.Blocks += n
		hs := make([]uint64, n)
		if err := dev.HashBlocks(ctx, r, t.Block, t.seed, hs); err != nil {
			return nil, Saved{}, fmt.Errorf("hash device memory region %#x: %w", r.ID, err)
		}
		next.m[keyOf(r)] = hs
		next.regs = append(next.regs, keyOf(r))
	}
	hashed := time.Now()
	l.Sent = make([]byte, (l.Blocks+7)/8)
	base := t.base(req.Base)
	if base != nil {
		l.Base = base.gen
	}
	// The memfd holds the base's data already: the unchanged blocks are
	// in place, so every block is present after copying the changed ones.
	mirror := req.Into != nil && base != nil && req.Mirror == base.gen && slices.Equal(base.regs, next.regs)
	l.Changed = make([]byte, len(l.Sent))
	spans := l.Spans()
	for i, s := range spans {
		r := l.Regions[s.Region]
		now := next.m[keyOf(r.MemRegion)][s.Index]
		changed := base == nil
		if !changed {
			old, ok := base.m[keyOf(r.MemRegion)]
			changed = !ok || old[s.Index] != now
		}
		if changed {
			l.Changed[i/8] |= 1 << (i % 8)
		}
		if changed || req.All || mirror {
			l.setSent(i)
		}
	}
	lj, err := json.Marshal(l)
	if err != nil {
		return nil, Saved{}, err
	}
	sv := Saved{LayoutOff: (l.Size + 4095) &^ 4095, LayoutLen: int64(len(lj)), Gen: l.Gen, Bytes: l.Size,
		HashNS: hashed.Sub(t0).Nanoseconds()}
	f := req.Into
	if req.Mirror != 0 && !mirror {
		// An earlier save's data that does not fit this one: its stale
		// blocks must not pass for this save's, so start afresh.
		f = nil
	}
	fresh := f == nil
	if fresh {
		fd, err := unix.MemfdCreate("gpuctl-devmem", unix.MFD_CLOEXEC)
		if err != nil {
			return nil, Saved{}, fmt.Errorf("memfd: %w", err)
		}
		f = os.NewFile(uintptr(fd), "devmem")
	}
	ok := false
	defer func() {
		if !ok && fresh {
			f.Close()
		}
	}()
	if err := f.Truncate(sv.LayoutOff + sv.LayoutLen); err != nil {
		return nil, Saved{}, fmt.Errorf("size the memfd: %w", err)
	}
	copied := time.Now()
	if l.Size > 0 {
		data, err := mapFile(f, l.Size)
		if err != nil {
			return nil, Saved{}, fmt.Errorf("map the memfd: %w", err)
		}
		ps := pieces(spans, func(i int) bool {
			if mirror {
				return l.IsChanged(i)
			}
			return l.IsSent(i)
		})
		sv.CopiedBytes = piecesBytes(ps)
		pr := &prepared{}
		if sv.CopiedBytes >= directMin {
			// gpud's memfd (a scratch one or the session's mirror) has
			// its pages in already: walking them again cost ~30 ms a
			// GiB of the client's pause.
			pr = prepare(ctx, dev, data, ps, fresh, t.Pin)
		}
		copied = time.Now()
		sv.PrepareNS = copied.Sub(hashed).Nanoseconds()
		sv.PinnedBytes = pr.pinned
		if pr.err != nil {
			sv.PinError = pr.err.Error()
		}
		err = Parallel(len(ps), func(i int) error {
			p := ps[i]
			return dev.ReadMem(ctx, l.Regions[p.region].MemRegion, p.regOff, data[p.fileOff:p.fileOff+int64(p.n)])
		})
		pr.release()
		t.unmapLater(data)
		if err != nil {
			return nil, Saved{}, fmt.Errorf("copy device memory: %w", err)
		}
	}
	if _, err := f.WriteAt(lj, sv.LayoutOff); err != nil {
		return nil, Saved{}, fmt.Errorf("write the layout: %w", err)
	}
	for i, s := range spans {
		if l.IsChanged(i) {
			sv.SentBytes += int64(s.Len)
		}
	}
	released := time.Now()
	sv.CopyNS = released.Sub(copied).Nanoseconds()
	if req.Release {
		if err := dev.ReleaseMem(ctx); err != nil {
			// Partly released memory is lost memory: put it all back.
			if rerr := t.reloadFrom(ctx, dev, f, l, true); rerr != nil {
				return nil, Saved{}, fmt.Errorf("release device memory: %w; and putting it back: %v", err, rerr)
			}
			return nil, Saved{}, fmt.Errorf("release device memory: %w", err)
		}
		if tr, ok := dev.(backend.ContextTrimmer); ok {
			if err := tr.TrimContexts(ctx); err != nil {
				sv.TrimError = err.Error()
			}
		}
		sv.ReleaseNS = time.Since(released).Nanoseconds()
	}
	t.pending = next
	ok = true
	return f, sv, nil
}

// Reload backs dev's regions with memory again and copies their contents
// from f, a memfd laid out as Save writes it (by a save of this worker,
// or by gpud from an image) with the layout's JSON at layoutOff. Every
// block must be in the data; the regions must be the worker's own.
func (t *Tracker) Reload(ctx context.Context, dev backend.DeviceMemory, f *os.File, layoutOff, layoutLen int64) error {
	l, err := t.savedFor(ctx, dev, f, layoutOff, layoutLen)
	if err != nil {
		return err
	}
	for i := range l.Blocks {
		if !l.IsSent(i) {
			return fmt.Errorf("saved device memory lacks block %d", i)
		}
	}
	t0 := time.Now()
	if err := dev.RestoreMem(ctx); err != nil {
		return fmt.Errorf("back device memory again: %w", err)
	}
	t.LastReload.BackNS = time.Since(t0).Nanoseconds()
	if err := t.reloadFrom(ctx, dev, f, l, false); err != nil {
		return err
	}
	// Before the session's next launch: its contexts' reservations as
	// the program left them.
	if tr, ok := dev.(backend.ContextTrimmer); ok {
		t1 := time.Now()
		if err := tr.UntrimContexts(ctx); err != nil {
			return fmt.Errorf("set the contexts' limits back: %w", err)
		}
		t.LastReload.UntrimNS = time.Since(t1).Nanoseconds()
	}
	return nil
}

// savedFor reads the layout of the save in f (its JSON at layoutOff) and
// checks that it is of dev's regions; it starts t.LastReload.
func (t *Tracker) savedFor(ctx context.Context, dev backend.DeviceMemory, f *os.File, layoutOff, layoutLen int64) (*Layout, error) {
	if layoutLen <= 0 || layoutLen > 256<<20 {
		return nil, fmt.Errorf("device memory layout of %d bytes", layoutLen)
	}
	tl := time.Now()
	lj := make([]byte, layoutLen)
	if _, err := f.ReadAt(lj, layoutOff); err != nil {
		return nil, fmt.Errorf("read the device memory layout: %w", err)
	}
	l, err := ParseLayout(lj)
	if err != nil {
		return nil, err
	}
	layoutNS := time.Since(tl).Nanoseconds()
	tr := time.Now()
	regs, err := dev.MemRegions(ctx)
	if err != nil {
		return nil, err
	}
	regionsNS := time.Since(tr).Nanoseconds()
	if len(regs) != len(l.Regions) {
		return nil, fmt.Errorf("the saved device memory has %d regions, the session %d", len(l.Regions), len(regs))
	}
	for i, r := range regs {
		if keyOf(r) != keyOf(l.Regions[i].MemRegion) {
			return nil, fmt.Errorf("saved device memory region %d is %d/%#x of %d bytes, the session's %d/%#x of %d bytes",
				i, l.Regions[i].Kind, l.Regions[i].ID, l.Regions[i].Size, r.Kind, r.ID, r.Size)
		}
	}
	t.LastReload = Reloaded{Bytes: l.Size, LayoutNS: layoutNS, RegionsNS: regionsNS}
	return l, nil
}

// Patch copies into dev's memory, backed and holding an earlier save of
// the same regions, the blocks of f's save (laid out as Save writes it)
// that want marks, one bit per block: a migration's target restored the
// session before the freeze, from the staged round, and brings it to the
// freeze's save. Zero blocks are copied too: the memory holds the
// earlier save's bytes, not zeros.
func (t *Tracker) Patch(ctx context.Context, dev backend.DeviceMemory, f *os.File, layoutOff, layoutLen int64, want []byte) error {
	l, err := t.savedFor(ctx, dev, f, layoutOff, layoutLen)
	if err != nil {
		return err
	}
	if len(want) != (l.Blocks+7)/8 {
		return fmt.Errorf("patch of %d bits for %d blocks", 8*len(want), l.Blocks)
	}
	wanted := func(i int) bool { return want[i/8]&(1<<(i%8)) != 0 }
	for i := range l.Blocks {
		if wanted(i) && !l.IsSent(i) {
			return fmt.Errorf("the patch's device memory lacks block %d", i)
		}
	}
	ps := pieces(l.Spans(), wanted)
	st := &t.LastReload
	st.Copied = piecesBytes(ps)
	if len(ps) == 0 {
		return nil
	}
	tm := time.Now()
	data, err := mapFile(f, l.Size)
	if err != nil {
		return fmt.Errorf("map the device memory file: %w", err)
	}
	defer t.unmapLater(data)
	st.MapNS = time.Since(tm).Nanoseconds()
	return t.writePieces(ctx, dev, l, data, ps)
}

// reloadFrom copies every block of l from f into dev.
func (t *Tracker) reloadFrom(ctx context.Context, dev backend.DeviceMemory, f *os.File, l *Layout, restore bool) error {
	if restore {
		if err := dev.RestoreMem(ctx); err != nil {
			return err
		}
	}
	if l.Size == 0 {
		return nil
	}
	tm := time.Now()
	// A backend whose device memory is host memory maps the file's pages
	// in instead, where a region starts on a page of the file.
	mapped := make([]bool, len(l.Regions))
	copied := false
	mm, canMap := dev.(backend.MemMapper)
	for i, r := range l.Regions {
		if canMap && r.Kind == backend.MemAlloc && r.Off%int64(os.Getpagesize()) == 0 && r.Size > 0 {
			mapped[i] = mm.MapMem(ctx, r.MemRegion, f, r.Off) == nil
		}
		copied = copied || !mapped[i]
	}
	if !copied {
		return nil
	}
	// Writable, so that the backend may pin it (pinning wants write
	// access); nothing here writes to it.
	data, err := mapFile(f, l.Size)
	if err != nil {
		return fmt.Errorf("map the device memory file: %w", err)
	}
	defer t.unmapLater(data)
	spans := l.Spans()
	t0 := time.Now()
	t.LastReload.MapNS = t0.Sub(tm).Nanoseconds()
	// Blocks of zeros need no copy: backed-again memory is zeroed.
	zero := make([]bool, len(spans))
	_ = Parallel(len(spans), func(i int) error {
		s := spans[i]
		// A mapped region's blocks are in place already.
		zero[i] = mapped[s.Region] || isZero(data[s.FileOff:s.FileOff+int64(s.Len)])
		return nil
	})
	ps := pieces(spans, func(i int) bool { return !zero[i] })
	st := &t.LastReload
	st.Copied = piecesBytes(ps)
	st.ScanNS = time.Since(t0).Nanoseconds()
	return t.writePieces(ctx, dev, l, data, ps)
}

// writePieces copies ps from data (f's mapping, laid out as l) into dev
// on every core, through pinned memory where the copy is large enough,
// and records where the time went in t.LastReload.
func (t *Tracker) writePieces(ctx context.Context, dev backend.DeviceMemory, l *Layout, data []byte, ps []piece) error {
	st := &t.LastReload
	t1 := time.Now()
	pr := &prepared{}
	if st.Copied >= directMin {
		pr = prepare(ctx, dev, data, ps, false, t.Pin)
	}
	t2 := time.Now()
	st.PinNS = t2.Sub(t1).Nanoseconds()
	err := Parallel(len(ps), func(i int) error {
		p := ps[i]
		return dev.WriteMem(ctx, l.Regions[p.region].MemRegion, p.regOff, data[p.fileOff:p.fileOff+int64(p.n)])
	})
	t3 := time.Now()
	st.CopyNS = t3.Sub(t2).Nanoseconds()
	pr.release()
	st.UnpinNS = time.Since(t3).Nanoseconds()
	return err
}

// MemfdWith returns a memfd named name holding b, read from its start:
// a worker's protocol state passed to or from it as a descriptor.
func MemfdWith(name string, b []byte) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// isZero reports whether b is all zero bytes.
func isZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// Parallel runs fn(0..n-1) on every core and returns the first error:
// the saves, reloads and pre-copy rounds of this package and of gpud's
// pre-copy spread their blocks over the cores with it.
func Parallel(n int, fn func(i int) error) error {
	workers := min(runtime.GOMAXPROCS(0), n)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
		next int
	)
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				if ferr != nil || next >= n {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				if err := fn(i); err != nil {
					mu.Lock()
					if ferr == nil {
						ferr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return ferr
}
