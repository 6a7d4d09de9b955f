package ptx

import (
	"math"
	"math/bits"
)

// Lane-loop builders. Each returns an execFn that applies a scalar
// function to every active lane; the scalar function is chosen once at
// compile time for the instruction's type and modifiers.

func un(f func(a uint64) uint64) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a := int(in.d)*warpSize, int(in.a)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			r[d+l] = f(r[a+l])
		}
	}
}

func bin(f func(a, b uint64) uint64) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			r[d+l] = f(r[a+l], r[b+l])
		}
	}
}

func ter(f func(a, b, c uint64) uint64) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b, c := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.c)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			r[d+l] = f(r[a+l], r[b+l], r[c+l])
		}
	}
}

func quad(f func(a, b, c, e uint64) uint64) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b, c, e := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.c)*warpSize, int(in.e)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			r[d+l] = f(r[a+l], r[b+l], r[c+l], r[e+l])
		}
	}
}

// bin2 writes two results (setp with two predicate destinations).
func bin2(f func(a, b, c uint64) (uint64, uint64)) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, d2, a, b, c := int(in.d)*warpSize, int(in.d2)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.c)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			r[d+l], r[d2+l] = f(r[a+l], r[b+l], r[c+l])
		}
	}
}

// Hot paths written out so that the scalar operation inlines.

func opMov(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a := int(in.d)*warpSize, int(in.a)*warpSize
	if m == fullMask {
		copy(r[d:d+warpSize], r[a:a+warpSize])
		return
	}
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		r[d+l] = r[a+l]
	}
}

func opAdd32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		r[d+l] = uint64(uint32(r[a+l] + r[b+l]))
	}
}

func opAdd64(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		r[d+l] = r[a+l] + r[b+l]
	}
}

func opAddImm(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a := int(in.d)*warpSize, int(in.a)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		r[d+l] = r[a+l] + in.off
	}
}

func opMulWideS32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		r[d+l] = uint64(int64(int32(r[a+l])) * int64(int32(r[b+l])))
	}
}

func opMadLo32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a, b, c := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.c)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		r[d+l] = uint64(uint32(r[a+l]*r[b+l] + r[c+l]))
	}
}

func opShl64(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		s := uint32(r[b+l])
		if s >= 64 {
			r[d+l] = 0
		} else {
			r[d+l] = r[a+l] << s
		}
	}
}

func opNotPred(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a := int(in.d)*warpSize, int(in.a)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		r[d+l] = b2u(r[a+l] == 0)
	}
}

// setp with a plain comparison and one destination: the common loop test.
func setpFn(cmp func(a, b uint64) bool) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			r[d+l] = b2u(cmp(r[a+l], r[b+l]))
		}
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// setpFast covers the comparisons of loop tests and bounds checks on
// 32-bit integers without a call per lane.
func setpFast(op string, t ptype) execFn {
	var code int
	switch op {
	case "lt", "lo":
		code = 0
	case "le", "ls":
		code = 1
	case "gt", "hi":
		code = 2
	case "ge", "hs":
		code = 3
	case "eq":
		code = 4
	case "ne":
		code = 5
	default:
		return nil
	}
	var signed bool
	switch t {
	case tS32:
		signed = true
	case tU32, tB32:
	default:
		return nil
	}
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			x, y := int64(uint32(r[a+l])), int64(uint32(r[b+l]))
			if signed {
				x, y = int64(int32(x)), int64(int32(y))
			}
			var v bool
			switch code {
			case 0:
				v = x < y
			case 1:
				v = x <= y
			case 2:
				v = x > y
			case 3:
				v = x >= y
			case 4:
				v = x == y
			default:
				v = x != y
			}
			r[d+l] = b2u(v)
		}
	}
}

// opFmaF32 is fma.rn.f32 without .ftz or .sat, the inner loop of most
// float kernels.
func opFmaF32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a, b, c := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.c)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		x, y, z := f32(r[a+l]), f32(r[b+l]), f32(r[c+l])
		v := math.FMA(float64(x), float64(y), float64(z))
		var res float32
		if vb := math.Float64bits(v); vb&0x1fffffff != 0x10000000 && (math.Abs(v) >= 0x1p-126 || v == 0) {
			res = float32(v)
		} else {
			res = fma32(x, y, z, rmRN)
		}
		r[d+l] = b32(res)
	}
}
