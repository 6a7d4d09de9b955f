package cuda

import "testing"

func TestSpans(t *testing.T) {
	var r spans
	r.add(span{base: 0x1000, size: 0x100})
	r.add(span{base: 0x3000, size: 0x1000})
	r.add(span{base: 0x2000, size: 0x10, module: 7})
	r.add(span{base: 0x5000, size: 0}) // ignored
	tests := []struct {
		p, n uint64
		want bool
	}{
		{0x1000, 0x100, true},
		{0x1000, 0x101, false},
		{0x10ff, 1, true},
		{0x1100, 1, false},
		{0x1100, 0, true}, // one past the end, as CUDA allows for zero-byte copies
		{0x0fff, 2, false},
		{0x2008, 8, true},
		{0x2008, 9, false},
		{0x3000, 0x1000, true},
		{0x3800, ^uint64(0), false}, // overflow must not wrap into range
		{0x4000, 1, false},
		{0x5000, 0, false},
		{0, 0, false},
	}
	for _, tt := range tests {
		if got := r.contains(tt.p, tt.n); got != tt.want {
			t.Errorf("contains(%#x, %#x) = %v, want %v", tt.p, tt.n, got, tt.want)
		}
	}
	if _, ok := r.remove(0x1010); ok {
		t.Error("removed a range by an inner address")
	}
	if x, ok := r.remove(0x1000); !ok || x.size != 0x100 {
		t.Errorf("remove(0x1000) = %v %v", x, ok)
	}
	if r.contains(0x1000, 1) {
		t.Error("removed range still found")
	}
	r.dropModule(7)
	if r.contains(0x2000, 1) {
		t.Error("module global survived its module")
	}
	if got := r.allocations(); len(got) != 1 || got[0].base != 0x3000 {
		t.Errorf("allocations = %v", got)
	}
	// A new range over stale ones replaces them.
	r.add(span{base: 0x2800, size: 0x1000})
	if !r.contains(0x2800, 0x1000) || r.contains(0x3900, 1) {
		t.Errorf("overlapping add left %v", r.s)
	}
}

// TestSpansCovers: a range across back-to-back ranges (VMM mappings in one
// reservation) is covered; one across a gap or past the end is not.
func TestSpansCovers(t *testing.T) {
	var r spans
	r.add(span{base: 0x10000, size: 0x1000})
	r.add(span{base: 0x11000, size: 0x2000})
	r.add(span{base: 0x14000, size: 0x1000}) // a gap before it
	tests := []struct {
		p, n uint64
		want bool
	}{
		{0x10800, 0x1000, true}, // astride the first seam
		{0x10000, 0x3000, true}, // both mappings whole
		{0x10000, 0x3001, false},
		{0x12800, 0x2000, false}, // across the gap
		{0x14000, 0x1000, true},
		{0x13000, 1, false},
		{0x13000, 0, true}, // one past the end
		{0x10800, ^uint64(0), false},
	}
	for _, tt := range tests {
		if got := r.covers(tt.p, tt.n); got != tt.want {
			t.Errorf("covers(%#x, %#x) = %v, want %v", tt.p, tt.n, got, tt.want)
		}
	}
}
