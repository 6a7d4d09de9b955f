package ptx

import (
	"encoding/binary"
	"math"
	"math/big"
	"sort"
	"testing"
)

// testMem is a minimal device memory: allocations at increasing addresses
// with a gap between them, so that off-by-one accesses fault.
type testMem struct {
	next   uint64
	allocs []testAlloc
}

type testAlloc struct {
	base uint64
	data []byte
}

func newTestMem() *testMem { return &testMem{next: 0x7f00_0000_0000} }

func (m *testMem) alloc(n int) uint64 {
	n = max(n, 1) // like the backend: an empty variable still gets an address
	base := m.next
	m.allocs = append(m.allocs, testAlloc{base: base, data: make([]byte, n)})
	m.next += uint64(n+4095)&^4095 + 4096
	return base
}

func (m *testMem) Span(addr uint64) (uint64, []byte, bool) {
	i := sort.Search(len(m.allocs), func(i int) bool { return m.allocs[i].base+uint64(len(m.allocs[i].data)) > addr })
	if i == len(m.allocs) || addr < m.allocs[i].base {
		return 0, nil, false
	}
	return m.allocs[i].base, m.allocs[i].data, true
}

func (m *testMem) bytes(addr uint64) []byte {
	_, d, ok := m.Span(addr)
	if !ok {
		panic("no allocation")
	}
	return d
}

func (m *testMem) putF32(addr uint64, v []float32) {
	b := m.bytes(addr)
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
}

func (m *testMem) f32s(addr uint64, n int) []float32 {
	b := m.bytes(addr)
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

func (m *testMem) putU32(addr uint64, v []uint32) {
	b := m.bytes(addr)
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], x)
	}
}

func (m *testMem) u32s(addr uint64, n int) []uint32 {
	b := m.bytes(addr)
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

// params packs kernel arguments per the function's layout.
func params(t testing.TB, f *Function, args ...any) []byte {
	t.Helper()
	ps := f.Params()
	if len(ps) != len(args) {
		t.Fatalf("kernel %s takes %d parameters, got %d", f.Name(), len(ps), len(args))
	}
	buf := make([]byte, f.paramBytes())
	for i, a := range args {
		p := ps[i]
		b := buf[p.Offset : p.Offset+p.Size]
		switch v := a.(type) {
		case uint64:
			binary.LittleEndian.PutUint64(b, v)
		case int32:
			binary.LittleEndian.PutUint32(b, uint32(v))
		case uint32:
			binary.LittleEndian.PutUint32(b, v)
		case float32:
			binary.LittleEndian.PutUint32(b, math.Float32bits(v))
		case float64:
			binary.LittleEndian.PutUint64(b, math.Float64bits(v))
		case int64:
			binary.LittleEndian.PutUint64(b, uint64(v))
		default:
			t.Fatalf("unsupported argument type %T", a)
		}
	}
	return buf
}

func mustLoad(t testing.TB, src string) *Module {
	t.Helper()
	m, err := Load([]byte(src))
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return m
}

func mustFunc(t testing.TB, m *Module, name string) *Function {
	t.Helper()
	f, err := m.Function(name)
	if err != nil {
		t.Fatalf("Function(%q): %v", name, err)
	}
	return f
}

func bigFMA32(a, b, c float32) float32 {
	x := new(big.Float).SetPrec(200).SetFloat64(float64(a))
	x.Mul(x, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
	x.Add(x, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
	f, _ := x.Float32()
	return f
}
