package devstore_test

import (
	"context"
	"testing"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// noMemory is a backend whose worker manages no device memory itself: a
// cuda worker with --cuda-plain-memory, whose memory the driver's
// checkpoint saves.
type noMemory struct{ released, restored int }

func (*noMemory) MemRegions(context.Context) ([]backend.MemRegion, error) { return nil, nil }
func (*noMemory) ReadMem(context.Context, backend.MemRegion, uint64, []byte) error {
	panic("ReadMem with no regions")
}
func (*noMemory) WriteMem(context.Context, backend.MemRegion, uint64, []byte) error {
	panic("WriteMem with no regions")
}
func (*noMemory) HashBlocks(context.Context, backend.MemRegion, uint64, uint64, []uint64) error {
	panic("HashBlocks with no regions")
}
func (n *noMemory) ReleaseMem(context.Context) error { n.released++; return nil }
func (n *noMemory) RestoreMem(context.Context) error { n.restored++; return nil }

// TestNoRegions: a worker with no memory of its own still checkpoints
// through the save step, and its image restores, relative to a base too.
func TestNoRegions(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	dev := &noMemory{}
	tr := devmem.NewTracker()
	var base *devstore.Table
	for i, id := range []string{"img-a", "img-b"} {
		req := devmem.SaveRequest{Release: true}
		if base != nil {
			req.Base = base.Gen()
		}
		f, sv, err := tr.Save(ctx, dev, req)
		if err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
		if sv.Bytes != 0 || sv.SentBytes != 0 {
			t.Errorf("save %d of no memory: %d bytes, %d sent", i, sv.Bytes, sv.SentBytes)
		}
		snap, err := devstore.Open(f, sv)
		if err != nil {
			t.Fatal(err)
		}
		_, _, base = commit(t, st, snap, base, id)
		snap.Close()
		m, err := images.Get(ctx, st, id)
		if err != nil {
			t.Fatal(err)
		}
		tab, err := devstore.FromManifest(ctx, st, m)
		if err != nil || tab == nil {
			t.Fatalf("%s: table %v, %v", id, tab, err)
		}
		ld, err := devstore.Load(ctx, st, tab)
		if err != nil {
			t.Fatalf("%s: load: %v", id, err)
		}
		if err := tr.Reload(ctx, dev, ld.File, ld.Saved.LayoutOff, ld.Saved.LayoutLen); err != nil {
			t.Fatalf("%s: reload: %v", id, err)
		}
		ld.Close()
	}
	if dev.released != 2 || dev.restored != 2 {
		t.Errorf("released %d and restored %d times, want 2 and 2", dev.released, dev.restored)
	}
}
