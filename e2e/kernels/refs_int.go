package kernels

import (
	"math"
	"math/bits"
)

// devfunc.cu, intops.cu, select.cu, memory.cu

func collatzSteps(x uint32, limit int32) int32 {
	var s int32
	for x != 1 && s < limit {
		if x&1 != 0 {
			x = 3*x + 1
		} else {
			x >>= 1
		}
		s++
	}
	return s
}

func gcd(a, b uint32) uint32 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func refDevfuncCalls(c *Case, m Mem) {
	in := Get[uint32](m, "in")
	iout, fout, uout := Get[int32](m, "iout"), Get[float32](m, "fout"), Get[uint64](m, "uout")
	poly := moduleGlobal[float32](c, m, "c_poly")
	for i, x := range in[:n(c)] {
		steps := collatzSteps(x&0xffff+1, 500)
		a, d := int32(x), int32(x>>24|1)
		iout[4*i], iout[4*i+1], iout[4*i+2], iout[4*i+3] = steps, a/d, a%d, int32(gcd(x&0xfffff, x>>12+1))
		xf := float32(x&0xff) / 256
		r := poly[4]
		for k := 3; k >= 0; k-- {
			r = fma32(r, xf, poly[k])
		}
		fout[i] = r
		acc := uint64(i)
		acc = acc*6364136223846793005 + uint64(x^0x9e3779b9)
		acc = acc*6364136223846793005 + uint64(uint32(steps)^7)
		uout[i] = acc
	}
	Put(m, "iout", iout)
	Put(m, "fout", fout)
	Put(m, "uout", uout)
}

// bfe is PTX bfe.u32/.s32 with pos and len below 32.
func bfe(x, pos, length uint32, signed bool) uint32 {
	var sbit uint32
	if signed && length != 0 {
		sbit = x >> min(pos+length-1, 31) & 1
	}
	var d uint32
	for i := uint32(0); i < 32; i++ {
		b := sbit
		if i < length && pos+i <= 31 {
			b = x >> (pos + i) & 1
		}
		d |= b << i
	}
	return d
}

// bfi is PTX bfi.b32: insert the low len bits of a into b at pos.
func bfi(a, b, pos, length uint32) uint32 {
	for i := uint32(0); i < length && pos+i <= 31; i++ {
		b = b&^(1<<(pos+i)) | (a>>i&1)<<(pos+i)
	}
	return b
}

// bytePerm is __byte_perm / prmt.b32 with selector nibbles of 0..7.
func bytePerm(x, y, s uint32) uint32 {
	src := uint64(y)<<32 | uint64(x)
	var r uint32
	for k := range 4 {
		sel := s >> (4 * k) & 7
		r |= uint32(src>>(8*sel)&0xff) << (8 * k)
	}
	return r
}

func refIntBitops(c *Case, m Mem) {
	as, bs, out := Get[uint32](m, "a"), Get[uint32](m, "b"), Get[uint32](m, "out")
	for i := range n(c) {
		x, y := as[i], bs[i]
		hilo := uint64(y)<<32 | uint64(x)
		sh, shc := y>>27, min(y>>26, 32)
		var ffs uint32
		if x != 0 {
			ffs = uint32(bits.TrailingZeros32(x)) + 1
		}
		sad := func(lt bool, a, b uint32) uint32 {
			if lt {
				return b - a
			}
			return a - b
		}
		r := y & 31
		o := out[20*i : 20*i+20]
		o[0] = uint32(bits.OnesCount32(x))
		o[1] = uint32(bits.LeadingZeros32(x))
		o[2] = bits.Reverse32(x)
		o[3] = bytePerm(x, y, y&0x7777)
		o[4] = uint32(hilo << (sh & 31) >> 32)
		o[5] = uint32(hilo << shc >> 32)
		o[6] = uint32(hilo >> (sh & 31))
		o[7] = uint32(hilo >> shc)
		o[8] = ffs
		o[9] = bfe(x, y&31, y>>5&31, false)
		o[10] = bfe(x, y&31, y>>5&31, true)
		o[11] = bfi(y, x, y>>10&31, y>>15&31)
		o[12] = uint32(uint64(x) * uint64(y) >> 32)
		o[13] = uint32(int64(int32(x)) * int64(int32(y)) >> 32)
		o[14] = sad(int32(x) < int32(y), x, y) + 7
		o[15] = sad(x < y, x, y) + 3
		o[16] = uint32((int64(int32(x)) + int64(int32(y))) >> 1)
		o[17] = uint32((int64(int32(x)) + int64(int32(y)) + 1) >> 1)
		o[18] = uint32(int64(int32(x<<8)>>8) * int64(int32(y<<8)>>8))
		o[19] = bits.RotateLeft32(x, int(r)) + uint32(int32(x)>>r)
	}
	Put(m, "out", out)
}

// mulhi64 is the high half of the signed 128-bit product.
func mulhi64(x, y int64) int64 {
	hi, _ := bits.Mul64(uint64(x), uint64(y))
	if x < 0 {
		hi -= uint64(y)
	}
	if y < 0 {
		hi -= uint64(x)
	}
	return int64(hi)
}

func refInt64Math(c *Case, m Mem) {
	as, bs, out := Get[uint64](m, "a"), Get[uint64](m, "b"), Get[uint64](m, "out")
	b2u := func(b bool) uint64 {
		if b {
			return 1
		}
		return 0
	}
	for i := range n(c) {
		x, y := as[i], bs[i]
		s := uint(y & 63)
		d := y>>s | 1
		sd := int64(d>>1 | 1)
		if y&2 != 0 {
			sd = -sd
		}
		if sd == -1 {
			sd = 3
		}
		hi, _ := bits.Mul64(x, y)
		var ffs uint64
		if x != 0 {
			ffs = uint64(bits.TrailingZeros64(x)) + 1
		}
		o := out[20*i : 20*i+20]
		o[0], o[1], o[2], o[3] = x+y, x-y, x*y, hi
		o[4] = uint64(mulhi64(int64(x), int64(y)))
		o[5], o[6], o[7] = x<<s, x>>s, uint64(int64(x)>>s)
		o[8], o[9] = x/d, x%d
		o[10], o[11] = uint64(int64(x)/sd), uint64(int64(x)%sd)
		o[12], o[13] = uint64(bits.OnesCount64(x)), uint64(bits.LeadingZeros64(x))
		o[14], o[15] = bits.Reverse64(x), ffs
		o[16] = uint64(min(int64(x), int64(y)))
		o[17] = max(x, y)
		o[18] = b2u(int64(x) < int64(y)) + 2*b2u(x < y)
		o[19] = (x ^ (y * 0x9e3779b97f4a7c15)) + bits.RotateLeft64(x, 13)
	}
	Put(m, "out", out)
}

func refDivrem32(c *Case, m Mem) {
	as, bs, out := Get[int32](m, "a"), Get[int32](m, "b"), Get[int32](m, "out")
	for i := range n(c) {
		x, ub := as[i], uint32(bs[i])
		d := int32(ub >> (ub & 31) & 0x7fffffff)
		if ub&0x20 != 0 {
			d = -d
		}
		if d == 0 || (d == -1 && x == math.MinInt32) {
			d = 1
		}
		ux := uint32(x)
		o := out[12*i : 12*i+12]
		o[0], o[1] = x/d, x%d
		o[2], o[3] = int32(ux/uint32(d)), int32(ux%uint32(d))
		o[4], o[5] = x/7, x%7
		o[6], o[7] = int32(ux/10), int32(ux%10)
		o[8], o[9], o[10] = x/-3, x/16, x%16
		o[11] = int32(ux / 0x12345)
	}
	Put(m, "out", out)
}

func refSelectPred(c *Case, m Mem) {
	as, bs, out := Get[int32](m, "a"), Get[int32](m, "b"), Get[int32](m, "out")
	for i := range n(c) {
		a, b := as[i], bs[i]
		o := out[8*i : 8*i+8]
		if a > b {
			o[0] = a - b
		} else {
			o[0] = b - a
		}
		o[1] = min(max(a, -100), 100)
		o[2] = a
		if a < 0 {
			o[2] = -a
		}
		o[3] = 0
		if a > 0 {
			o[3] = 1
		} else if a < 0 {
			o[3] = -1
		}
		if a&1 != 0 {
			o[4] = a * 3
		} else {
			o[4] = a / 2
		}
		o[5] = 2
		if (a < b && b < 1000) || a == 7 {
			o[5] = 1
		}
		if uint32(a) < uint32(b) {
			o[6] = max(a, b)
		} else {
			o[6] = min(a, b)
		}
		var s int32
		if a > 0 {
			s += b
		}
		if b&2 != 0 {
			s ^= a
		}
		if a < b {
			s--
		}
		o[7] = s
	}
	Put(m, "out", out)
}

func refDivergentLoop(c *Case, m Mem) {
	in, out := Get[uint32](m, "in"), Get[uint32](m, "out")
	for i := range n(c) {
		x := in[i]
		var steps, tag uint32
		for x >= 16 {
			if x&1 != 0 {
				x = x/3 + x&7
				switch x & 7 {
				case 0:
					tag++
				case 1:
					tag ^= 0x10
				case 2:
					tag *= 3
				case 3:
					tag += x
				case 4:
					tag -= 7
				case 5:
					tag = tag<<1 | 1
				case 6:
					tag = ^tag
				default:
					tag += 100
				}
			} else {
				x >>= 1
				if steps&4 != 0 {
					steps += 2
					continue
				}
			}
			steps++
			if steps > 200 {
				break
			}
		}
		out[3*i], out[3*i+1], out[3*i+2] = x, steps, tag
	}
	Put(m, "out", out)
}

func refVecLoad(c *Case, m Mem) {
	in4, out4 := Get[float32](m, "in4"), Get[float32](m, "out4")
	ini2, outi2 := Get[int32](m, "ini2"), Get[int32](m, "outi2")
	ind2, outd2 := Get[float64](m, "ind2"), Get[float64](m, "outd2")
	for i := range n(c) {
		x, y, z, w := in4[4*i], in4[4*i+1], in4[4*i+2], in4[4*i+3]
		copy(out4[4*i:], []float32{w * 2, z + 1, y - x, x})
		outi2[2*i], outi2[2*i+1] = ini2[2*i+1], ini2[2*i]+ini2[2*i+1]
		outd2[2*i], outd2[2*i+1] = ind2[2*i+1], ind2[2*i]*0.5
	}
	Put(m, "out4", out4)
	Put(m, "outi2", outi2)
	Put(m, "outd2", outd2)
}

func refUseGlobals(c *Case, m Mem) {
	in, out, fout := Get[int32](m, "in"), Get[int32](m, "out"), Get[float32](m, "fout")
	table := moduleGlobal[int32](c, m, "c_table")
	scale := moduleGlobal[float32](c, m, "c_scale")
	offset := moduleGlobal[int32](c, m, "c_offset")
	lut := moduleGlobal[uint32](c, m, "g_lut")
	bias := moduleGlobal[float32](c, m, "g_bias")
	counter := moduleGlobal[int32](c, m, "g_counter")
	sum64 := moduleGlobal[uint64](c, m, "g_sum64")
	for i, v := range in[:n(c)] {
		out[i] = v*table[v&15] + int32(lut[i&7]) + offset[0]
		fout[i] = fma32(float32(v), scale[i&1], bias[0])
		counter[0]++
		sum64[0] += uint64(uint32(v))
	}
	Put(m, "out", out)
	Put(m, "fout", fout)
	putIfDeclared(m, "g_counter", counter)
	putIfDeclared(m, "g_sum64", sum64)
}

func refLocalArray(c *Case, m Mem) {
	in, out := Get[uint32](m, "in"), Get[uint32](m, "out")
	for i := range n(c) {
		var loc [32]uint32
		x := in[i]
		for k := range uint32(32) {
			loc[k] = x ^ (k * 0x9e3779b9)
			x = x*1664525 + 1013904223
		}
		var acc uint32
		idx := in[i] & 31
		for k := range uint32(64) {
			acc += loc[idx]
			loc[(idx*7+k)&31] ^= acc
			idx = acc >> 3 & 31
		}
		out[i] = acc
	}
	Put(m, "out", out)
}
