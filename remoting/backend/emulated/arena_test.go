package emulated

import "testing"

// BenchmarkSpan looks addresses up among 4096 allocations: repeated hits
// on one buffer (the cache), two buffers in turn (a+b), and addresses
// scattered over all of them (the binary search every time).
func BenchmarkSpan(b *testing.B) {
	m := newArena(1 << 40)
	defer m.freeAll()
	var bases []uint64
	for i := 0; i < 4096; i++ {
		a, err := m.alloc(4096, 1)
		if err != nil {
			b.Fatal(err)
		}
		bases = append(bases, a.base)
	}
	b.Run("same buffer", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, ok := m.Span(bases[100] + uint64(i%4096)); !ok {
				b.Fatal("miss")
			}
		}
	})
	b.Run("two buffers", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, ok := m.Span(bases[100+i%2] + 8); !ok {
				b.Fatal("miss")
			}
		}
	})
	b.Run("scattered", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, _, ok := m.Span(bases[(i*613)%len(bases)] + 8); !ok {
				b.Fatal("miss")
			}
		}
	})
}
