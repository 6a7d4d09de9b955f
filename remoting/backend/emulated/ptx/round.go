package ptx

import (
	"math"
	"math/big"
)

// Correctly rounded results in the directed modes (.rz .rm .rp), which the
// host's float64 arithmetic cannot give directly: the exact value is
// computed with math/big and rounded here, with IEEE-754's subnormals,
// overflow (a directed mode rounds an overflow to the largest finite
// value on one side) and the sign of exact zeros. math/big's own Float64
// rounds subnormals and overflows to nearest whatever the mode, so the
// last step is done by roundExact.

// roundExact rounds x to a binary format with p-bit significands, minimum
// normal exponent emin and maximum exponent emax, in mode. The result is
// returned as a float64, which holds every value of the formats used
// (double: 53, -1022, 1023; single: 24, -126, 127).
func roundExact(x *big.Float, p, emin, emax int, mode rmode) float64 {
	neg := x.Signbit()
	switch {
	case x.IsInf():
		return math.Inf(sign64(neg))
	case x.Sign() == 0:
		return math.Copysign(0, float64(sign64(neg)))
	}
	e := x.MantExp(nil) - 1 // x = 1.f × 2^e
	qe := max(e, emin) - (p - 1)
	n := new(big.Float).SetPrec(x.Prec()+64).SetMantExp(x, -qe)
	n.Abs(n)
	t, _ := n.Int(nil) // truncated toward zero
	frac := new(big.Float).SetPrec(n.Prec()).Sub(n, new(big.Float).SetInt(t))
	if frac.Sign() != 0 {
		up := false
		switch mode {
		case rmRN:
			c := frac.Cmp(big.NewFloat(0.5))
			up = c > 0 || c == 0 && t.Bit(0) == 1
		case rmRM:
			up = neg
		case rmRP:
			up = !neg
		}
		if up {
			t.Add(t, big.NewInt(1))
		}
	}
	r := new(big.Float).SetInt(t)
	r.SetMantExp(r, qe)
	if r.MantExp(nil)-1 > emax {
		// Overflow: to infinity, or to the largest finite value when the
		// mode rounds toward zero on this side.
		if mode == rmRN || mode == rmRM && neg || mode == rmRP && !neg {
			return math.Inf(sign64(neg))
		}
		r.SetMantExp(big.NewFloat(1), emax+1)
		r.Sub(r, new(big.Float).SetMantExp(big.NewFloat(1), emax+1-p))
	}
	f, _ := r.Float64()
	if neg {
		f = -f
	}
	return f
}

func sign64(neg bool) int {
	if neg {
		return -1
	}
	return 1
}

// bigPrec holds any exact sum, product or fma of doubles: the largest
// addend and the smallest product lie 2^1024 and 2^-2148 apart.
const bigPrec = 3400

func bigOf(x float64) *big.Float { return new(big.Float).SetPrec(bigPrec).SetFloat64(x) }

// directed64 is op (add, sub, mul, div, fma, sqrt, rcp) on doubles,
// correctly rounded in a directed mode. Operands that are NaN or infinite
// give the host's (exact) special result.
func directed64(op string, mode rmode, a, b, c float64) float64 {
	special := func(xs ...float64) bool {
		for _, x := range xs {
			if math.IsInf(x, 0) || x != x {
				return true
			}
		}
		return false
	}
	var x *big.Float
	switch op {
	case "add", "sub":
		if special(a, b) {
			if op == "sub" {
				return a - b // a NaN b keeps its sign
			}
			return a + b
		}
		if op == "sub" {
			b = -b
		}
		x = bigOf(a).Add(bigOf(a), bigOf(b))
		if x.Sign() == 0 {
			return zeroSum(a, b, mode)
		}
	case "mul":
		if special(a, b) || a == 0 || b == 0 {
			return a * b
		}
		x = bigOf(a).Mul(bigOf(a), bigOf(b))
	case "fma":
		if special(a, b, c) {
			return math.FMA(a, b, c)
		}
		p := bigOf(a).Mul(bigOf(a), bigOf(b))
		x = new(big.Float).SetPrec(bigPrec).Add(p, bigOf(c))
		if x.Sign() == 0 {
			ps := 1.0
			if p.Signbit() || p.Sign() == 0 && math.Signbit(a) != math.Signbit(b) {
				ps = -1
			}
			return zeroSum(math.Copysign(0, ps), c, mode)
		}
	case "div", "rcp":
		if op == "rcp" {
			a, b = 1, a
		}
		if special(a, b) || a == 0 || b == 0 {
			return a / b
		}
		// A quotient rounded in the same direction at a higher precision
		// first rounds correctly again at 53 bits.
		x = new(big.Float).SetPrec(200).SetMode(bigMode(mode)).Quo(bigOf(a), bigOf(b))
	case "sqrt":
		if special(a) || a <= 0 {
			return math.Sqrt(a)
		}
		x = new(big.Float).SetPrec(200).SetMode(bigMode(mode)).Sqrt(bigOf(a))
	default:
		panic("directed64: " + op)
	}
	return roundExact(x, 53, -1022, 1023, mode)
}

// zeroSum is the sign IEEE-754 gives an exact zero sum a+b: negative when
// both addends are, or when they cancel while rounding toward -inf.
func zeroSum(a, b float64, mode rmode) float64 {
	if math.Signbit(a) && math.Signbit(b) || mode == rmRM && !(a == 0 && b == 0 && !math.Signbit(a) && !math.Signbit(b)) {
		return math.Copysign(0, -1)
	}
	return 0
}
