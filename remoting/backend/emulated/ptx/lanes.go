package ptx

import (
	"math"
	"math/bits"

	"github.com/gpuctl/gpuctl/remoting/cu"
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

// unRefuse is un for an instruction whose result the emulator cannot
// establish for some operands (refuse): such a lane fails the launch with
// CUDA_ERROR_NOT_SUPPORTED, naming the instruction and (why, formatted
// with the operand) the reason.
func unRefuse(f func(a uint64) uint64, refuse func(a uint64) bool, why string) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a := int(in.d)*warpSize, int(in.a)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			if refuse(r[a+l]) {
				w.fail(cu.ErrorNotSupported, in, why, r[a+l])
			}
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

// binNaN and terNaN are bin and ter for the double operations whose
// result is unknown for some NaN operands (nan64): such a lane refuses the
// instruction, naming it and the operands, rather than guess.
func binNaN(f func(a, b uint64) (uint64, bool)) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			v, ok := f(r[a+l], r[b+l])
			if !ok {
				w.refuseNaN(in, r[a+l], r[b+l])
			}
			r[d+l] = v
		}
	}
}

func terNaN(f func(a, b, c uint64) (uint64, bool)) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b, c := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.c)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			v, ok := f(r[a+l], r[b+l], r[c+l])
			if !ok {
				w.refuseNaN(in, r[a+l], r[b+l], r[c+l])
			}
			r[d+l] = v
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

// Common 32- and 64-bit integer operations, dispatched by a switch inside
// the lane loop rather than a call per lane.
const (
	fastSub32 = iota
	fastAnd
	fastOr
	fastXor
	fastShl32
	fastShrU32
	fastShrS32
	fastMulLo32
	fastSub64
	fastMulLo64
	fastShrU64
	fastMinS32
	fastMaxS32
)

var fastIntOps = map[string]map[ptype]uint32{
	"sub": {tS32: fastSub32, tU32: fastSub32, tB32: fastSub32, tS64: fastSub64, tU64: fastSub64, tB64: fastSub64},
	"and": {tB32: fastAnd, tU32: fastAnd, tS32: fastAnd, tB64: fastAnd, tU64: fastAnd, tS64: fastAnd},
	"or":  {tB32: fastOr, tU32: fastOr, tS32: fastOr, tB64: fastOr, tU64: fastOr, tS64: fastOr},
	"xor": {tB32: fastXor, tU32: fastXor, tS32: fastXor, tB64: fastXor, tU64: fastXor, tS64: fastXor},
	"shl": {tB32: fastShl32, tU32: fastShl32, tS32: fastShl32},
	"shr": {tU32: fastShrU32, tB32: fastShrU32, tS32: fastShrS32, tU64: fastShrU64, tB64: fastShrU64},
	"mul": {tS32: fastMulLo32, tU32: fastMulLo32, tS64: fastMulLo64, tU64: fastMulLo64},
	"min": {tS32: fastMinS32},
	"max": {tS32: fastMaxS32},
}

// fastInt returns the fast path for op on t with mods, if there is one.
func fastInt(op string, t ptype, mods []string) (uint32, bool) {
	for _, m := range mods {
		if m == "hi" || m == "wide" || m == "sat" || m == "cc" {
			return 0, false
		}
	}
	code, ok := fastIntOps[op][t]
	return code, ok
}

func opFastInt(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
	code := in.aux
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		x, y := r[a+l], r[b+l]
		var v uint64
		switch code {
		case fastSub32:
			v = uint64(uint32(x - y))
		case fastAnd:
			v = x & y
		case fastOr:
			v = x | y
		case fastXor:
			v = x ^ y
		case fastShl32:
			if s := uint32(y); s < 32 {
				v = uint64(uint32(x) << s)
			}
		case fastShrU32:
			if s := uint32(y); s < 32 {
				v = uint64(uint32(x) >> s)
			}
		case fastShrS32:
			v = uint64(uint32(int32(uint32(x)) >> min(uint32(y), 31)))
		case fastMulLo32:
			v = uint64(uint32(x * y))
		case fastSub64:
			v = x - y
		case fastMulLo64:
			v = x * y
		case fastShrU64:
			if s := uint32(y); s < 64 {
				v = x >> s
			}
		case fastMinS32:
			v = uint64(uint32(min(int32(uint32(x)), int32(uint32(y)))))
		case fastMaxS32:
			v = uint64(uint32(max(int32(uint32(x)), int32(uint32(y)))))
		}
		r[d+l] = v
	}
}
