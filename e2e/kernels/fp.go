package kernels

import (
	"math"
	"math/big"
)

// Floating-point helpers for the references. Go evaluates float32
// arithmetic in float32 with round-to-nearest-even, which matches CUDA's
// default (.rn) for +, -, *; the helpers cover what Go has no operator for:
// a single-rounding float32 fma, directed rounding modes, and PTX's
// saturating float-to-integer conversions.

// fma32 returns a*b+c rounded once to float32 (nearest even).
//
// a*b is exact in float64. The sum is computed in float64 and made
// round-to-odd with its exact error (TwoSum); rounding a round-to-odd value
// with at least two extra bits to float32 is then correctly rounded.
func fma32(a, b, c float32) float32 {
	p := float64(float64(a) * float64(b)) // the conversion forbids fusing
	cc := float64(c)
	s := p + cc
	if math.IsInf(s, 0) || math.IsNaN(s) {
		return float32(s)
	}
	bb := s - p
	e := (p - (s - bb)) + (cc - bb)
	if e != 0 {
		bits := math.Float64bits(s)
		if bits&1 == 0 {
			if (e > 0) == (s > 0) {
				bits++
			} else {
				bits--
			}
			s = math.Float64frombits(bits)
		}
	}
	return float32(s)
}

func bigf(x float64) *big.Float { return new(big.Float).SetFloat64(x) }

// rounded returns the value op writes into a big.Float of the given precision
// and rounding mode. Results here stay in the normal range of the target
// type, so the precision alone models it.
func rounded(prec uint, mode big.RoundingMode, op func(z *big.Float)) float64 {
	z := new(big.Float).SetPrec(prec).SetMode(mode)
	op(z)
	v, _ := z.Float64()
	return v
}

const (
	rz = big.ToZero
	rd = big.ToNegativeInf
	ru = big.ToPositiveInf
	rn = big.ToNearestEven
)

func add32(a, b float32, m big.RoundingMode) float32 {
	return float32(rounded(24, m, func(z *big.Float) { z.Add(bigf(float64(a)), bigf(float64(b))) }))
}

func mul32(a, b float32, m big.RoundingMode) float32 {
	return float32(rounded(24, m, func(z *big.Float) { z.Mul(bigf(float64(a)), bigf(float64(b))) }))
}

func div32(a, b float32, m big.RoundingMode) float32 {
	return float32(rounded(24, m, func(z *big.Float) { z.Quo(bigf(float64(a)), bigf(float64(b))) }))
}

func fma32m(a, b, c float32, m big.RoundingMode) float32 {
	p := new(big.Float).SetPrec(128).Mul(bigf(float64(a)), bigf(float64(b)))
	return float32(rounded(24, m, func(z *big.Float) { z.Add(p, bigf(float64(c))) }))
}

func add64(a, b float64, m big.RoundingMode) float64 {
	return rounded(53, m, func(z *big.Float) { z.Add(bigf(a), bigf(b)) })
}

func mul64(a, b float64, m big.RoundingMode) float64 {
	return rounded(53, m, func(z *big.Float) { z.Mul(bigf(a), bigf(b)) })
}

func div64(a, b float64, m big.RoundingMode) float64 {
	return rounded(53, m, func(z *big.Float) { z.Quo(bigf(a), bigf(b)) })
}

// sqrt32rd is the largest float32 whose square does not exceed x (x >= 0).
func sqrt32rd(x float32) float32 {
	r := float32(math.Sqrt(float64(x))) // correctly rounded: 53 >= 2*24+2
	if float64(r)*float64(r) > float64(x) {
		r = math.Nextafter32(r, 0)
	}
	return r
}

// sqrt64ru is the smallest float64 whose square is not below x (x >= 0).
func sqrt64ru(x float64) float64 {
	r := math.Sqrt(x)
	if math.FMA(r, r, -x) < 0 {
		r = math.Nextafter(r, math.Inf(1))
	}
	return r
}

// toF32 rounds a float64 to float32 in mode m.
func toF32(x float64, m big.RoundingMode) float32 {
	return float32(rounded(24, m, func(z *big.Float) { z.Set(bigf(x)) }))
}

func i64ToF32(v int64, m big.RoundingMode) float32 {
	return float32(rounded(24, m, func(z *big.Float) { z.SetInt64(v) }))
}

func u64ToF32(v uint64, m big.RoundingMode) float32 {
	return float32(rounded(24, m, func(z *big.Float) { z.SetUint64(v) }))
}

func u64ToF64(v uint64, m big.RoundingMode) float64 {
	return rounded(53, m, func(z *big.Float) { z.SetUint64(v) })
}

// roundInt rounds x to an integral float64 in mode m.
func roundInt(x float64, m big.RoundingMode) float64 {
	switch m {
	case rz:
		return math.Trunc(x)
	case rd:
		return math.Floor(x)
	case ru:
		return math.Ceil(x)
	}
	return math.RoundToEven(x)
}

// cvtInt is PTX cvt from a float to a signed integer of the given bit width:
// round in mode m, out-of-range values saturate. NaN gives 0 for 32-bit
// results but the most negative value for 64-bit ones: that is what the
// H200 computes (recorded in golden/), whatever the ISA text suggests.
func cvtInt(x float64, m big.RoundingMode, width uint) int64 {
	if math.IsNaN(x) {
		if width == 64 {
			return math.MinInt64
		}
		return 0
	}
	lo, hi := -math.Ldexp(1, int(width-1)), math.Ldexp(1, int(width-1))
	r := roundInt(x, m)
	switch {
	case r < lo:
		return int64(-1) << (width - 1)
	case r >= hi:
		return int64(uint64(1)<<(width-1) - 1)
	}
	return int64(r)
}

// cvtUint is PTX cvt from a float to an unsigned integer of the given width.
// NaN gives 0, or 1<<63 for 64-bit results, as the hardware does.
func cvtUint(x float64, m big.RoundingMode, width uint) uint64 {
	if math.IsNaN(x) {
		if width == 64 {
			return 1 << 63
		}
		return 0
	}
	r := roundInt(x, m)
	switch {
	case r <= 0:
		return 0
	case r >= math.Ldexp(1, int(width)):
		if width == 64 {
			return math.MaxUint64
		}
		return uint64(1)<<width - 1
	}
	return uint64(r)
}

// f32ToF16 converts to IEEE binary16 bits, rounding to nearest even
// (toZero false) or toward zero, as cvt.rn/.rz.f16.f32 do.
func f32ToF16(x float32, toZero bool) uint16 {
	bits := math.Float32bits(x)
	sign := uint16(bits>>16) & 0x8000
	a := math.Abs(float64(x))
	switch {
	case math.IsNaN(float64(x)):
		return 0x7fff
	case math.IsInf(float64(x), 0):
		return sign | 0x7c00
	}
	round := math.RoundToEven
	if toZero {
		round = math.Trunc
	}
	var h uint32
	if a < 0x1p-14 {
		h = uint32(round(a * 0x1p24)) // subnormal: units of 2^-24
	} else {
		_, exp := math.Frexp(a) // a = f * 2^exp, f in [0.5, 1)
		e := exp - 1            // a in [2^e, 2^(e+1))
		q := uint32(round(math.Ldexp(a, 10-e)))
		h = uint32(e+14)<<10 + q // q in [1024, 2048]; a carry moves into the exponent
	}
	if h >= 0x7c00 {
		if toZero {
			h = 0x7bff
		} else {
			h = 0x7c00
		}
	}
	return sign | uint16(h)
}

// f16ToF64 widens binary16 bits exactly.
func f16ToF64(h uint16) float64 {
	sign := 1.0
	if h&0x8000 != 0 {
		sign = -1
	}
	e := int(h>>10) & 0x1f
	m := float64(h & 0x3ff)
	switch e {
	case 0:
		return sign * math.Ldexp(m, -24)
	case 31:
		if m != 0 {
			return math.NaN()
		}
		return sign * math.Inf(1)
	}
	return sign * math.Ldexp(1024+m, e-25)
}
