package ptx

import "math"

// Half-precision arithmetic (.f16, .bf16 and their packed x2 forms).
// add, sub and mul are computed in single precision and rounded once to
// the half format, which equals the correctly rounded half result because
// single precision carries more than twice the half format's bits plus
// two. fma is rounded to odd in double precision first, which makes the
// final rounding correct too. The NaN rules are an H200's (see
// e2e/ptxgen): arithmetic, neg, abs, min and max give the canonical NaN
// 0x7fff.

// halfFormat describes one of the 16-bit float formats.
type halfFormat struct {
	mant   int // explicit mantissa bits
	minExp int // exponent of the smallest normal
	expMsk uint16
}

var (
	fmtF16  = halfFormat{mant: 10, minExp: -14, expMsk: 0x7c00}
	fmtBF16 = halfFormat{mant: 7, minExp: -126, expMsk: 0x7f80}
)

func (h halfFormat) isNaN(v uint16) bool {
	return v&h.expMsk == h.expMsk && v&(1<<h.mant-1) != 0
}

func (h halfFormat) isSub(v uint16) bool { return v&h.expMsk == 0 && v&(1<<h.mant-1) != 0 }

func (h halfFormat) decode(v uint16) float32 {
	if h.mant == 7 {
		return math.Float32frombits(uint32(v) << 16)
	}
	return f16ToF32(v)
}

// encode rounds x (exact in float64) to the format, to nearest even.
func (h halfFormat) encode(x float64) uint16 {
	if x != x {
		return 0x7fff
	}
	return toHalf(x, rmRN, h.mant, h.minExp)
}

func halfFormatOf(t ptype) (halfFormat, int) {
	lanes := 1
	if t == tF16x2 || t == tBF16x2 {
		lanes = 2
	}
	if t == tBF16 || t == tBF16x2 {
		return fmtBF16, lanes
	}
	return fmtF16, lanes
}

// perLane applies f to each 16-bit half of the operands.
func perLane(lanes int, f func(a, b, c uint16) uint16) func(a, b, c uint64) uint64 {
	return func(a, b, c uint64) uint64 {
		var out uint64
		for i := 0; i < lanes; i++ {
			s := uint(16 * i)
			out |= uint64(f(uint16(a>>s), uint16(b>>s), uint16(c>>s))) << s
		}
		return out
	}
}

// halfArith builds a lane function from an operation on exact values:
// .ftz flushes subnormal inputs and results to zero (keeping the sign),
// .sat clamps to [0, 1] (NaN and -0 give +0), .relu clamps negatives to
// +0 and keeps NaN.
func halfArith(h halfFormat, mods []string, op func(x, y, z float64) float64) func(a, b, c uint16) uint16 {
	ftz := hasMod(mods, "ftz")
	sat := hasMod(mods, "sat")
	relu := hasMod(mods, "relu")
	in := func(v uint16) float64 {
		if ftz && h.isSub(v) {
			return math.Copysign(0, float64(int16(v)))
		}
		return float64(h.decode(v))
	}
	return func(a, b, c uint16) uint16 {
		r := op(in(a), in(b), in(c))
		switch {
		case sat:
			r = sat01(r)
		case relu && (r < 0 || r == 0):
			r = 0
		}
		v := h.encode(r)
		if ftz && h.isSub(v) {
			v &= 0x8000
		}
		return v
	}
}

func halfBinary(op string, t ptype, mods []string) func(a, b uint64) uint64 {
	h, lanes := halfFormatOf(t)
	var lane func(a, b, c uint16) uint16
	switch op {
	case "add", "sub", "mul":
		f := map[string]func(x, y float32) float32{
			"add": func(x, y float32) float32 { return x + y },
			"sub": func(x, y float32) float32 { return x - y },
			"mul": func(x, y float32) float32 { return x * y },
		}[op]
		lane = halfArith(h, mods, func(x, y, _ float64) float64 { return float64(f(float32(x), float32(y))) })
	case "min", "max":
		lane = halfMinMax(h, op == "min", hasMod(mods, "NaN"))
	default:
		unsupported("%s on .%s", op, t)
	}
	g := perLane(lanes, lane)
	return func(a, b uint64) uint64 { return g(a, b, 0) }
}

// halfMinMax: a NaN operand is ignored; two NaNs, or with .NaN any NaN
// operand, give the canonical NaN.
func halfMinMax(h halfFormat, isMin, nanProp bool) func(a, b, _ uint16) uint16 {
	return func(a, b, _ uint16) uint16 {
		an, bn := h.isNaN(a), h.isNaN(b)
		switch {
		case nanProp && (an || bn):
			return 0x7fff
		case an && bn:
			return 0x7fff
		case an:
			return b
		case bn:
			return a
		}
		x, y := h.decode(a), h.decode(b)
		switch {
		case x == y:
			// -0 orders below +0
			if (a&0x8000 != 0) == isMin {
				return a
			}
			return b
		case (x < y) == isMin:
			return a
		}
		return b
	}
}

func halfFma(t ptype, mods []string) func(a, b, c uint64) uint64 {
	h, lanes := halfFormatOf(t)
	return perLane(lanes, halfArith(h, mods, fmaOdd))
}

// fmaOdd is x*y+z rounded to odd in double precision: the product of two
// half values is exact, the sum's error is known exactly (twoSum), and a
// result rounded to odd with more than two extra bits rounds correctly
// once more to the narrower format.
func fmaOdd(x, y, z float64) float64 {
	p := x * y
	s, e := twoSum(p, z)
	if e != 0 && e == e && !math.IsInf(s, 0) && math.Float64bits(s)&1 == 0 {
		s = math.Nextafter(s, math.Inf(sign(e)))
	}
	if s == 0 && e == 0 {
		return zeroSum(p, z, rmRN)
	}
	return s
}

func halfUnary(op string, t ptype, mods []string) func(a uint64) uint64 {
	h, lanes := halfFormatOf(t)
	var lane func(a, b, c uint16) uint16
	switch op {
	case "neg":
		lane = func(a, _, _ uint16) uint16 {
			if h.isNaN(a) {
				return 0x7fff
			}
			return a ^ 0x8000
		}
	case "abs":
		lane = func(a, _, _ uint16) uint16 {
			if h.isNaN(a) {
				return 0x7fff
			}
			return a &^ 0x8000
		}
	default:
		var f func(x float64) float64
		switch op {
		case "ex2":
			f = math.Exp2
		case "tanh":
			f = math.Tanh
		case "sqrt":
			f = math.Sqrt
		case "rsqrt":
			f = func(x float64) float64 { return 1 / math.Sqrt(x) }
		case "rcp":
			f = func(x float64) float64 { return 1 / x }
		case "lg2":
			f = math.Log2
		case "sin":
			f = math.Sin
		case "cos":
			f = math.Cos
		default:
			return nil
		}
		lane = halfArith(h, mods, func(x, _, _ float64) float64 { return f(x) })
	}
	g := perLane(lanes, lane)
	return func(a uint64) uint64 { return g(a, 0, 0) }
}
