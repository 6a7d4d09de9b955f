package devstore_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
	"github.com/gpuctl/gpuctl/store"
)

// device is an emulated device with a few allocations of random data, a
// zero one and a physical allocation of virtual memory management.
type device struct {
	*emulated.Device
	ptrs  []backend.DevPtr
	sizes []uint64
	ctx   backend.Ctx
}

func newDevice(t *testing.T) *device {
	t.Helper()
	ctx := context.Background()
	d := &device{Device: emulated.New(emulated.Config{MemBytes: 256 << 20})}
	t.Cleanup(func() { d.Close() })
	c, err := d.CtxCreate(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	d.ctx = c
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []uint64{3<<20 + 100, 4096, 1 << 20, 5 << 20} {
		p, err := d.MemAlloc(ctx, c, n)
		if err != nil {
			t.Fatal(err)
		}
		d.ptrs, d.sizes = append(d.ptrs, p), append(d.sizes, n)
		if n == 1<<20 {
			continue // stays zero
		}
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(b), n, 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.MemCreate(ctx, 2<<20, 1, 0, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	return d
}

// contents reads every region of the device.
func contents(t *testing.T, dm backend.DeviceMemory) [][]byte {
	t.Helper()
	ctx := context.Background()
	regs, err := dm.MemRegions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, r := range regs {
		b := make([]byte, r.Size)
		if err := dm.ReadMem(ctx, r, 0, b); err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

func same(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// commit stores snap (relative to base) as an image with an empty CRIU
// directory.
func commit(t *testing.T, st *store.Store, snap *devstore.Snapshot, base *devstore.Table, id string) (*images.Manifest, images.Stats, *devstore.Table) {
	t.Helper()
	files, err := devstore.Files(snap, base)
	if err != nil {
		t.Fatal(err)
	}
	m, stats, err := images.CommitWith(context.Background(), st, t.TempDir(), images.Meta{ID: id, Session: "s-1", Backend: "emulated"}, files)
	if err != nil {
		t.Fatal(err)
	}
	tab, err := devstore.TableOf(snap, m)
	if err != nil {
		t.Fatal(err)
	}
	return m, stats, tab
}

// TestSaveStoreRestore saves an emulated device's memory, releases it,
// stores it as an image, changes one block, saves incrementally, and
// restores both images bit-exact from the store.
func TestSaveStoreRestore(t *testing.T) {
	ctx := context.Background()
	d := newDevice(t)
	st := openStore(t)
	tr := devmem.NewTracker()
	want1 := contents(t, d)

	f, sv, err := tr.Save(ctx, d, devmem.SaveRequest{Release: true})
	if err != nil {
		t.Fatal(err)
	}
	if sv.SentBytes != sv.Bytes {
		t.Errorf("a first save sent %d of %d bytes; want all", sv.SentBytes, sv.Bytes)
	}
	if same(contents(t, d), want1) {
		t.Fatal("released memory still holds its data")
	}
	snap, err := devstore.Open(f, sv)
	if err != nil {
		t.Fatal(err)
	}
	m1, st1, tab1 := commit(t, st, snap, nil, "img-1")
	if st1.ZeroBytes < 1<<20 {
		t.Errorf("the zero allocation was stored: %d zero bytes", st1.ZeroBytes)
	}
	// The worker goes on from its snapshot, as a checkpoint that leaves it
	// running does.
	if err := tr.Reload(ctx, d, snap.File, snap.Saved.LayoutOff, snap.Saved.LayoutLen); err != nil {
		t.Fatal(err)
	}
	snap.Close()
	if !same(contents(t, d), want1) {
		t.Fatal("memory after reload differs from before the save")
	}

	// Change one byte in the last allocation: exactly one block is new.
	if err := d.Memset(ctx, d.ctx, d.ptrs[3]+backend.DevPtr(2<<20)+7, 0x5a, 1, 1, 0); err != nil {
		t.Fatal(err)
	}
	want2 := contents(t, d)
	f, sv, err = tr.Save(ctx, d, devmem.SaveRequest{Base: tab1.Gen(), Release: true})
	if err != nil {
		t.Fatal(err)
	}
	if sv.SentBytes != devmem.DefaultBlock {
		t.Errorf("an incremental save after a one-byte change sent %d bytes; want one block (%d)", sv.SentBytes, devmem.DefaultBlock)
	}
	snap, err = devstore.Open(f, sv)
	if err != nil {
		t.Fatal(err)
	}
	_, st2, _ := commit(t, st, snap, tab1, "img-2")
	if st2.NewChunks != 2 { // the changed block and the layout
		t.Errorf("the second image added %d chunks; want 2", st2.NewChunks)
	}
	snap.Close()

	// Restore each image into the released device, as a restore does.
	for _, tc := range []struct {
		id   string
		want [][]byte
	}{{"img-1", want1}, {"img-2", want2}} {
		m, err := images.Get(ctx, st, tc.id)
		if err != nil {
			t.Fatal(err)
		}
		tab, err := devstore.FromManifest(ctx, st, m)
		if err != nil || tab == nil {
			t.Fatalf("%s: table: %v", tc.id, err)
		}
		if err := d.ReleaseMem(ctx); err != nil {
			t.Fatal(err)
		}
		ld, err := devstore.Load(ctx, st, tab)
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.Reload(ctx, d, ld.File, ld.Saved.LayoutOff, ld.Saved.LayoutLen); err != nil {
			t.Fatalf("%s: reload: %v", tc.id, err)
		}
		ld.Close()
		if !same(contents(t, d), tc.want) {
			t.Errorf("%s: restored memory differs", tc.id)
		}
	}
	_ = m1
	// The images verify as any other.
	rep, err := images.Verify(ctx, st, "", nil)
	if err != nil || len(rep.Damaged) != 0 {
		t.Errorf("verify: %v %+v", err, rep)
	}
}

// TestReloadRefusesAnotherLayout: memory saved from one device cannot be
// loaded into a device with other allocations.
func TestReloadRefusesAnotherLayout(t *testing.T) {
	ctx := context.Background()
	d := newDevice(t)
	tr := devmem.NewTracker()
	f, sv, err := tr.Save(ctx, d, devmem.SaveRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := d.MemAlloc(ctx, d.ctx, 4096); err != nil {
		t.Fatal(err)
	}
	err = tr.Reload(ctx, d, f, sv.LayoutOff, sv.LayoutLen)
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("regions")) {
		t.Errorf("reload into another layout: %v", err)
	}
}

func TestMain(m *testing.M) { os.Exit(m.Run()) }
