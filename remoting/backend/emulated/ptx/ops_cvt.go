package ptx

import (
	"math"
	"math/big"
)

// cvtFn converts a register value of type st to type dt under the
// instruction's rounding and saturation modifiers.
func cvtFn(dt, st ptype, mods []string) func(a uint64) uint64 {
	ftz := hasMod(mods, "ftz")
	sat := hasMod(mods, "sat")
	mode := roundMode(mods)
	integral := false
	for _, m := range mods {
		if m == "rni" || m == "rzi" || m == "rmi" || m == "rpi" {
			integral = true
		}
	}
	switch {
	case !dt.float() && !st.float():
		return func(a uint64) uint64 {
			v := st.ext(a)
			if sat {
				return satInt(v, st.signed(), dt)
			}
			return v & dt.mask()
		}
	case !dt.float() && st.float():
		if !integral {
			mode = rmRZ
		}
		return func(a uint64) uint64 {
			x := roundIntegral(readFloat(st, a, ftz), mode)
			return floatToInt(x, dt, st)
		}
	case dt.float() && !st.float():
		return func(a uint64) uint64 {
			v := st.ext(a)
			var r float64
			var exactF *big.Float
			if st.signed() {
				r = float64(int64(v))
				if int64(float64(int64(v))) != int64(v) || math.Abs(r) >= 1<<63 {
					exactF = new(big.Float).SetInt64(int64(v))
				}
			} else {
				r = float64(v)
				if r >= 1<<64 || uint64(r) != v {
					exactF = new(big.Float).SetUint64(v)
				}
			}
			return fromFloat(r, exactF, dt, mode, sat)
		}
	default:
		narrow := mode
		if integral {
			narrow = rmRN
		}
		return func(a uint64) uint64 {
			x := readFloat(st, a, ftz)
			if x != x {
				if sat {
					return 0 // .sat turns NaN into +0
				}
				return nanConvert(dt, st, a, ftz)
			}
			if st == tBF16 && dt == tF32 {
				return a << 16 & 0xffffffff // exact
			}
			if integral {
				x = roundIntegral(x, mode)
			}
			if sat {
				x = sat01(x)
			}
			r := fromFloat(x, nil, dt, narrow, false)
			if ftz && dt == tF32 {
				r = uint64(math.Float32bits(ftz32(f32(r))))
			}
			return r
		}
	}
}

// fromFloat narrows an exact value x (or exact when non-nil, for integers
// that a double cannot hold) to float type dt.
func fromFloat(x float64, exact *big.Float, dt ptype, mode rmode, sat bool) uint64 {
	if sat {
		x = sat01(x)
	}
	switch dt {
	case tF64:
		if exact != nil {
			exact.SetMode(bigMode(mode)).SetPrec(53)
			r, _ := exact.Float64()
			return b64(r)
		}
		return b64(x)
	case tF32:
		if exact != nil {
			exact.SetMode(bigMode(mode)).SetPrec(24)
			r, _ := exact.Float32()
			return b32(r)
		}
		return b32(round32(x, 0, mode))
	case tF16:
		if exact != nil {
			x, _ = exact.Float64()
		}
		return uint64(toHalf(x, mode, 10, -14))
	case tBF16:
		if exact != nil {
			x, _ = exact.Float64()
		}
		return uint64(toHalf(x, mode, 7, -126))
	}
	return 0
}

func bigMode(m rmode) big.RoundingMode {
	switch m {
	case rmRZ:
		return big.ToZero
	case rmRM:
		return big.ToNegativeInf
	case rmRP:
		return big.ToPositiveInf
	}
	return big.ToNearestEven
}

func roundIntegral(x float64, mode rmode) float64 {
	switch mode {
	case rmRZ:
		return math.Trunc(x)
	case rmRM:
		return math.Floor(x)
	case rmRP:
		return math.Ceil(x)
	}
	return math.RoundToEven(x)
}

// floatToInt saturates as the device does: out-of-range values become the
// nearest bound. NaN becomes 1<<(width-1) from a double, signed or not,
// and from the narrower floats 0 for results of up to 32 bits but 1<<63
// for 64-bit ones (measured on an H200; see e2e/ptxgen and
// e2e/kernels/golden).
func floatToInt(x float64, dt, st ptype) uint64 {
	w := dt.bits()
	if x != x {
		if w == 64 || st == tF64 {
			return 1 << (w - 1)
		}
		return 0
	}
	if dt.signed() {
		lo := -math.Ldexp(1, int(w-1))
		hi := math.Ldexp(1, int(w-1))
		switch {
		case x <= lo:
			return uint64(int64(-1)<<(w-1)) & dt.mask()
		case x >= hi:
			return (uint64(1)<<(w-1) - 1) & dt.mask()
		}
		return uint64(int64(x)) & dt.mask()
	}
	hi := math.Ldexp(1, int(w))
	switch {
	case x <= 0:
		return 0
	case x >= hi:
		return dt.mask()
	}
	return uint64(x) & dt.mask()
}

func satInt(v uint64, srcSigned bool, dt ptype) uint64 {
	w := dt.bits()
	if dt.signed() {
		maxv := int64(1)<<(w-1) - 1
		minv := -int64(1) << (w - 1)
		if w == 64 {
			if !srcSigned && int64(v) < 0 {
				return uint64(maxv)
			}
			return v
		}
		if !srcSigned {
			if v > uint64(maxv) {
				return uint64(maxv) & dt.mask()
			}
			return v & dt.mask()
		}
		x := int64(v)
		x = max(min(x, maxv), minv)
		return uint64(x) & dt.mask()
	}
	if srcSigned && int64(v) < 0 {
		return 0
	}
	if w < 64 && v > dt.mask() {
		return dt.mask()
	}
	return v
}

// toHalf rounds x to a 16-bit float format with mant explicit mantissa
// bits and minimum normal exponent minExp (IEEE half: 10, -14; bfloat16:
// 7, -126), in rounding mode mode. Inputs are exact doubles.
func toHalf(x float64, mode rmode, mant int, minExp int) uint16 {
	expBits := 15 - mant
	bias := 1<<(expBits-1) - 1
	signBit := uint16(0)
	if math.Signbit(x) {
		signBit = 0x8000
	}
	if x != x {
		return uint16(0x7fff)
	}
	a := math.Abs(x)
	maxExp := bias
	maxFinite := math.Ldexp(2-math.Ldexp(1, -mant), maxExp)
	infBits := signBit | uint16((1<<expBits-1)<<mant)
	maxBits := infBits - 1
	if math.IsInf(a, 0) {
		return infBits
	}
	// Rounding direction for the magnitude.
	up := false
	switch mode {
	case rmRM:
		up = signBit != 0
	case rmRP:
		up = signBit == 0
	}
	_, e := math.Frexp(a) // a = f * 2^e, f in [0.5, 1)
	e--
	if e < minExp {
		e = minExp
	}
	q := math.Ldexp(1, e-mant)
	n := a / q // exact: scaling by a power of two
	fl := math.Floor(n)
	switch mode {
	case rmRN:
		if r := n - fl; r > 0.5 || r == 0.5 && math.Mod(fl, 2) == 1 {
			fl++
		}
	case rmRZ:
	default:
		if up && n != fl {
			fl++
		}
	}
	v := fl * q
	if v > maxFinite {
		if mode == rmRN || up {
			return infBits
		}
		return maxBits
	}
	if v == 0 {
		return signBit
	}
	fe := 0
	_, fe = math.Frexp(v)
	fe--
	if fe < minExp {
		// subnormal: mantissa field holds v / 2^(minExp-mant)
		return signBit | uint16(v/math.Ldexp(1, minExp-mant))
	}
	m := uint16(v/math.Ldexp(1, fe-mant)) & (1<<mant - 1)
	return signBit | uint16(fe+bias)<<mant | m
}

// nanConvert is a float-to-float conversion of a NaN as an H200 does it:
// from a double, the sign and the leading payload bits are kept and the
// quiet bit set; from a single to a double the same, except that .ftz
// gives the canonical single NaN widened; from bf16 to single, the bits
// as they are; otherwise the destination's canonical NaN.
func nanConvert(dt, st ptype, a uint64, ftz bool) uint64 {
	switch st {
	case tF64:
		sign, mant := a>>63, a&(1<<52-1)
		switch dt {
		case tF32:
			return sign<<31 | 0x7fc00000 | mant>>29
		case tF16:
			return sign<<15 | 0x7e00 | mant>>42
		case tBF16:
			return sign<<15 | 0x7fc0 | mant>>45
		}
		return a | 1<<51
	case tBF16:
		if dt == tF32 {
			return a << 16 & 0xffffffff
		}
	case tF16:
		if dt == tF64 {
			return a>>15&1<<63 | 0x7ff8000000000000 | a&0x3ff<<42
		}
	case tF32:
		if dt == tF64 {
			if ftz {
				return 0x7fffffffe0000000
			}
			return math.Float64bits(float64(math.Float32frombits(uint32(a)))) // payload kept, quieted
		}
	}
	switch dt {
	case tF32:
		return canonNaN32
	case tF16, tBF16:
		return 0x7fff
	}
	return 0x7ff8000000000000
}
