package cuda

import (
	"bytes"
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/devmem"
)

// TestParkRoundTrip parks device memory (GPU only): the worker's own
// mappings are gone while parked, the memory comes back unchanged at the
// same addresses, and the snapshot keeps the bytes of the park while the
// session writes its memory, through a Tracker's save of it.
func TestParkRoundTrip(t *testing.T) {
	ctx := context.Background()
	d, c := gpuDevice(t, Options{})
	sizes := []uint64{1000, 300 << 10, 3<<20 + 5, 256 << 20}
	ptrs, data := allocFilled(t, d, c, rand.New(rand.NewPCG(9, 10)), sizes, -1)
	tr := devmem.NewTracker()
	files, pk, err := tr.Park(ctx, d)
	if err != nil {
		t.Fatalf("park: %v", err)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	regs, _ := d.MemRegions(ctx)
	if len(files) != 2*len(regs) || pk.Bytes < 256<<20 {
		t.Fatalf("park handed out %d descriptors for %d regions, %d bytes", len(files), len(regs), pk.Bytes)
	}
	if err := d.ReadMem(ctx, regs[0], 0, make([]byte, 8)); err == nil {
		t.Error("ReadMem of parked memory succeeded")
	}
	t.Logf("park of %d bytes in %d chunks: %v (trim %v)", pk.Bytes, len(regs), time.Duration(pk.ParkNS), time.Duration(pk.TrimNS))
	// The wrong descriptors change nothing; the right ones bring it back.
	if err := tr.Unpark(ctx, d, files[:1], devmem.UnparkRequest{Keep: true}); err == nil {
		t.Fatal("unpark with one descriptor succeeded")
	}
	t0 := time.Now()
	if err := tr.Unpark(ctx, d, files, devmem.UnparkRequest{Keep: true}); err != nil {
		t.Fatalf("unpark: %v", err)
	}
	t.Logf("unpark: %v", time.Since(t0))
	for i, n := range sizes {
		if got := readBack(t, d, c, ptrs[i], n); !bytes.Equal(got, data[i]) {
			t.Errorf("allocation %d (%d bytes) differs after park and unpark", i, n)
		}
	}
	// The session writes; the snapshot does not see it.
	for i := range ptrs {
		if err := d.Memset(ctx, c, ptrs[i], 0x77, 1, 1, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.CtxSynchronize(ctx, c); err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	f, sv, err := tr.Save(ctx, d, devmem.SaveRequest{Snapshot: true, Release: true})
	if err != nil {
		t.Fatalf("save of the snapshot: %v", err)
	}
	defer f.Close()
	t.Logf("save of the snapshot, %d bytes: %v (hash %v, copy %v)", sv.Bytes, time.Since(t1), time.Duration(sv.HashNS), time.Duration(sv.CopyNS))
	if d.MemSnapshot() != nil {
		t.Error("the snapshot is still held after its save released it")
	}
	lj := make([]byte, sv.LayoutLen)
	if _, err := f.ReadAt(lj, sv.LayoutOff); err != nil {
		t.Fatal(err)
	}
	l, err := devmem.ParseLayout(lj)
	if err != nil {
		t.Fatal(err)
	}
	saved, err := unix.Mmap(int(f.Fd()), 0, int(l.Size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(saved)
	for i, n := range sizes {
		// Allocations share chunks: find the region holding ptrs[i].
		found := false
		for _, r := range l.Regions {
			if uint64(ptrs[i]) >= r.ID && uint64(ptrs[i])+n <= r.ID+r.Size {
				at := r.Off + int64(uint64(ptrs[i])-r.ID)
				found = bytes.Equal(saved[at:at+int64(n)], data[i])
			}
		}
		if !found {
			t.Errorf("the saved snapshot lacks allocation %d as it was parked", i)
		}
	}
	// Parked again: the chunks were imported from descriptors, which the
	// driver does not export twice; the park hands out the kept ones.
	files2, _, err := tr.Park(ctx, d)
	if err != nil {
		t.Fatalf("second park: %v", err)
	}
	defer func() {
		for _, f := range files2 {
			f.Close()
		}
	}()
	if err := tr.Unpark(ctx, d, files2, devmem.UnparkRequest{}); err != nil {
		t.Fatalf("second unpark: %v", err)
	}
	if d.MemSnapshot() != nil {
		t.Error("an unpark without keep kept a snapshot")
	}
	for i, n := range sizes {
		data[i][0] = 0x77
		if got := readBack(t, d, c, ptrs[i], n); !bytes.Equal(got, data[i]) {
			t.Errorf("allocation %d (%d bytes) differs after a second park and unpark", i, n)
		}
	}
}
