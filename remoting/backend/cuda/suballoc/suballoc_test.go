package suballoc

import (
	"errors"
	"fmt"
	"math/rand/v2"
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
	// failUnmap makes Unmap fail.
	failUnmap error
	drains    int
	// busy are the ranges freed since the last drain: work queued
	// before the free may still use them, so none may be mapped again,
	// unmapped or handed out until a drain.
	busy      map[uint64]uint64
	violation string
}

func (f *fakeBacking) Drain() error {
	if f.fail != nil {
		return f.fail
	}
	f.drains++
	clear(f.busy)
	return nil
}

// overlapsBusy names the busy range [p, p+n) meets, if any.
func (f *fakeBacking) overlapsBusy(p, n uint64) (uint64, bool) {
	for b, s := range f.busy {
		if p < b+s && b < p+n {
			return b, true
		}
	}
	return 0, false
}

func newFake() *fakeBacking {
	return &fakeBacking{next: 0x7f0000000000, mapped: map[uint64]uint64{}, busy: map[uint64]uint64{}}
}

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
	if f.failUnmap != nil {
		return f.failUnmap
	}
	if f.mapped[base] != size {
		return errors.New("unmap of something not mapped")
	}
	if b, ok := f.overlapsBusy(base, size); ok && f.violation == "" {
		f.violation = fmt.Sprintf("chunk %#x unmapped while %#x, freed after work was queued on it, was not drained", base, b)
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
	if c, _ := h.Alloc(700); c == a {
		t.Errorf("a freed slot was handed out again before the device drained")
	} else {
		_ = h.Free(c)
	}
	if err := h.Reclaim(); err != nil {
		t.Fatal(err)
	}
	c, _ := h.Alloc(700)
	if c != a {
		t.Errorf("a freed slot was not reused first-fit after the drain: got %#x, want %#x", c, a)
	}
	if f.drains != 0 {
		t.Errorf("%d drains where the chunk had room and the caller reclaimed, want 0", f.drains)
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
	// A dedicated chunk goes back at the drain.
	p, _ := h.Alloc(8 * gran)
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	if len(f.mapped) != 2 || h.Pending() != 8*gran {
		t.Errorf("%d chunks mapped and %d bytes pending after freeing a large allocation, want 2 and %d", len(f.mapped), h.Pending(), 8*gran)
	}
	if err := h.Drain(); err != nil {
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
	if err := h.Drain(); err != nil {
		t.Fatal(err)
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
	if err := h.Reclaim(); err != nil {
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

// TestFreeIsStreamOrdered drives a heap with random allocations and frees
// while a fake device still runs the work queued before each free: no
// freed range may be handed out again or unmapped until the heap has
// drained the device, as cuMemFree's memory may not be reused while
// kernels launched before it run. Unmapping it then faults those kernels
// with an illegal address.
func TestFreeIsStreamOrdered(t *testing.T) {
	for _, maxPending := range []uint64{0, 3 * gran, 1} {
		t.Run(fmt.Sprintf("max pending %d", maxPending), func(t *testing.T) {
			f := newFake()
			h, err := New(Config{Granularity: gran, SmallChunk: small, Align: 256, MaxPending: maxPending}, f)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, maxPending))
			sizes := []uint64{256, 1000, 4096, 64 << 10, small / 2, small/2 + 1, gran, 3 * gran}
			var live []uint64
			for i := range 5000 {
				if len(live) > 0 && rng.IntN(2) == 0 {
					j := rng.IntN(len(live))
					p := live[j]
					n, _ := h.Size(p)
					live = append(live[:j], live[j+1:]...)
					f.busy[p] = n // work queued before the free uses it
					if err := h.Free(p); err != nil {
						t.Fatal(err)
					}
				} else {
					n := sizes[rng.IntN(len(sizes))]
					p, err := h.Alloc(n)
					if err != nil {
						t.Fatal(err)
					}
					if b, ok := f.overlapsBusy(p, n); ok {
						t.Fatalf("step %d: Alloc(%d) = %#x reuses %#x, freed after work was queued on it, before a drain", i, n, p, b)
					}
					live = append(live, p)
				}
				if f.violation != "" {
					t.Fatalf("step %d: %s", i, f.violation)
				}
				if i%1000 == 999 && rng.IntN(2) == 0 {
					// The caller saw the device idle (a context
					// synchronisation) and says so.
					clear(f.busy)
					if err := h.Reclaim(); err != nil {
						t.Fatal(err)
					}
				}
			}
			if maxPending != 1 && f.drains > 2500 {
				t.Errorf("%d drains in 5000 steps: the quarantine is not saving any", f.drains)
			}
			if err := h.Close(); err != nil || len(f.mapped) != 0 {
				t.Errorf("Close = %v with %d chunks still mapped", err, len(f.mapped))
			}
		})
	}
}

// TestSameSizeChunkTakenOver: a program that allocates and frees one
// large temporary buffer per step (Thrust's sort) gets the same chunk
// back after one drain, without an unmap and a map.
func TestSameSizeChunkTakenOver(t *testing.T) {
	h, f := newHeap(t)
	p, _ := h.Alloc(5 * gran)
	for range 10 {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
		q, err := h.Alloc(5*gran - 100)
		if err != nil {
			t.Fatal(err)
		}
		if q != p {
			t.Fatalf("a large allocation after freeing one of the same size got %#x, want the freed chunk %#x", q, p)
		}
	}
	if f.maps != 1 || f.drains != 10 {
		t.Errorf("%d maps and %d drains for ten reuses, want 1 and 10", f.maps, f.drains)
	}
}

// TestFailedDrain: a device that reports an error (a faulted context)
// when drained keeps the freed memory quarantined, and the allocation
// that needed the drain fails with the device's error.
func TestFailedDrain(t *testing.T) {
	h, f := newHeap(t)
	p, _ := h.Alloc(4 * gran)
	if err := h.Free(p); err != nil {
		t.Fatal(err)
	}
	fault := errors.New("illegal address")
	f.fail = fault
	if _, err := h.Alloc(4 * gran); !errors.Is(err, fault) {
		t.Errorf("Alloc needing a drain of a faulted device = %v, want its error", err)
	}
	if _, ok := f.mapped[p]; !ok || h.Pending() != 4*gran {
		t.Errorf("a failed drain unmapped the freed chunk or forgot it (pending %d)", h.Pending())
	}
	f.fail = nil
	if err := h.Drain(); err != nil || len(f.mapped) != 0 {
		t.Errorf("Drain = %v, %d chunks mapped; want nil, 0", err, len(f.mapped))
	}
}

// TestUnmapFailureInDrain: a freed chunk that cannot be unmapped at the
// drain stays mapped for Close, and does not keep an allocation from
// taking over another freed chunk of its size.
func TestUnmapFailureInDrain(t *testing.T) {
	h, f := newHeap(t)
	a, _ := h.Alloc(4 * gran)
	b, _ := h.Alloc(2 * gran)
	for _, p := range []uint64{a, b} {
		if err := h.Free(p); err != nil {
			t.Fatal(err)
		}
	}
	f.failUnmap = errors.New("unmap failed")
	if p, err := h.Alloc(4 * gran); err != nil || p != a {
		t.Errorf("Alloc after a failed unmap of another chunk = %#x, %v; want the freed %#x, nil", p, err, a)
	}
	if _, ok := f.mapped[b]; !ok || len(h.Chunks()) != 2 {
		t.Errorf("the chunk that failed to unmap is gone (%d chunks)", len(h.Chunks()))
	}
	f.failUnmap = nil
	if err := h.Close(); err != nil || len(f.mapped) != 0 {
		t.Errorf("Close = %v with %d chunks mapped; want nil, 0", err, len(f.mapped))
	}
}
