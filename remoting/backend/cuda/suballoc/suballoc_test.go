package suballoc

import (
	"errors"
	"testing"
)

const (
	gran  = 2 << 20
	small = 2 << 20
)

// fakeBacking hands out chunk addresses from a counter, with a gap after
// each, and records what is mapped.
type fakeBacking struct {
	next   uint64
	mapped map[uint64]uint64
	maps   int
	fail   error
}

func newFake() *fakeBacking { return &fakeBacking{next: 0x7f0000000000, mapped: map[uint64]uint64{}} }

func (f *fakeBacking) Map(size uint64) (uint64, error) {
	if f.fail != nil {
		return 0, f.fail
	}
	if size%gran != 0 {
		return 0, errors.New("size not a multiple of the granularity")
	}
	b := f.next
	f.next += size + gran
	f.mapped[b] = size
	f.maps++
	return b, nil
}

func (f *fakeBacking) Unmap(base, size uint64) error {
	if f.mapped[base] != size {
		return errors.New("unmap of something not mapped")
	}
	delete(f.mapped, base)
	return nil
}

func newHeap(t *testing.T) (*Heap, *fakeBacking) {
	t.Helper()
	f := newFake()
	h, err := New(Config{Granularity: gran, SmallChunk: small, Align: 256}, f)
	if err != nil {
		t.Fatal(err)
	}
	return h, f
}

// inChunk reports whether [p, p+n) lies in one mapped chunk.
func inChunk(f *fakeBacking, p, n uint64) bool {
	for b, s := range f.mapped {
		if p >= b && p+n <= b+s {
			return true
		}
	}
	return false
}

func TestAlignmentAndPlacement(t *testing.T) {
	for _, tc := range []struct {
		name      string
		sizes     []uint64
		wantMaps  int
		dedicated int // allocations expected in chunks of their own
	}{
		{"one byte", []uint64{1}, 1, 0},
		{"odd sizes share a chunk", []uint64{1, 3, 255, 257, 1000, 4097}, 1, 0},
		{"half a chunk is still small", []uint64{small / 2, small / 2}, 1, 0},
		{"just above half gets its own chunk", []uint64{small/2 + 1}, 1, 1},
		{"large rounds to the granularity", []uint64{3*gran + 5}, 1, 1},
		{"small ones spill into a second chunk", []uint64{small / 2, small / 2, 256}, 2, 0},
		{"mixed", []uint64{100, 5 * gran, 100, gran + 1}, 3, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, f := newHeap(t)
			var ptrs []uint64
			for _, n := range tc.sizes {
				p, err := h.Alloc(n)
				if err != nil {
					t.Fatalf("Alloc(%d): %v", n, err)
				}
				if p%256 != 0 {
					t.Errorf("Alloc(%d) = %#x, not 256-byte aligned", n, p)
				}
				if !inChunk(f, p, n) {
					t.Errorf("Alloc(%d) = %#x does not lie in one mapped chunk", n, p)
				}
				ptrs = append(ptrs, p)
			}
			if f.maps != tc.wantMaps {
				t.Errorf("%d chunks mapped, want %d", f.maps, tc.wantMaps)
			}
			ded := 0
			for _, c := range h.Chunks() {
				if !c.Shared {
					ded++
				}
			}
			if ded != tc.dedicated {
				t.Errorf("%d dedicated chunks, want %d", ded, tc.dedicated)
			}
			// No two allocations overlap.
			for i := range ptrs {
				for j := range ptrs {
					si, _ := h.Size(ptrs[i])
					if i != j && ptrs[j] >= ptrs[i] && ptrs[j] < ptrs[i]+si {
						t.Errorf("allocations %#x (+%d) and %#x overlap", ptrs[i], si, ptrs[j])
					}
				}
			}
		})
	}
}

func TestReuse(t *testing.T) {
	h, f := newHeap(t)
	a, _ := h.Alloc(1000)
	b, _ := h.Alloc(1000)
	if err := h.Free(a); err != nil {
		t.Fatal(err)
	}
	c, _ := h.Alloc(700)
	if c != a {
		t.Errorf("a freed slot was not reused first-fit: got %#x, want %#x", c, a)
	}
	// A loop of alloc/free of one buffer keeps its chunk as the spare.
	_ = h.Free(b)
	_ = h.Free(c)
	maps := f.maps
	for range 100 {
		p, err := h.Alloc(4096)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	if f.maps != maps || len(f.mapped) != 1 {
		t.Errorf("alloc/free churn mapped %d new chunks and left %d mapped; want 0 and 1 (the spare)", f.maps-maps, len(f.mapped))
	}
	// A dedicated chunk goes back at once.
	p, _ := h.Alloc(8 * gran)
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if len(f.mapped) != 1 {
		t.Errorf("%d chunks mapped after freeing a large allocation, want 1", len(f.mapped))
	}
	// A second empty shared chunk is unmapped; the spare stays.
	x, _ := h.Alloc(small / 2)
	y, _ := h.Alloc(small / 2)
	z, _ := h.Alloc(small / 2) // a second shared chunk
	for _, p := range []uint64{x, y, z} {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.mapped) != 1 || h.Len() != 0 {
		t.Errorf("%d chunks mapped and %d allocations live after freeing everything, want 1 and 0", len(f.mapped), h.Len())
	}
}

func TestFragmentation(t *testing.T) {
	h, f := newHeap(t)
	const n = 64
	unit := uint64(small / n) // 64 units fill one chunk exactly
	ptrs := make([]uint64, n)
	for i := range ptrs {
		p, err := h.Alloc(unit)
		if err != nil {
			t.Fatal(err)
		}
		ptrs[i] = p
	}
	if f.maps != 1 {
		t.Fatalf("%d chunks for %d units of a chunk, want 1", f.maps, n)
	}
	// Free every other unit: half the chunk is free but no two units
	// are adjacent, so two units do not fit.
	for i := 0; i < n; i += 2 {
		if err := h.Free(ptrs[i]); err != nil {
			t.Fatal(err)
		}
	}
	p, err := h.Alloc(2 * unit)
	if err != nil {
		t.Fatal(err)
	}
	if p >= ptrs[0] && p < ptrs[0]+small {
		t.Errorf("two units placed at %#x inside the fragmented chunk", p)
	}
	if f.maps != 2 {
		t.Errorf("%d chunks mapped, want 2", f.maps)
	}
	// Freeing unit 1 merges units 0..2 into one extent of three.
	if err := h.Free(ptrs[1]); err != nil {
		t.Fatal(err)
	}
	q, err := h.Alloc(3 * unit)
	if err != nil {
		t.Fatal(err)
	}
	if q != ptrs[0] {
		t.Errorf("three units at %#x, want %#x where the merged extent starts", q, ptrs[0])
	}
}

func TestBadFrees(t *testing.T) {
	h, _ := newHeap(t)
	p, _ := h.Alloc(1000)
	for _, tc := range []struct {
		name string
		ptr  uint64
	}{
		{"never allocated", 0x1234000},
		{"inside an allocation", p + 256},
		{"zero", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := h.Free(tc.ptr); !errors.Is(err, ErrNotAllocated) {
				t.Errorf("Free(%#x) = %v, want ErrNotAllocated", tc.ptr, err)
			}
		})
	}
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p); !errors.Is(err, ErrNotAllocated) {
		t.Errorf("double free = %v, want ErrNotAllocated", err)
	}
}

func TestErrors(t *testing.T) {
	h, f := newHeap(t)
	if _, err := h.Alloc(0); !errors.Is(err, ErrZeroSize) {
		t.Errorf("Alloc(0) = %v, want ErrZeroSize", err)
	}
	if _, err := h.Alloc(^uint64(0) - 10); err == nil {
		t.Error("Alloc of 2^64-11 bytes did not fail")
	}
	oom := errors.New("out of memory")
	f.fail = oom
	if _, err := h.Alloc(100); !errors.Is(err, oom) {
		t.Errorf("Alloc with a failing backing = %v, want its error", err)
	}
	if h.Len() != 0 || len(h.Chunks()) != 0 {
		t.Errorf("a failed allocation left %d allocations and %d chunks", h.Len(), len(h.Chunks()))
	}
	for _, cfg := range []Config{
		{Granularity: 3 << 20, SmallChunk: 3 << 20, Align: 256},
		{Granularity: gran, SmallChunk: gran + 1, Align: 256},
		{Granularity: gran, SmallChunk: gran, Align: 100},
		{Granularity: 128, SmallChunk: 128, Align: 256},
	} {
		if _, err := New(cfg, newFake()); err == nil {
			t.Errorf("New(%+v) accepted a bad configuration", cfg)
		}
	}
}

func TestClose(t *testing.T) {
	h, f := newHeap(t)
	_, _ = h.Alloc(10)
	_, _ = h.Alloc(10 * gran)
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if len(f.mapped) != 0 || h.Len() != 0 {
		t.Errorf("Close left %d chunks mapped and %d allocations", len(f.mapped), h.Len())
	}
}
