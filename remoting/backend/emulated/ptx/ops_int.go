package ptx

import (
	"math"
	"math/bits"
)

// Integer arithmetic and logic. Registers hold values zero- or
// sign-extended to 64 bits; each operation reads its operands at the
// instruction's width (t.ext) and writes a result masked to it.

func intBinary(op string, t ptype, mods []string) func(a, b uint64) uint64 {
	mask := t.mask()
	w := t.bits()
	sg := t.signed()
	ext := t.ext
	sat := hasMod(mods, "sat")
	switch op {
	case "add":
		if sat && t == tS32 {
			return func(a, b uint64) uint64 { return sat32(int64(int32(a)) + int64(int32(b))) }
		}
		return func(a, b uint64) uint64 { return (a + b) & mask }
	case "sub":
		if sat && t == tS32 {
			return func(a, b uint64) uint64 { return sat32(int64(int32(a)) - int64(int32(b))) }
		}
		return func(a, b uint64) uint64 { return (a - b) & mask }
	case "mul", "mul24":
		switch {
		case hasMod(mods, "hi") && op == "mul24":
			return func(a, b uint64) uint64 {
				x, y := ext(a)&0xffffff, ext(b)&0xffffff
				if sg {
					x, y = sext(x, 24), sext(y, 24)
				}
				return (x * y >> 16) & mask
			}
		case op == "mul24":
			return func(a, b uint64) uint64 {
				x, y := a&0xffffff, b&0xffffff
				if sg {
					x, y = sext(x, 24), sext(y, 24)
				}
				return (x * y) & mask
			}
		case hasMod(mods, "wide"):
			wm := uint64(1)<<(2*w) - 1
			if w == 32 {
				wm = ^uint64(0)
			}
			return func(a, b uint64) uint64 { return (ext(a) * ext(b)) & wm }
		case hasMod(mods, "hi"):
			return func(a, b uint64) uint64 { return mulHi(ext(a), ext(b), w, sg) & mask }
		}
		return func(a, b uint64) uint64 { return (a * b) & mask }
	case "div":
		if sg {
			return func(a, b uint64) uint64 {
				x, y := int64(ext(a)), int64(ext(b))
				switch {
				case y == 0:
					return mask // the device returns all ones
				case y == -1:
					return uint64(-x) & mask
				}
				return uint64(x/y) & mask
			}
		}
		return func(a, b uint64) uint64 {
			x, y := a&mask, b&mask
			if y == 0 {
				return mask
			}
			return x / y
		}
	case "rem":
		if sg {
			return func(a, b uint64) uint64 {
				x, y := int64(ext(a)), int64(ext(b))
				if y == 0 {
					return uint64(x) & mask
				}
				if y == -1 {
					return 0
				}
				return uint64(x%y) & mask
			}
		}
		return func(a, b uint64) uint64 {
			x, y := a&mask, b&mask
			if y == 0 {
				return x
			}
			return x % y
		}
	case "min", "max":
		isMin := op == "min"
		if sg {
			return func(a, b uint64) uint64 {
				x, y := int64(ext(a)), int64(ext(b))
				if (x < y) == isMin {
					return uint64(x) & mask
				}
				return uint64(y) & mask
			}
		}
		return func(a, b uint64) uint64 {
			x, y := a&mask, b&mask
			if (x < y) == isMin {
				return x
			}
			return y
		}
	case "and":
		return func(a, b uint64) uint64 { return a & b & mask }
	case "or":
		return func(a, b uint64) uint64 { return (a | b) & mask }
	case "xor":
		return func(a, b uint64) uint64 { return (a ^ b) & mask }
	case "shl":
		return func(a, b uint64) uint64 {
			s := uint32(b)
			if uint(s) >= w {
				return 0
			}
			return (a << s) & mask
		}
	case "shr":
		if sg {
			return func(a, b uint64) uint64 {
				s := uint32(b)
				if uint(s) >= w {
					s = uint32(w - 1)
				}
				return uint64(int64(ext(a))>>s) & mask
			}
		}
		return func(a, b uint64) uint64 {
			s := uint32(b)
			if uint(s) >= w {
				return 0
			}
			return (a & mask) >> s
		}
	}
	return nil
}

func sat32(v int64) uint64 {
	if v > math.MaxInt32 {
		v = math.MaxInt32
	}
	if v < math.MinInt32 {
		v = math.MinInt32
	}
	return uint64(uint32(int32(v)))
}

// mulHi is the high half of the 2w-bit product of a and b (already
// extended to 64 bits according to their signedness).
func mulHi(a, b uint64, w uint, signed bool) uint64 {
	if w < 64 {
		return (a * b) >> w
	}
	hi, _ := bits.Mul64(a, b)
	if signed {
		if int64(a) < 0 {
			hi -= b
		}
		if int64(b) < 0 {
			hi -= a
		}
	}
	return hi
}

func intUnary(op string, t ptype) func(a uint64) uint64 {
	mask := t.mask()
	w := t.bits()
	switch op {
	case "not":
		if t == tPred {
			return func(a uint64) uint64 { return b2u(a == 0) }
		}
		return func(a uint64) uint64 { return ^a & mask }
	case "cnot":
		return func(a uint64) uint64 { return b2u(a&mask == 0) }
	case "neg":
		return func(a uint64) uint64 { return -a & mask }
	case "abs":
		return func(a uint64) uint64 {
			v := int64(sext(a, w))
			if v < 0 {
				v = -v
			}
			return uint64(v) & mask
		}
	case "popc":
		return func(a uint64) uint64 { return uint64(bits.OnesCount64(a & mask)) }
	case "clz":
		return func(a uint64) uint64 { return uint64(bits.LeadingZeros64(a&mask) - (64 - int(w))) }
	case "brev":
		return func(a uint64) uint64 { return bits.Reverse64(a) >> (64 - w) }
	}
	return nil
}

// bfind returns the bit position of the most significant non-sign bit.
func bfind(t ptype, shiftAmt bool) func(a uint64) uint64 {
	w := t.bits()
	return func(a uint64) uint64 {
		x := a & t.mask()
		if t.signed() && x>>(w-1) != 0 {
			x = ^x & t.mask()
		}
		if x == 0 {
			return 0xffffffff
		}
		p := uint64(63 - bits.LeadingZeros64(x))
		if shiftAmt {
			p = uint64(w-1) - p
		}
		return p
	}
}

func bfe(t ptype) func(a, b, c uint64) uint64 {
	w := uint64(t.bits())
	signed := t.signed()
	mask := t.mask()
	// The ISA reads the low 8 bits of the position and length; an H200
	// reads all 32 bits in the 64-bit forms (see e2e/ptxgen).
	fieldMask := uint64(0xff)
	if w == 64 {
		fieldMask = 0xffffffff
	}
	return func(a, b, c uint64) uint64 {
		pos, ln := b&fieldMask, c&fieldMask
		x := a & mask
		var sbit uint64
		if signed && ln != 0 {
			msb := min(pos+ln-1, w-1)
			sbit = x >> msb & 1
		}
		var d uint64
		for i := uint64(0); i < w; i++ {
			var bit uint64
			if i < ln && pos+i <= w-1 {
				bit = x >> (pos + i) & 1
			} else {
				bit = sbit
			}
			d |= bit << i
		}
		return d
	}
}

func bfi(t ptype) func(f, b, pos, ln uint64) uint64 {
	w := uint64(t.bits())
	mask := t.mask()
	fieldMask := uint64(0xff)
	if w == 64 {
		fieldMask = 0xffffffff
	}
	return func(f, b, pos, ln uint64) uint64 {
		p, l := pos&fieldMask, ln&fieldMask
		d := b & mask
		for i := uint64(0); i < l && p+i < w; i++ {
			d = d&^(1<<(p+i)) | (f>>i&1)<<(p+i)
		}
		return d
	}
}

// bfiConstLen is the length an H200 inserts for a bfi.b32 whose position
// and length are both constants, which ptxas folds into other
// instructions. The version-2 corpus (every such bfi that differs from the
// ISA's reading, seeds 64 422 525 829 898 903 1073 1139 1392 1463 1530
// 1640 1750 1792 1824 1926 2010 2012 2035 2039 2122 2142 2513 2761 2918
// 3096 3390 3466 3501 3641 3866 4009 4027) and the probe
// bitfields-immediate follow it: a position of 32 or more, or one that is
// a multiple of 8 (a byte-aligned field), reads as the ISA says; any other
// position with a length of 32 or more inserts only the length's low five
// bits' worth (32 and 64 insert nothing, 65 one bit). ok is false for
// such a position with a length of 70 or more, which nothing recorded.
func bfiConstLen(pos, ln uint64) (uint64, bool) {
	pos, ln = pos&0xff, ln&0xff
	switch {
	case ln < 32 || pos >= 32 || pos%8 == 0:
		return ln, true // the ISA's reading
	case ln >= 70:
		return 0, false
	}
	return ln & 31, true
}

func prmt(mode string) func(a, b, c uint64) uint64 {
	return func(a, b, c uint64) uint64 {
		src := uint64(uint32(b))<<32 | uint64(uint32(a))
		byteOf := func(i uint64) uint64 { return src >> (8 * (i & 7)) & 0xff }
		var sel [4]uint64
		s := c & 0xffff
		switch mode {
		case "f4e": // the named modes read only c's low two bits
			for i := uint64(0); i < 4; i++ {
				sel[i] = (s&3 + i) & 7
			}
		case "b4e":
			for i := uint64(0); i < 4; i++ {
				sel[i] = (s&3 - i + 8) & 7
			}
		case "rc8":
			for i := range sel {
				sel[i] = s & 3
			}
		case "ecl":
			for i := uint64(0); i < 4; i++ {
				sel[i] = max(s&3, i)
			}
		case "ecr":
			for i := uint64(0); i < 4; i++ {
				sel[i] = min(s&3, i)
			}
		case "rc16":
			sel = [4]uint64{s & 1 * 2, s&1*2 + 1, s & 1 * 2, s&1*2 + 1}
		default:
			var d uint64
			for i := uint64(0); i < 4; i++ {
				n := s >> (4 * i) & 0xf
				v := byteOf(n & 7)
				if n&8 != 0 {
					if v&0x80 != 0 {
						v = 0xff
					} else {
						v = 0
					}
				}
				d |= v << (8 * i)
			}
			return d
		}
		var d uint64
		for i := uint64(0); i < 4; i++ {
			d |= byteOf(sel[i]) << (8 * i)
		}
		return d
	}
}

// shf is the funnel shift of the 64-bit value b:a.
func shf(left, wrap bool) func(a, b, c uint64) uint64 {
	return func(a, b, c uint64) uint64 {
		n := uint32(c)
		if wrap {
			n &= 31
		} else if n > 32 {
			n = 32
		}
		v := uint64(uint32(b))<<32 | uint64(uint32(a))
		if left {
			return uint64(uint32((v << n) >> 32))
		}
		return uint64(uint32(v >> n))
	}
}

func lop3(a, b, c, lut uint64) uint64 {
	var d uint64
	for i := uint64(0); i < 8; i++ {
		if lut>>i&1 == 0 {
			continue
		}
		x := c
		if i&1 == 0 {
			x = ^c
		}
		y := b
		if i&2 == 0 {
			y = ^b
		}
		z := a
		if i&4 == 0 {
			z = ^a
		}
		d |= x & y & z
	}
	return d & 0xffffffff
}

func dp4a(aSigned, bSigned bool) func(a, b, c uint64) uint64 {
	return func(a, b, c uint64) uint64 {
		acc := uint32(c)
		for i := 0; i < 4; i++ {
			x := uint64(a >> (8 * i) & 0xff)
			y := uint64(b >> (8 * i) & 0xff)
			if aSigned {
				x = sext(x, 8)
			}
			if bSigned {
				y = sext(y, 8)
			}
			acc += uint32(x * y)
		}
		return uint64(acc)
	}
}

func dp2a(aSigned, bSigned, hi bool) func(a, b, c uint64) uint64 {
	return func(a, b, c uint64) uint64 {
		acc := uint32(c)
		for i := 0; i < 2; i++ {
			x := uint64(a >> (16 * i) & 0xffff)
			if aSigned {
				x = sext(x, 16)
			}
			j := i
			if hi {
				j += 2
			}
			y := uint64(b >> (8 * j) & 0xff)
			if bSigned {
				y = sext(y, 8)
			}
			acc += uint32(x * y)
		}
		return uint64(acc)
	}
}

// intCompare returns the comparison op for integer type t.
func intCompare(op string, t ptype) func(a, b uint64) bool {
	ext := t.ext
	if t.signed() {
		switch op {
		case "eq":
			return func(a, b uint64) bool { return ext(a) == ext(b) }
		case "ne":
			return func(a, b uint64) bool { return ext(a) != ext(b) }
		case "lt":
			return func(a, b uint64) bool { return int64(ext(a)) < int64(ext(b)) }
		case "le":
			return func(a, b uint64) bool { return int64(ext(a)) <= int64(ext(b)) }
		case "gt":
			return func(a, b uint64) bool { return int64(ext(a)) > int64(ext(b)) }
		case "ge":
			return func(a, b uint64) bool { return int64(ext(a)) >= int64(ext(b)) }
		}
		return nil
	}
	m := t.mask()
	switch op {
	case "eq":
		return func(a, b uint64) bool { return a&m == b&m }
	case "ne":
		return func(a, b uint64) bool { return a&m != b&m }
	case "lt", "lo":
		return func(a, b uint64) bool { return a&m < b&m }
	case "le", "ls":
		return func(a, b uint64) bool { return a&m <= b&m }
	case "gt", "hi":
		return func(a, b uint64) bool { return a&m > b&m }
	case "ge", "hs":
		return func(a, b uint64) bool { return a&m >= b&m }
	}
	return nil
}

// Extended-precision arithmetic: the .cc forms write a carry (or, for
// sub, a borrow) into the thread's condition code, which addc, subc and
// madc add in. nvcc emits these chains for 128-bit integers and for the
// wide multiplications of sinf/cosf argument reduction.
const (
	ccIn  = 1 << 0 // add the condition code in (addc, subc, madc)
	ccOut = 1 << 1 // write the condition code (.cc)
	ccSub = 1 << 2 // subtract
	ccMad = 1 << 3 // multiply first
	ccHi  = 1 << 4 // take the high half of the product
)

func opCarry(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	d, a, b, cf := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.e)*warpSize
	wide := in.t.size() == 8
	f := in.aux
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		x, y := r[a+l], r[b+l]
		var carryIn uint64
		if f&ccIn != 0 {
			carryIn = r[cf+l] & 1
		}
		if f&ccMad != 0 {
			signed := in.t.signed()
			var hi, lo uint64
			if wide {
				hi, lo = bits.Mul64(x, y)
				if signed {
					if int64(x) < 0 {
						hi -= y
					}
					if int64(y) < 0 {
						hi -= x
					}
				}
			} else {
				var p uint64
				if signed {
					p = uint64(int64(int32(x)) * int64(int32(y)))
				} else {
					p = uint64(uint32(x)) * uint64(uint32(y))
				}
				hi, lo = p>>32, p&0xffffffff
			}
			x = lo
			if f&ccHi != 0 {
				x = hi
			}
			y = r[int(in.c)*warpSize+l]
		}
		var res, carry uint64
		switch {
		case wide && f&ccSub != 0:
			res, carry = bits.Sub64(x, y, carryIn)
		case wide:
			res, carry = bits.Add64(x, y, carryIn)
		case f&ccSub != 0:
			v := uint64(uint32(x)) - uint64(uint32(y)) - carryIn
			res, carry = v&0xffffffff, v>>32&1
		default:
			v := uint64(uint32(x)) + uint64(uint32(y)) + carryIn
			res, carry = v&0xffffffff, v>>32
		}
		r[d+l] = res
		if f&ccOut != 0 {
			r[cf+l] = carry
		}
	}
}
