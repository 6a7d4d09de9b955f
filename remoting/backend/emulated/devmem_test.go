package emulated_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
)

// TestReloadMapsTheFile: a reload maps the saved file's pages at a
// page-aligned allocation instead of copying (and copies the one that
// is not aligned in the file); the device's writes stay its own, and a
// release gives zeros back, not the file's contents.
func TestReloadMapsTheFile(t *testing.T) {
	ctx := context.Background()
	d := emulated.New(emulated.Config{MemBytes: 64 << 20})
	defer d.Close()
	c, err := d.CtxCreate(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The first allocation's odd size puts the second off a page in the
	// file: it is copied, the first is mapped.
	sizes := []uint64{3<<20 + 100, 2 << 20}
	var ptrs []backend.DevPtr
	var want [][]byte
	for i, n := range sizes {
		p, err := d.MemAlloc(ctx, c, n)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(j*13 + i + 1)
		}
		if err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(b), n, 0); err != nil {
			t.Fatal(err)
		}
		ptrs, want = append(ptrs, p), append(want, b)
	}
	tr := devmem.NewTracker()
	f, sv, err := tr.Save(ctx, d, devmem.SaveRequest{Release: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	read := func(i int) []byte {
		t.Helper()
		var got bytes.Buffer
		if err := d.MemcpyDtoH(ctx, c, &got, ptrs[i], sizes[i], 0); err != nil {
			t.Fatal(err)
		}
		return got.Bytes()
	}
	if !bytes.Equal(read(0)[:4096], make([]byte, 4096)) {
		t.Fatal("released memory does not read as zeros")
	}
	if err := tr.Reload(ctx, d, f, sv.LayoutOff, sv.LayoutLen); err != nil {
		t.Fatal(err)
	}
	for i := range sizes {
		if !bytes.Equal(read(i), want[i]) {
			t.Fatalf("allocation %d reloaded wrong", i)
		}
	}
	// Mapped, not copied: a page the device has not written shows the
	// file (nothing writes it in gpuctl; the test does, to tell); the
	// unaligned allocation was copied and does not.
	if _, err := f.WriteAt([]byte{0xab}, 8192); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xab}, int64(sizes[0])); err != nil {
		t.Fatal(err)
	}
	if read(0)[8192] != 0xab {
		t.Error("the page-aligned allocation was copied, not mapped")
	}
	if read(1)[0] == 0xab {
		t.Error("the allocation off a page in the file was mapped")
	}
	// The device writes to its own pages: the file keeps the save.
	if err := d.MemcpyHtoD(ctx, c, ptrs[0], bytes.NewReader([]byte{0xee}), 1, 0); err != nil {
		t.Fatal(err)
	}
	saved := make([]byte, 1)
	if _, err := f.ReadAt(saved, 0); err != nil || saved[0] != want[0][0] {
		t.Fatalf("the device's write reached the saved file (%v, %v)", saved, err)
	}
	if err := d.ReleaseMem(ctx); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(read(0)[:8192], make([]byte, 8192)) {
		t.Error("a mapped allocation released reads the file back, not zeros")
	}
	// And it works as anonymous memory again.
	if err := d.MemcpyHtoD(ctx, c, ptrs[0]+5, bytes.NewReader([]byte{7}), 1, 0); err != nil {
		t.Fatal(err)
	}
	if got := read(0); got[5] != 7 || got[4] != 0 {
		t.Errorf("after release, bytes 4..5 read %v", got[4:6])
	}
}
