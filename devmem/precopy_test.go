package devmem_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// fakeMem is device memory as plain byte slices. afterRead, when set,
// runs after each ReadMem: work the device was still doing, landing
// after the copy.
type fakeMem struct {
	regs      []backend.MemRegion
	data      map[uint64][]byte
	afterRead func(r backend.MemRegion, off uint64)
	read      atomic.Int64 // bytes ReadMem copied
}

func newFakeMem(sizes ...uint64) *fakeMem {
	m := &fakeMem{data: map[uint64][]byte{}}
	for i, n := range sizes {
		id := uint64(0x1000000 * (i + 1))
		m.regs = append(m.regs, backend.MemRegion{Kind: backend.MemAlloc, ID: id, Size: n})
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(j*7 + i)
		}
		m.data[id] = b
	}
	return m
}

func (m *fakeMem) MemRegions(context.Context) ([]backend.MemRegion, error) {
	return slices.Clone(m.regs), nil
}

func (m *fakeMem) ReadMem(_ context.Context, r backend.MemRegion, off uint64, dst []byte) error {
	b, ok := m.data[r.ID]
	if !ok {
		return fmt.Errorf("no region %#x", r.ID)
	}
	m.read.Add(int64(copy(dst, b[off:])))
	if m.afterRead != nil {
		m.afterRead(r, off)
	}
	return nil
}

func (m *fakeMem) WriteMem(_ context.Context, r backend.MemRegion, off uint64, src []byte) error {
	copy(m.data[r.ID][off:], src)
	return nil
}

func (m *fakeMem) HashBlocks(_ context.Context, r backend.MemRegion, block, seed uint64, out []uint64) error {
	b, ok := m.data[r.ID]
	if !ok {
		return fmt.Errorf("no region %#x", r.ID)
	}
	for i := range out {
		lo := uint64(i) * block
		out[i] = devmem.HashBlock(seed, b[lo:min(lo+block, uint64(len(b)))])
	}
	return nil
}

func (m *fakeMem) ReleaseMem(context.Context) error { return nil }
func (m *fakeMem) RestoreMem(context.Context) error { return nil }

// free drops region i, as a client's cuMemFree would.
func (m *fakeMem) free(i int) {
	delete(m.data, m.regs[i].ID)
	m.regs = slices.Delete(m.regs, i, i+1)
}

// sentBlocks lists the indexes (in file order) of the blocks a save or
// round copied, checking that their bytes are the device's.
func sentBlocks(t *testing.T, m *fakeMem, f *os.File, sv devmem.Saved) ([]int, *devmem.Layout) {
	t.Helper()
	lj := make([]byte, sv.LayoutLen)
	if _, err := f.ReadAt(lj, sv.LayoutOff); err != nil {
		t.Fatal(err)
	}
	l, err := devmem.ParseLayout(lj)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for i, s := range l.Spans() {
		if !l.IsSent(i) {
			continue
		}
		out = append(out, i)
		got := make([]byte, s.Len)
		if _, err := f.ReadAt(got, s.FileOff); err != nil && err != io.EOF {
			t.Fatal(err)
		}
		// (With work landing after the copy, the copy is older than the
		// device, as it should be.)
		if d, ok := m.data[l.Regions[s.Region].ID]; ok && m.afterRead == nil && !slices.Equal(got, d[s.RegOff:s.RegOff+uint64(s.Len)]) {
			t.Errorf("block %d: the copy differs from the device", i)
		}
	}
	return out, l
}

func TestPrecopyRounds(t *testing.T) {
	ctx := context.Background()
	const mib = 1 << 20
	// Region 0: blocks 0-2 (the last one short); region 1: blocks 3-4;
	// region 2: blocks 5-14 (more than one batch).
	m := newFakeMem(2*mib+100, 2*mib, 10*mib)
	tr := devmem.NewTracker()
	between := func(f func()) { f() }
	round := func(base uint64) ([]int, devmem.Saved) {
		t.Helper()
		f, sv, err := tr.Precopy(ctx, m, between, devmem.PrecopyRequest{Base: base})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sent, _ := sentBlocks(t, m, f, sv)
		return sent, sv
	}

	all, r1 := round(0)
	if len(all) != 15 || r1.SentBytes != int64(14*mib+100) {
		t.Fatalf("round 1 sent blocks %v (%d bytes), want all 15", all, r1.SentBytes)
	}
	// Nothing changed: a round relative to it sends nothing, and reads
	// nothing either (the device's hashes said so).
	m.read.Store(0)
	if sent, _ := round(r1.Gen); len(sent) != 0 {
		t.Fatalf("idle round sent %v", sent)
	}
	if n := m.read.Load(); n != 0 {
		t.Fatalf("idle round read %d bytes from the device, want 0", n)
	}
	// A round relative to a round the worker does not know sends all.
	if sent, _ := round(12345); len(sent) != 15 {
		t.Fatalf("round relative to an unknown base sent %v, want all", sent)
	}
	_, r3 := round(0)

	// The client writes block 1 and block 9; a round sends just those.
	m.data[m.regs[0].ID][mib+5]++
	m.data[m.regs[2].ID][4*mib]++
	m.read.Store(0)
	sent, r4 := round(r3.Gen)
	if !slices.Equal(sent, []int{1, 9}) {
		t.Fatalf("round after two writes sent %v, want [1 9]", sent)
	}
	if n := m.read.Load(); n != 2*mib {
		t.Fatalf("round after two writes read %d bytes from the device, want the two blocks' %d", n, 2*mib)
	}

	// Work in flight lands on block 12 right after the round copied it:
	// the round sent the old bytes, and the freeze must send it again.
	m.afterRead = func(r backend.MemRegion, off uint64) {
		if r.ID == m.regs[2].ID && off == 7*mib {
			m.data[r.ID][off+3] ^= 0xff
		}
	}
	m.data[m.regs[2].ID][7*mib+3]++ // block 12 changed before the round, too
	sent, r5 := round(r4.Gen)
	m.afterRead = nil
	if !slices.Equal(sent, []int{12}) {
		t.Fatalf("round sent %v, want [12]", sent)
	}
	f, sv, err := tr.Save(ctx, m, devmem.SaveRequest{Base: r5.Gen})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sent, l := sentBlocks(t, m, f, sv)
	if l.Base != r5.Gen || !slices.Equal(sent, []int{12}) {
		t.Fatalf("freeze after a torn block: base %x (want %x), sent %v, want [12]", l.Base, r5.Gen, sent)
	}

	// A region freed while a round runs is not counted as sent; a new
	// region is sent whole.
	tr2 := devmem.NewTracker()
	m2 := newFakeMem(mib, 2*mib)
	f1, s1, err := tr2.Precopy(ctx, m2, between, devmem.PrecopyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	f1.Close()
	freed := false
	racy := func(f func()) {
		f()
		if !freed {
			// The first pause lists the regions; the client frees
			// region 1 before the next.
			freed = true
			m2.free(1)
		}
	}
	f2, s2, err := tr2.Precopy(ctx, m2, racy, devmem.PrecopyRequest{Base: s1.Gen})
	if err != nil {
		t.Fatal(err)
	}
	defer f2.Close()
	if sent, l := sentBlocks(t, m2, f2, s2); len(sent) != 0 || len(l.Regions) != 2 {
		t.Fatalf("round with a freed region sent %v over %d regions", sent, len(l.Regions))
	}
	m2.regs = append(m2.regs, backend.MemRegion{Kind: backend.MemAlloc, ID: 0x9000000, Size: mib})
	m2.data[0x9000000] = make([]byte, mib)
	m2.data[0x9000000][7] = 1
	f3, s3, err := tr2.Save(ctx, m2, devmem.SaveRequest{Base: s2.Gen})
	if err != nil {
		t.Fatal(err)
	}
	defer f3.Close()
	if sent, _ := sentBlocks(t, m2, f3, s3); !slices.Equal(sent, []int{1}) {
		t.Fatalf("freeze after a freed region and a new one sent %v, want [1] (the new region)", sent)
	}
}

// TestPrecopyInto: a round copies into the memfd it is given (an earlier
// round's, stale bytes and all) when asked: the round's file is that one,
// its changed blocks hold the device's bytes, and only they are marked.
func TestPrecopyInto(t *testing.T) {
	ctx := context.Background()
	const mib = 1 << 20
	m := newFakeMem(4*mib, 2*mib)
	tr := devmem.NewTracker()
	between := func(f func()) { f() }
	f1, r1, err := tr.Precopy(ctx, m, between, devmem.PrecopyRequest{})
	if err != nil {
		t.Fatal(err)
	}
	defer f1.Close()
	into, err := os.CreateTemp(t.TempDir(), "spare")
	if err != nil {
		t.Fatal(err)
	}
	defer into.Close()
	if _, err := into.Write(slices.Repeat([]byte{0xaa}, 8*mib)); err != nil {
		t.Fatal(err)
	}
	m.data[m.regs[1].ID][mib+5] ^= 0xff // block 5
	f2, r2, err := tr.Precopy(ctx, m, between, devmem.PrecopyRequest{Base: r1.Gen, Into: into})
	if err != nil {
		t.Fatal(err)
	}
	if f2 != into {
		t.Fatal("the round did not copy into the memfd it was given")
	}
	if sent, _ := sentBlocks(t, m, f2, r2); !slices.Equal(sent, []int{5}) {
		t.Errorf("the round into a spare memfd marked blocks %v, want [5]", sent)
	}
}
