package emulated

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"sync"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// parkDevice is a device with some memory, and the device addresses
// through which the test reads it as the client would.
type parkDevice struct {
	d     *Device
	c     backend.Ctx
	views []parkView
}

// parkView is n bytes at p that hold region reg's bytes from offset off.
type parkView struct {
	p   backend.DevPtr
	n   uint64
	reg int // index in MemRegions
	off uint64
}

// newParkDevice makes a device with allocations of the given sizes and,
// when phys is set, a physical allocation of virtual memory management
// mapped twice, every byte written with a pattern.
func newParkDevice(t *testing.T, sizes []uint64, phys bool) *parkDevice {
	t.Helper()
	ctx := context.Background()
	d, c := newTestDevice(t, 64<<20)
	pd := &parkDevice{d: d, c: c}
	for i, n := range sizes {
		p, err := d.MemAlloc(ctx, c, n)
		if err != nil {
			t.Fatal(err)
		}
		mustPut(t, d, c, p, pattern(int(n), byte(i+1)))
		pd.views = append(pd.views, parkView{p: p, n: n, reg: i})
	}
	if phys {
		const g = vmmGranularity
		h, err := d.MemCreate(ctx, 2*g, allocTypePinned, 0, locTypeDevice, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		va, err := d.MemAddressReserve(ctx, 2*g, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		va2, err := d.MemAddressReserve(ctx, g, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		rw := []backend.AccessDesc{{LocType: locTypeDevice, Flags: accessReadWrite}}
		for _, m := range []struct {
			va        backend.DevPtr
			size, off uint64
		}{{va, 2 * g, 0}, {va2, g, g}} {
			if err := d.MemMap(ctx, m.va, m.size, m.off, h, 0); err != nil {
				t.Fatal(err)
			}
			if err := d.MemSetAccess(ctx, m.va, m.size, rw); err != nil {
				t.Fatal(err)
			}
		}
		mustPut(t, d, c, va, pattern(2*g, 0x5a))
		// The region comes after the allocations in MemRegions; the
		// second mapping aliases its second half.
		pd.views = append(pd.views, parkView{p: va, n: 2 * g, reg: len(sizes)}, parkView{p: va2, n: g, reg: len(sizes), off: g})
	}
	return pd
}

// regionData reads every region through the device.
func (pd *parkDevice) regionData(t *testing.T, regs []backend.MemRegion) [][]byte {
	t.Helper()
	out := make([][]byte, len(regs))
	for i, r := range regs {
		out[i] = make([]byte, r.Size)
		if err := pd.d.ReadMem(context.Background(), r, 0, out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// checkViews reads every view as the client would and compares it with
// want, the regions' bytes.
func (pd *parkDevice) checkViews(t *testing.T, what string, want [][]byte) {
	t.Helper()
	for _, v := range pd.views {
		if got := mustGet(t, pd.d, pd.c, v.p, v.n); !bytes.Equal(got, want[v.reg][v.off:v.off+v.n]) {
			t.Fatalf("%s: the %d bytes at %#x (region %d) read wrong", what, v.n, uint64(v.p), v.reg)
		}
	}
}

// resident counts b's pages in memory.
func resident(t *testing.T, b []byte) int {
	t.Helper()
	page := os.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

func zeros(regs []backend.MemRegion) [][]byte {
	out := make([][]byte, len(regs))
	for i, r := range regs {
		out[i] = make([]byte, r.Size)
	}
	return out
}

// TestParkAndKeepSnapshot: Park leaves the process no copy of the
// memory; Unpark with keep brings it back and keeps the snapshot, which
// later writes to the live memory do not change, which a Tracker saves
// as Park found it, and which its ReleaseMem drops.
func TestParkAndKeepSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []uint64
		phys  bool
	}{
		{"allocations", []uint64{3<<20 + 100, 2 << 20, 5000}, false},
		{"allocations and physical memory", []uint64{1<<20 + 7}, true},
		{"physical memory only", nil, true},
		{"nothing", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			pd := newParkDevice(t, tc.sizes, tc.phys)
			d := pd.d
			regs, err := d.MemRegions(ctx)
			if err != nil {
				t.Fatal(err)
			}
			want := pd.regionData(t, regs)
			for _, r := range regs {
				b, _ := d.regionBytes(r)
				if resident(t, b) == 0 {
					t.Fatalf("region %#x has no page in memory before Park", r.ID)
				}
			}

			files, err := d.Park(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if wantFiles := min(len(regs), 1); files == nil || len(files) != wantFiles {
				t.Fatalf("Park handed out %d files (nil: %v), want %d", len(files), files == nil, wantFiles)
			}
			for _, r := range regs {
				b, _ := d.regionBytes(r)
				if n := resident(t, b); n != 0 {
					t.Errorf("region %#x keeps %d pages in memory after Park", r.ID, n)
				}
			}
			pd.checkViews(t, "parked", zeros(regs))

			if err := d.Unpark(ctx, files, true); err != nil {
				t.Fatal(err)
			}
			// The caller closes its files: the snapshot must not need them.
			for _, f := range files {
				f.Close()
			}
			pd.checkViews(t, "unparked", want)
			for _, r := range regs {
				if r.Kind == backend.MemAlloc && !d.mem.find(r.ID).mapped {
					t.Errorf("allocation %#x was copied back, not mapped", r.ID)
				}
			}

			snap := d.MemSnapshot()
			if snap == nil {
				t.Fatal("no snapshot after Unpark with keep")
			}
			sregs, err := snap.MemRegions(ctx)
			if err != nil || len(sregs) != len(regs) {
				t.Fatalf("snapshot regions %v, %v; want %v", sregs, err, regs)
			}
			for i := range regs {
				if sregs[i] != regs[i] {
					t.Fatalf("snapshot region %d is %+v, want %+v", i, sregs[i], regs[i])
				}
			}

			// The client writes every byte after Unpark.
			later := make([][]byte, len(regs))
			for i, r := range regs {
				later[i] = pattern(int(r.Size), byte(0x80+i))
				if r.Kind == backend.MemAlloc {
					mustPut(t, d, pd.c, backend.DevPtr(r.ID), later[i])
				} else if err := d.WriteMem(ctx, r, 0, later[i]); err != nil {
					t.Fatal(err)
				}
			}
			pd.checkViews(t, "written after Unpark", later)

			const block, seed = 1 << 20, 0x1234567
			for i, r := range regs {
				got := make([]byte, r.Size)
				if err := snap.ReadMem(ctx, r, 0, got); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("the snapshot of region %#x changed with the live memory", r.ID)
				}
				hs := make([]uint64, devmem.BlocksOf(r.Size, block))
				if err := snap.HashBlocks(ctx, r, block, seed, hs); err != nil {
					t.Fatal(err)
				}
				for j, h := range hs {
					lo := uint64(j) * block
					if wh := devmem.HashBlock(seed, want[i][lo:min(lo+block, r.Size)]); h != wh {
						t.Fatalf("snapshot region %#x block %d hashes %#x, want %#x", r.ID, j, h, wh)
					}
				}
			}

			// A Tracker saves the snapshot as Park found it.
			f, sv, err := devmem.NewTracker().Save(ctx, snap, devmem.SaveRequest{})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			lj := make([]byte, sv.LayoutLen)
			if _, err := f.ReadAt(lj, sv.LayoutOff); err != nil {
				t.Fatal(err)
			}
			var l devmem.Layout
			if err := json.Unmarshal(lj, &l); err != nil {
				t.Fatal(err)
			}
			if len(l.Regions) != len(regs) {
				t.Fatalf("the save holds %d regions, want %d", len(l.Regions), len(regs))
			}
			for i, lr := range l.Regions {
				if lr.MemRegion != regs[i] {
					t.Fatalf("saved region %d is %+v, want %+v", i, lr.MemRegion, regs[i])
				}
				got := make([]byte, lr.Size)
				if _, err := f.ReadAt(got, lr.Off); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("the save of the snapshot's region %#x is not what Park found", lr.ID)
				}
			}

			if err := snap.RestoreMem(ctx); err == nil {
				t.Error("the snapshot restored its memory")
			}
			for _, r := range regs {
				if err := snap.WriteMem(ctx, r, 0, []byte{1}); err == nil {
					t.Errorf("the snapshot took a write to region %#x", r.ID)
				}
			}
			if err := snap.ReleaseMem(ctx); err != nil {
				t.Fatal(err)
			}
			if d.MemSnapshot() != nil {
				t.Fatal("Snapshot after its ReleaseMem is not nil")
			}
			for _, r := range regs {
				if err := snap.ReadMem(ctx, r, 0, make([]byte, 1)); !errors.Is(err, errSnapshotReleased) {
					t.Errorf("a released snapshot's read of region %#x: %v", r.ID, err)
				}
			}
			pd.checkViews(t, "after the snapshot's release", later)

			// The mapped allocations release to zeros, not to the file.
			if err := d.ReleaseMem(ctx); err != nil {
				t.Fatal(err)
			}
			pd.checkViews(t, "released", zeros(regs))
		})
	}
}

// TestUnparkWrongFiles: an Unpark with files other than Park's fails and
// leaves the memory parked, to be unparked with the right ones.
func TestUnparkWrongFiles(t *testing.T) {
	ctx := context.Background()
	pd := newParkDevice(t, []uint64{1 << 20, 3000}, true)
	d := pd.d
	regs, _ := d.MemRegions(ctx)
	want := pd.regionData(t, regs)
	files, err := d.Park(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer files[0].Close()
	if _, err := d.Park(ctx); err == nil {
		t.Fatal("a second Park while parked succeeded")
	}
	fd, err := unix.MemfdCreate("small", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	small := os.NewFile(uintptr(fd), "small")
	defer small.Close()
	if err := small.Truncate(4096); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		files []*os.File
	}{
		{"none", nil},
		{"two", []*os.File{files[0], files[0]}},
		{"nil", []*os.File{nil}},
		{"too small", []*os.File{small}},
	} {
		if err := d.Unpark(ctx, tc.files, true); err == nil {
			t.Errorf("Unpark with %s files succeeded", tc.name)
		}
		if d.MemSnapshot() != nil {
			t.Errorf("Unpark with %s files kept a snapshot", tc.name)
		}
		pd.checkViews(t, "after a failed Unpark", zeros(regs))
	}
	if err := d.Unpark(ctx, files, false); err != nil {
		t.Fatal(err)
	}
	pd.checkViews(t, "unparked", want)
	if d.MemSnapshot() != nil {
		t.Error("Unpark without keep kept a snapshot")
	}
	if err := d.Unpark(ctx, files, false); err == nil {
		t.Error("a second Unpark succeeded")
	}

	// With no regions, Park hands out no file and Unpark takes none.
	empty, _ := newTestDevice(t, 1<<20)
	none, err := empty.Park(ctx)
	if err != nil || len(none) != 0 {
		t.Fatalf("Park of no memory: %d files, %v", len(none), err)
	}
	if err := empty.Unpark(ctx, files, true); err == nil {
		t.Error("Unpark of no memory took a file")
	}
	if err := empty.Unpark(ctx, nil, false); err != nil {
		t.Fatal(err)
	}
}

// TestParkAgainDropsSnapshot: a Park while a snapshot is kept drops it,
// and the next Unpark keeps the new memory.
func TestParkAgainDropsSnapshot(t *testing.T) {
	ctx := context.Background()
	pd := newParkDevice(t, []uint64{2 << 20}, false)
	d := pd.d
	regs, _ := d.MemRegions(ctx)
	park := func(keep bool) {
		t.Helper()
		files, err := d.Park(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer files[0].Close()
		if err := d.Unpark(ctx, files, keep); err != nil {
			t.Fatal(err)
		}
	}
	park(true)
	old := d.MemSnapshot()
	later := pattern(int(regs[0].Size), 0xc3)
	mustPut(t, d, pd.c, backend.DevPtr(regs[0].ID), later)
	park(true)
	if err := old.ReadMem(ctx, regs[0], 0, make([]byte, 1)); !errors.Is(err, errSnapshotReleased) {
		t.Fatalf("the first snapshot still reads after the second Park (%v)", err)
	}
	got := make([]byte, regs[0].Size)
	if err := d.MemSnapshot().ReadMem(ctx, regs[0], 0, got); err != nil || !bytes.Equal(got, later) {
		t.Fatalf("the second snapshot does not hold what the second Park found (%v)", err)
	}
	park(false)
	if d.MemSnapshot() != nil {
		t.Error("a snapshot is left after a Park and an Unpark without keep")
	}
}

// TestSnapshotReadsRaceRelease: reads from other goroutines while the
// snapshot is released either read the parked bytes or fail.
func TestSnapshotReadsRaceRelease(t *testing.T) {
	ctx := context.Background()
	pd := newParkDevice(t, []uint64{4 << 20}, false)
	d := pd.d
	regs, _ := d.MemRegions(ctx)
	want := pd.regionData(t, regs)
	files, err := d.Park(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = d.Unpark(ctx, files, true)
	files[0].Close()
	if err != nil {
		t.Fatal(err)
	}
	snap := d.MemSnapshot()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			got := make([]byte, regs[0].Size)
			for {
				err := snap.ReadMem(ctx, regs[0], 0, got)
				if errors.Is(err, errSnapshotReleased) {
					return
				}
				if err != nil || !bytes.Equal(got, want[0]) {
					errs <- err
					return
				}
			}
		})
	}
	// The client keeps writing meanwhile.
	mustPut(t, d, pd.c, backend.DevPtr(regs[0].ID), pattern(int(regs[0].Size), 0x11))
	if err := snap.ReleaseMem(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("a read racing the release read wrong bytes (%v)", err)
	}
}

// TestParkInPlace: after an Unpark, the next Park of the same regions
// writes only what the client wrote since into the same file (and the
// physical memory, whole), and the file then holds every region as it is;
// the snapshot of the earlier Park is gone before the file changes. A
// change of the regions makes the Park copy everything again.
func TestParkInPlace(t *testing.T) {
	ctx := context.Background()
	page := uint64(os.Getpagesize())
	pd := newParkDevice(t, []uint64{3<<20 + 100, 5000, 1 << 20}, true)
	d := pd.d
	regs, err := d.MemRegions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	files, err := d.Park(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.LastPark.Reused || d.LastPark.Copied == 0 {
		t.Fatalf("the first park: %+v, want a full copy", d.LastPark)
	}
	if err := d.Unpark(ctx, files, true); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	snap := d.MemSnapshot()
	if snap == nil {
		t.Fatal("no snapshot after Unpark with keep")
	}

	// The client writes two pages of the first allocation and one byte
	// of the third.
	mustPut(t, d, pd.c, pd.views[0].p+backend.DevPtr(5*page), pattern(int(2*page), 0x77))
	mustPut(t, d, pd.c, pd.views[2].p+backend.DevPtr(10), []byte{0xee})
	want := pd.regionData(t, regs)

	files, err = d.Park(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var physBytes int64
	for _, r := range regs {
		if r.Kind == backend.MemPhysical {
			physBytes += int64(r.Size)
		}
	}
	if wantCopied := int64(3*page) + physBytes; !d.LastPark.Reused || d.LastPark.Copied != wantCopied {
		t.Fatalf("the second park: %+v, want the last file brought up to date with %d bytes", d.LastPark, wantCopied)
	}
	buf := make([]byte, 8)
	if err := snap.ReadMem(ctx, regs[0], 0, buf); !errors.Is(err, errSnapshotReleased) {
		t.Fatalf("a read of the first park's snapshot after the second park: %v, want %v", err, errSnapshotReleased)
	}
	for i, r := range d.parked.regions {
		got := make([]byte, r.Size)
		if _, err := files[0].ReadAt(got, r.off); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want[i]) {
			t.Fatalf("region %#x in the file after the second park is not the device's memory", r.ID)
		}
	}
	pd.checkViews(t, "parked again", zeros(regs))
	if err := d.Unpark(ctx, files, false); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	pd.checkViews(t, "unparked again", want)

	// A new allocation: everything is copied into a new file.
	p, err := d.MemAlloc(ctx, pd.c, 8192)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, d, pd.c, p, pattern(8192, 9))
	files, err = d.Park(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d.LastPark.Reused {
		t.Fatalf("a park after a new allocation reused the last file: %+v", d.LastPark)
	}
	if err := d.Unpark(ctx, files, false); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		f.Close()
	}
	pd.checkViews(t, "unparked after a new allocation", want)
	if got := mustGet(t, d, pd.c, p, 8192); !bytes.Equal(got, pattern(8192, 9)) {
		t.Fatal("the new allocation reads wrong after its park")
	}
}
