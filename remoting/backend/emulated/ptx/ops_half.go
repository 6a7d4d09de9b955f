package ptx

import "math"

// Half-precision arithmetic (.f16, .bf16 and their packed x2 forms) is
// computed in single precision and rounded once to the half format; for
// add, sub and mul that equals the correctly rounded half result because
// single precision carries more than twice the half format's bits.

func halfCodec(t ptype) (dec func(uint64) float32, enc func(float32) uint64, lanes int) {
	lanes = 1
	if t == tF16x2 || t == tBF16x2 {
		lanes = 2
	}
	if t == tBF16 || t == tBF16x2 {
		return func(v uint64) float32 { return math.Float32frombits(uint32(v&0xffff) << 16) },
			func(f float32) uint64 { return uint64(f32ToBF16(f)) }, lanes
	}
	return func(v uint64) float32 { return f16ToF32(uint16(v)) },
		func(f float32) uint64 {
			if f != f {
				return 0x7fff
			}
			return uint64(f32ToF16(f))
		}, lanes
}

// lift applies f to each 16-bit half of the operands.
func liftHalf(t ptype, f func(x, y, z float32) float32) func(a, b, c uint64) uint64 {
	dec, enc, n := halfCodec(t)
	return func(a, b, c uint64) uint64 {
		var out uint64
		for i := 0; i < n; i++ {
			s := uint(16 * i)
			out |= enc(f(dec(a>>s), dec(b>>s), dec(c>>s))) << s
		}
		return out
	}
}

func halfBinary(op string, t ptype, mods []string) func(a, b uint64) uint64 {
	var f func(x, y, z float32) float32
	switch op {
	case "add":
		f = func(x, y, _ float32) float32 { return x + y }
	case "sub":
		f = func(x, y, _ float32) float32 { return x - y }
	case "mul":
		f = func(x, y, _ float32) float32 { return x * y }
	case "min", "max":
		isMin := op == "min"
		nan := hasMod(mods, "NaN")
		f = func(x, y, _ float32) float32 { return float32(fminmax(float64(x), float64(y), isMin, nan)) }
	default:
		unsupported("%s on .%s", op, t)
	}
	if hasMod(mods, "sat") {
		g := f
		f = func(x, y, z float32) float32 { return float32(sat01(float64(g(x, y, z)))) }
	}
	h := liftHalf(t, f)
	return func(a, b uint64) uint64 { return h(a, b, 0) }
}

func halfFma(t ptype, mods []string) func(a, b, c uint64) uint64 {
	sat := hasMod(mods, "sat")
	relu := hasMod(mods, "relu")
	return liftHalf(t, func(x, y, z float32) float32 {
		r := float32(math.FMA(float64(x), float64(y), float64(z)))
		if sat {
			r = float32(sat01(float64(r)))
		}
		if relu && (r < 0 || r != r) {
			r = 0
		}
		return r
	})
}

func halfUnary(op string, t ptype, mods []string) func(a uint64) uint64 {
	_, _, n := halfCodec(t)
	switch op {
	case "neg":
		if n == 2 {
			return func(a uint64) uint64 { return a ^ 0x80008000 }
		}
		return func(a uint64) uint64 { return (a ^ 0x8000) & 0xffff }
	case "abs":
		if n == 2 {
			return func(a uint64) uint64 { return a &^ 0x80008000 & 0xffffffff }
		}
		return func(a uint64) uint64 { return a &^ 0x8000 & 0xffff }
	}
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
	h := liftHalf(t, func(x, _, _ float32) float32 { return float32(f(float64(x))) })
	return func(a uint64) uint64 { return h(a, 0, 0) }
}
