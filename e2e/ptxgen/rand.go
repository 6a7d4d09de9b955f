package ptxgen

import "math"

// rng is splitmix64: tiny, and fixed here so that a seed means the same
// program on every Go release (math/rand's streams are not promised to
// stay the same).
type rng struct{ s uint64 }

func newRNG(seed uint64, version int) *rng { return &rng{s: seed ^ 0x9e3779b97f4a7c15*uint64(version)} }

func (r *rng) u64() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

func (r *rng) u32() uint32 { return uint32(r.u64() >> 32) }

// intn returns a number in [0, n).
func (r *rng) intn(n int) int { return int(r.u64() % uint64(n)) }

// chance is true with probability p.
func (r *rng) chance(p float64) bool { return float64(r.u64()>>11)/(1<<53) < p }

func pick[T any](r *rng, xs []T) T { return xs[r.intn(len(xs))] }

// Edge values mixed into the inputs.
var (
	edgeInt64 = []uint64{0, 1, 2, 3, ^uint64(0), ^uint64(1), 1 << 63, 1<<63 - 1, 0xffffffff80000000, 0x7fffffff,
		0x80000000, 0xffffffff, 0x100000000, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0xffffffffffff8000,
		0xffffffffffffff80, 31, 32, 33, 63, 64, 65, 0x5555555555555555, 0xaaaaaaaaaaaaaaaa, 0x8000000000000001}
	edgeF32 = []uint32{0, 0x80000000, 0x3f800000, 0xbf800000, 0x3f000000, 0x40000000, 0x7f800000, 0xff800000,
		0x7fc00000, 0xffc00000, 0x7fa00001, 0x7fc12345, 0xff812345, 0x00000001, 0x80000001, 0x007fffff, 0x00800000,
		0x80800000, 0x7f7fffff, 0xff7fffff, 0x3f800001, 0x4b800001, 0x4effffff, 0x4f000000, 0xcf000000, 0x5f000000,
		0x3effffff, 0x3f7fffff, 0x40490fdb, 0x00400000, 0x3fc00000, 0xbfc00000, 0x40200000, 0x4e800000}
	edgeF64 = []uint64{0, 1 << 63, 0x3ff0000000000000, 0xbff0000000000000, 0x7ff0000000000000, 0xfff0000000000000,
		0x7ff8000000000000, 0xfff8000000000000, 0x7ff4000000000001, 0x7ff8000012345678, 0xfff0000000000001, 1,
		0x000fffffffffffff, 0x0010000000000000, 0x7fefffffffffffff, 0x3ff0000000000001, 0x4340000000000001,
		0x43e0000000000000, 0xc3e0000000000000, 0x41dfffffffc00000, 0x400921fb54442d18, 0x3fe0000000000000,
		0x36a0000000000000, 0x47efffffe0000000, 0x47effffff0000000, 0x3810000000000000, 0x380fffffffffffff}
	edgeF16 = []uint16{0, 0x8000, 0x3c00, 0xbc00, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7d01, 0x7e55, 0x0001, 0x8001,
		0x03ff, 0x0400, 0x7bff, 0xfbff, 0x3c01, 0x3555, 0x5640, 0x4248}
	edgeBF16 = []uint16{0, 0x8000, 0x3f80, 0xbf80, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0x7fc1, 0x0001, 0x007f, 0x0080,
		0x7f7f, 0x3f81, 0x4049}
)

// niceF32 is a float of moderate magnitude with random mantissa bits, or a
// small integer, so that arithmetic rounds and compares interestingly.
func (r *rng) niceF32() uint32 {
	switch r.intn(4) {
	case 0:
		return math.Float32bits(float32(r.intn(2001) - 1000))
	case 1:
		return math.Float32bits(float32(r.intn(64)-32) / 8)
	}
	sign := uint32(r.intn(2)) << 31
	exp := uint32(127 + r.intn(41) - 20)
	return sign | exp<<23 | r.u32()&0x7fffff
}

func (r *rng) niceF64() uint64 {
	switch r.intn(4) {
	case 0:
		return math.Float64bits(float64(r.intn(2001) - 1000))
	case 1:
		return math.Float64bits(float64(r.intn(64)-32) / 8)
	}
	sign := uint64(r.intn(2)) << 63
	exp := uint64(1023 + r.intn(81) - 40)
	return sign | exp<<52 | r.u64()&(1<<52-1)
}

func (r *rng) f32Word() uint32 {
	if r.chance(0.35) {
		return pick(r, edgeF32)
	}
	return r.niceF32()
}

func (r *rng) half() uint16 {
	switch r.intn(4) {
	case 0:
		return pick(r, edgeF16)
	case 1:
		return pick(r, edgeBF16)
	case 2:
		// a moderate f16
		return uint16(r.intn(2))<<15 | uint16(15+r.intn(11)-5)<<10 | uint16(r.u32()&0x3ff)
	}
	// a moderate bf16
	return uint16(r.intn(2))<<15 | uint16(127+r.intn(21)-10)<<7 | uint16(r.u32()&0x7f)
}

// inputWord is one 64-bit input: an integer, two floats, a double or four
// halves, each either an edge value or a random one.
func (r *rng) inputWord() uint64 {
	switch r.intn(10) {
	case 0, 1, 2:
		return r.u64()
	case 3, 4:
		v := pick(r, edgeInt64)
		if r.chance(0.3) {
			v += uint64(r.intn(5)) - 2
		}
		return v
	case 5:
		return uint64(r.intn(200)) - 100
	case 6, 7:
		return uint64(r.f32Word())<<32 | uint64(r.f32Word())
	case 8:
		if r.chance(0.4) {
			return pick(r, edgeF64)
		}
		return r.niceF64()
	}
	return uint64(r.half())<<48 | uint64(r.half())<<32 | uint64(r.half())<<16 | uint64(r.half())
}
