package devmem

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

// fakeDev is device memory in host slices that counts what it copies and
// how, and can pin host memory (backend.HostPinner) when pin is set.
type fakeDev struct {
	mu       sync.Mutex
	regs     []backend.MemRegion
	mem      map[uint64][]byte
	released bool
	pin      bool
	pinned   map[uintptr]uintptr
	read     int64 // bytes ReadMem copied
	direct   int64 // of them, into pinned memory
	written  int64 // bytes WriteMem copied
	wdirect  int64
	unpinned int
}

func newFakeDev(sizes ...uint64) *fakeDev {
	d := &fakeDev{mem: map[uint64][]byte{}, pinned: map[uintptr]uintptr{}}
	rng := rand.New(rand.NewPCG(1, 2))
	base := uint64(1 << 32)
	for _, n := range sizes {
		b := make([]byte, n)
		for i := 0; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
		}
		d.regs = append(d.regs, backend.MemRegion{Kind: backend.MemAlloc, ID: base, Size: n})
		d.mem[base] = b
		base += n + 1<<30
	}
	return d
}

func (d *fakeDev) MemRegions(context.Context) ([]backend.MemRegion, error) { return d.regs, nil }

func (d *fakeDev) isPinned(b []byte) bool {
	lo := uintptr(unsafe.Pointer(&b[0]))
	for s, e := range d.pinned {
		if s <= lo && lo+uintptr(len(b)) <= e {
			return true
		}
	}
	return false
}

func (d *fakeDev) ReadMem(_ context.Context, r backend.MemRegion, off uint64, dst []byte) error {
	copy(dst, d.mem[r.ID][off:])
	d.mu.Lock()
	defer d.mu.Unlock()
	d.read += int64(len(dst))
	if d.isPinned(dst) {
		d.direct += int64(len(dst))
	}
	return nil
}

func (d *fakeDev) WriteMem(_ context.Context, r backend.MemRegion, off uint64, src []byte) error {
	copy(d.mem[r.ID][off:], src)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.written += int64(len(src))
	if d.isPinned(src) {
		d.wdirect += int64(len(src))
	}
	return nil
}

func (d *fakeDev) HashBlocks(_ context.Context, r backend.MemRegion, block, seed uint64, out []uint64) error {
	b := d.mem[r.ID]
	for i := range out {
		lo := uint64(i) * block
		out[i] = HashBlock(seed, b[lo:min(lo+block, uint64(len(b)))])
	}
	return nil
}

func (d *fakeDev) ReleaseMem(context.Context) error {
	for _, b := range d.mem {
		clear(b)
	}
	d.released = true
	return nil
}

func (d *fakeDev) RestoreMem(context.Context) error { d.released = false; return nil }

// pinningDev adds backend.HostPinner to fakeDev.
type pinningDev struct{ *fakeDev }

func (d pinningDev) PinHost(_ context.Context, b []byte) (func(), error) {
	lo := uintptr(unsafe.Pointer(&b[0]))
	d.mu.Lock()
	d.pinned[lo] = lo + uintptr(len(b))
	d.mu.Unlock()
	return func() {
		d.mu.Lock()
		delete(d.pinned, lo)
		d.unpinned++
		d.mu.Unlock()
	}, nil
}

func (d *fakeDev) snapshot() map[uint64][]byte {
	out := map[uint64][]byte{}
	for k, v := range d.mem {
		out[k] = bytes.Clone(v)
	}
	return out
}

func (d *fakeDev) equal(t *testing.T, want map[uint64][]byte) {
	t.Helper()
	for k, v := range want {
		if !bytes.Equal(d.mem[k], v) {
			t.Fatalf("region %#x differs from what was saved", k)
		}
	}
}

// fileData reads the data part of a save's memfd.
func fileData(t *testing.T, f *os.File, sv Saved) []byte {
	t.Helper()
	b := make([]byte, sv.Bytes)
	if _, err := f.ReadAt(b, 0); err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPieces(t *testing.T) {
	const mib = 1 << 20
	l := &Layout{Block: mib}
	for _, n := range []uint64{3 * mib, 40 * mib, mib / 2, (backend.PinPart / mib) * mib} {
		l.Regions = append(l.Regions, Region{MemRegion: backend.MemRegion{ID: uint64(len(l.Regions)) << 40, Size: n}, Off: l.Size})
		l.Size += int64(n)
		l.Blocks += BlocksOf(n, mib)
	}
	spans := l.Spans()
	skip := map[int]bool{1: true} // a gap in region 0
	ps := pieces(spans, func(i int) bool { return !skip[i] })
	var total int64
	for i, p := range ps {
		total += int64(p.n)
		if p.n > copyPiece {
			t.Errorf("piece %d is %d bytes, more than %d", i, p.n, copyPiece)
		}
		// A block that itself straddles a boundary (after a region of
		// half a block) is a piece of its own.
		if p.n > mib && p.fileOff/backend.PinPart != (p.fileOff+int64(p.n)-1)/backend.PinPart {
			t.Errorf("piece %d (%d+%d) crosses a pinned part's boundary", i, p.fileOff, p.n)
		}
		r := l.Regions[p.region]
		if p.fileOff != r.Off+int64(p.regOff) || p.regOff+uint64(p.n) > r.Size {
			t.Errorf("piece %d (%+v) is not within its region %+v", i, p, r)
		}
		if i > 0 {
			q := ps[i-1]
			if q.region == p.region && q.fileOff+int64(q.n) == p.fileOff && q.n+p.n <= copyPiece &&
				q.fileOff/backend.PinPart == (p.fileOff+int64(p.n)-1)/backend.PinPart {
				t.Errorf("pieces %d and %d could have been one", i-1, i)
			}
		}
	}
	if want := l.Size - mib; total != want {
		t.Errorf("pieces cover %d bytes, want %d (all but the skipped block)", total, want)
	}
	if ps[0].n != mib || ps[1].regOff != 2*mib {
		t.Errorf("the skipped block did not split region 0: %+v %+v", ps[0], ps[1])
	}
}

// TestSaveIntoMirror: a save into the memfd of the previous save (its
// mirror) copies only the changed blocks, yet leaves every block in the
// memfd, and the session reloads from it bit-exact.
func TestSaveIntoMirror(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name           string
		canPin, usePin bool
	}{{"ring", false, false}, {"pinned", true, true}, {"can pin, does not", true, false}} {
		pin := tc.canPin && tc.usePin
		t.Run(tc.name, func(t *testing.T) {
			fd := newFakeDev(80<<20, 3<<20, 512<<10)
			var dev backend.DeviceMemory = fd
			if tc.canPin {
				dev = pinningDev{fd}
			}
			tr := NewTracker()
			tr.Pin = tc.usePin
			want := fd.snapshot()
			f1, sv1, err := tr.Save(ctx, dev, SaveRequest{All: true, Release: true})
			if err != nil {
				t.Fatal(err)
			}
			defer f1.Close()
			if sv1.CopiedBytes != sv1.Bytes || fd.read != sv1.Bytes {
				t.Fatalf("first save copied %d (device read %d) of %d bytes", sv1.CopiedBytes, fd.read, sv1.Bytes)
			}
			if pin && (sv1.PinnedBytes == 0 || fd.direct != fd.read) {
				t.Errorf("pinned: %d bytes pinned, %d of %d copied directly", sv1.PinnedBytes, fd.direct, fd.read)
			}
			if !pin && fd.direct != 0 {
				t.Errorf("a device that cannot pin copied %d bytes directly", fd.direct)
			}
			if len(fd.pinned) != 0 || (pin && fd.unpinned == 0) {
				t.Errorf("%d pinned ranges left after the save, %d unpinned", len(fd.pinned), fd.unpinned)
			}
			if err := tr.Reload(ctx, dev, f1, sv1.LayoutOff, sv1.LayoutLen); err != nil {
				t.Fatal(err)
			}
			fd.equal(t, want)
			if pin && fd.wdirect != fd.written {
				t.Errorf("reload: %d of %d bytes copied directly", fd.wdirect, fd.written)
			}

			// One byte changes; the next save goes into the first one's
			// memfd, which holds every block of it.
			fd.mem[fd.regs[0].ID][70<<20] ^= 0xff
			want = fd.snapshot()
			fd.read = 0
			f2, sv2, err := tr.Save(ctx, dev, SaveRequest{Base: sv1.Gen, All: true, Release: true, Into: f1, Mirror: sv1.Gen})
			if err != nil {
				t.Fatal(err)
			}
			if sv2.CopiedBytes != DefaultBlock || fd.read != DefaultBlock || sv2.SentBytes != DefaultBlock {
				t.Errorf("a save into the mirror after a one-byte change copied %d (device read %d, changed %d) bytes; want one block",
					sv2.CopiedBytes, fd.read, sv2.SentBytes)
			}
			if f2 != f1 {
				t.Errorf("the save did not go into the memfd passed")
			}
			var all []byte
			for _, r := range fd.regs {
				all = append(all, want[r.ID]...)
			}
			if !bytes.Equal(fileData(t, f2, sv2), all) {
				t.Fatal("the mirror does not hold the device's memory after the save")
			}
			if err := tr.Reload(ctx, dev, f2, sv2.LayoutOff, sv2.LayoutLen); err != nil {
				t.Fatal(err)
			}
			fd.equal(t, want)

			// A mirror of another save is not trusted: a fresh memfd,
			// every block copied.
			fd.read = 0
			f3, sv3, err := tr.Save(ctx, dev, SaveRequest{Base: sv2.Gen, All: true, Into: f2, Mirror: sv1.Gen})
			if err != nil {
				t.Fatal(err)
			}
			defer f3.Close()
			if f3 == f2 || fd.read != sv3.Bytes {
				t.Errorf("a stale mirror was saved into (same file %v, %d of %d bytes read)", f3 == f2, fd.read, sv3.Bytes)
			}
		})
	}
}

// TestSaveIntoScratch: a save into a memfd gpud made ahead (larger than
// needed) shrinks it to the save's size and fills it.
func TestSaveIntoScratch(t *testing.T) {
	ctx := context.Background()
	fd := newFakeDev(5<<20, 1<<20)
	mfd, err := unix.MemfdCreate("scratch", 0)
	if err != nil {
		t.Fatal(err)
	}
	scratch := os.NewFile(uintptr(mfd), "scratch")
	defer scratch.Close()
	if err := scratch.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	tr := NewTracker()
	f, sv, err := tr.Save(ctx, fd, SaveRequest{Into: scratch})
	if err != nil {
		t.Fatal(err)
	}
	if f != scratch {
		t.Fatal("the save did not go into the memfd passed")
	}
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() != sv.LayoutOff+sv.LayoutLen {
		t.Errorf("memfd of %d bytes, want %d", st.Size(), sv.LayoutOff+sv.LayoutLen)
	}
	var all []byte
	for _, r := range fd.regs {
		all = append(all, fd.mem[r.ID]...)
	}
	if !bytes.Equal(fileData(t, f, sv), all) {
		t.Fatal("the memfd does not hold the device's memory")
	}
}

// TestSettleLeavesNoMapping checks what a dump relies on: once Settle
// returns, no mapping of a save's or a reload's memfd is left in the
// process (the unmaps run on threads of their own, off the session's
// wait), whatever the copies did.
func TestSettleLeavesNoMapping(t *testing.T) {
	ctx := context.Background()
	fd := newFakeDev(80<<20, 3<<20)
	tr := NewTracker()
	want := fd.snapshot()
	f, sv, err := tr.Save(ctx, fd, SaveRequest{All: true, Release: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := tr.Reload(ctx, fd, f, sv.LayoutOff, sv.LayoutLen); err != nil {
		t.Fatal(err)
	}
	fd.equal(t, want)
	tr.Settle()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.Contains(line, "memfd:gpuctl-devmem") {
			t.Errorf("a memfd mapping is left after Settle: %s", line)
		}
	}
}

// TestPatch: a device holding an earlier save is brought to a later one
// by copying only the blocks marked, zero blocks included; a patch of
// other regions, of the wrong size or naming a block the save lacks is
// refused.
func TestPatch(t *testing.T) {
	ctx := context.Background()
	fd := newFakeDev(4<<20, 2<<20)
	tr := NewTracker()
	f1, sv1, err := tr.Save(ctx, fd, SaveRequest{All: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	old := fd.snapshot()
	// The session moves on: block 1 rewritten, block 4 (region 2's
	// first) zeroed.
	r0, r1 := fd.regs[0].ID, fd.regs[1].ID
	for i := range DefaultBlock {
		fd.mem[r0][DefaultBlock+i] ^= 0x5a
		fd.mem[r1][i] = 0
	}
	want := fd.snapshot()
	f2, sv2, err := tr.Save(ctx, fd, SaveRequest{All: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	// A device restored from the first save.
	for id, b := range old {
		copy(fd.mem[id], b)
	}
	fd.written = 0
	patch := []byte{1<<1 | 1<<4}
	if err := tr.Patch(ctx, fd, f2, sv2.LayoutOff, sv2.LayoutLen, patch); err != nil {
		t.Fatal(err)
	}
	fd.equal(t, want)
	if fd.written != 2*DefaultBlock || tr.LastReload.Copied != 2*DefaultBlock {
		t.Errorf("the patch wrote %d bytes (reported %d), want two blocks", fd.written, tr.LastReload.Copied)
	}
	if err := tr.Patch(ctx, fd, f2, sv2.LayoutOff, sv2.LayoutLen, []byte{1, 0}); err == nil {
		t.Error("a patch of 16 bits for 6 blocks was taken")
	}
	other := newFakeDev(4 << 20)
	if err := tr.Patch(ctx, other, f1, sv1.LayoutOff, sv1.LayoutLen, patch); err == nil {
		t.Error("a patch of other regions was taken")
	}
	// A save that copied only what changed lacks the other blocks.
	fd.mem[r0][0] ^= 1
	f3, sv3, err := tr.Save(ctx, fd, SaveRequest{Base: sv2.Gen})
	if err != nil {
		t.Fatal(err)
	}
	defer f3.Close()
	if err := tr.Patch(ctx, fd, f3, sv3.LayoutOff, sv3.LayoutLen, []byte{1 << 2}); err == nil {
		t.Error("a patch naming a block the save lacks was taken")
	}
}
