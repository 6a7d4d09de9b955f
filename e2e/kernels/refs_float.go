package kernels

import "math"

// floatmath.cu, fastmath.cu, convert.cu, half.cu

func f32(x float64) float32 { return float32(x) }

func refFloatMath(c *Case, m Mem) {
	xs, ys := Get[float32](m, "x"), Get[float32](m, "y")
	exact, approx := Get[float32](m, "exact"), Get[float32](m, "approx")
	for i := range n(c) {
		x, y := xs[i], ys[i]
		ax := float32(math.Abs(float64(x)))
		X, Y := float64(x), float64(y)
		e := exact[22*i : 22*i+22]
		e[0], e[1], e[2] = x+y, x-y, x*y
		e[3] = f32(X / Y)                  // double rounding of / is exact: 53 >= 2*24+2
		e[4] = f32(math.Sqrt(float64(ax))) // likewise for sqrt
		e[5] = fma32(x, y, x)
		e[6], e[7] = min(x, y), max(x, y)
		e[8], e[9], e[10] = f32(math.Floor(X)), f32(math.Ceil(X)), f32(math.Trunc(X))
		e[11], e[12] = f32(math.RoundToEven(X)), f32(math.Round(X))
		e[13] = float32(math.Copysign(float64(ax), Y))
		e[14] = add32(x, y, rz)
		e[15], e[16] = mul32(x, y, rd), mul32(x, y, ru)
		e[17] = div32(x, y, rz)
		e[18] = f32(1 / X)
		e[19] = sqrt32rd(ax)
		e[20] = fma32m(x, y, 1, ru)
		e[21] = float32(math.Max(0, math.Min(1, X)))
		a := approx[16*i : 16*i+16]
		a[0], a[1] = f32(math.Exp(X)), f32(math.Log(float64(ax+1)))
		a[2], a[3] = f32(math.Sin(X)), f32(math.Cos(X))
		a[4] = f32(1 / math.Sqrt(float64(ax+0.25)))
		a[5] = f32(X / Y)
		a[6], a[7] = f32(math.Exp2(X)), f32(math.Log2(float64(ax+1)))
		a[8], a[9], a[10] = f32(math.Tanh(X)), f32(math.Exp(X)), f32(math.Log(float64(ax+1)))
		a[11], a[12] = f32(math.Sin(X)), f32(math.Cos(X))
		a[13] = f32(math.Pow(float64(ax+0.5), Y))
		a[14] = f32(math.Atan2(Y, X))
		a[15] = f32(math.Erf(X))
	}
	Put(m, "exact", exact)
	Put(m, "approx", approx)
}

func refDoubleMath(c *Case, m Mem) {
	xs, ys := Get[float64](m, "x"), Get[float64](m, "y")
	exact, approx := Get[float64](m, "exact"), Get[float64](m, "approx")
	for i := range n(c) {
		x, y := xs[i], ys[i]
		ax := math.Abs(x)
		e := exact[20*i : 20*i+20]
		e[0], e[1], e[2], e[3] = x+y, x-y, float64(x*y), x/y
		e[4], e[5] = math.Sqrt(ax), math.FMA(x, y, x)
		e[6], e[7] = math.Min(x, y), math.Max(x, y)
		e[8], e[9], e[10] = math.Floor(x), math.Ceil(x), math.Trunc(x)
		e[11], e[12] = math.RoundToEven(x), math.Round(x)
		e[13], e[14], e[15] = add64(x, y, rz), mul64(x, y, ru), div64(x, y, rd)
		e[16], e[17] = 1/x, sqrt64ru(ax)
		e[18], e[19] = float64(float32(x)), float64(toF32(x, rz))
		a := approx[10*i : 10*i+10]
		a[0], a[1], a[2], a[3] = math.Exp(x), math.Log(ax+1), math.Sin(x), math.Cos(x)
		a[4], a[5] = math.Tanh(x), 1/math.Sqrt(ax+0.25)
		a[6], a[7] = math.Pow(ax+0.5, y), math.Atan2(y, x)
		a[8], a[9] = math.Cbrt(x), math.Erf(x)
	}
	Put(m, "exact", exact)
	Put(m, "approx", approx)
}

func refFastMath(c *Case, m Mem) {
	xs, ys, out := Get[float32](m, "x"), Get[float32](m, "y"), Get[float32](m, "out")
	for i := range n(c) {
		X, Y := float64(xs[i]), float64(ys[i])
		A := math.Abs(X)
		o := out[12*i : 12*i+12]
		o[0], o[1], o[2], o[3] = f32(math.Exp(X)), f32(math.Log(A+1)), f32(math.Sin(X)), f32(math.Cos(X))
		o[4], o[5], o[6] = f32(math.Tanh(X)), f32(X/Y), f32(math.Sqrt(A))
		o[7], o[8] = f32(1/math.Sqrt(A+0.25)), f32(math.Pow(A+0.5, Y))
		o[9], o[10], o[11] = f32(math.Exp2(X)), f32(math.Log2(A+1)), f32(math.Pow(10, X*0.25))
	}
	Put(m, "out", out)
}

func refConvertF2I(c *Case, m Mem) {
	in := Get[float32](m, "in")
	oi, ou := Get[int32](m, "oi"), Get[uint32](m, "ou")
	oll, oull := Get[int64](m, "oll"), Get[uint64](m, "oull")
	for i := range n(c) {
		v := float64(in[i])
		oi[4*i+0] = int32(cvtInt(v, rn, 32))
		oi[4*i+1] = int32(cvtInt(v, rz, 32))
		oi[4*i+2] = int32(cvtInt(v, ru, 32))
		oi[4*i+3] = int32(cvtInt(v, rd, 32))
		ou[2*i+0] = uint32(cvtUint(v, rn, 32))
		ou[2*i+1] = uint32(cvtUint(v, rz, 32))
		oll[2*i+0] = cvtInt(v, rn, 64)
		oll[2*i+1] = cvtInt(v, rz, 64)
		oull[i] = cvtUint(v, ru, 64)
	}
	Put(m, "oi", oi)
	Put(m, "ou", ou)
	Put(m, "oll", oll)
	Put(m, "oull", oull)
}

func refConvertI2F(c *Case, m Mem) {
	in, in64 := Get[int32](m, "in"), Get[int64](m, "in64")
	of, od, oll := Get[float32](m, "of"), Get[float64](m, "od"), Get[int64](m, "oll")
	for i := range n(c) {
		v, w := in[i], in64[i]
		V := int64(v)
		copy(of[8*i:], []float32{
			i64ToF32(V, rn), i64ToF32(V, rz), i64ToF32(V, ru), i64ToF32(V, rd),
			u64ToF32(uint64(uint32(v)), rn), i64ToF32(w, rn), u64ToF32(uint64(w), rz),
			toF32(float64(w)*0x1p-20, ru),
		})
		copy(od[4*i:], []float64{float64(v), float64(w), u64ToF64(uint64(w), rz), float64(uint32(v))})
		oll[2*i] = cvtInt(float64(float64(w)*0.001), rn, 64)
		oll[2*i+1] = cvtInt(float64(float64(v)*0.75), rd, 32)
	}
	Put(m, "of", of)
	Put(m, "od", od)
	Put(m, "oll", oll)
}

func refConvertHalf(c *Case, m Mem) {
	in, h, back := Get[float32](m, "in"), Get[uint16](m, "h"), Get[float32](m, "back")
	for i := range n(c) {
		rnBits := f32ToF16(in[i], false)
		// the product of two halves is exact in float32, then rounds once to half
		prod := f32ToF16(float32(f16ToF64(rnBits)*0.75), false)
		h[3*i], h[3*i+1], h[3*i+2] = rnBits, f32ToF16(in[i], true), prod
		back[i] = float32(f16ToF64(rnBits))
	}
	Put(m, "h", h)
	Put(m, "back", back)
}
