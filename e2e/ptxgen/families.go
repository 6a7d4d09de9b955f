package ptxgen

import "fmt"

// stmt emits one statement: an instruction of a randomly chosen family,
// or a control-flow region holding more statements.
func (g *gen) stmt() {
	w := g.r.intn(100)
	switch {
	case w < 22:
		g.intOp()
	case w < 30:
		g.cmpOp()
	case w < 43:
		g.floatOp()
	case w < 49:
		g.halfOp()
	case w < 59:
		g.cvtOp()
	case w < 63:
		g.movOp()
	case w < 69:
		g.memOp()
	case w < 73:
		g.atomOp()
	case w < 79:
		if g.warp && (g.depth == 0 || g.member != "") {
			g.warpOp()
		} else {
			g.intOp()
		}
	case w < 86:
		if g.depth < 2 {
			g.region()
		} else {
			g.floatOp()
		}
	case w < 89:
		if g.depth == 0 {
			g.sharedPhase()
		} else {
			g.memOp()
		}
	case w < 91:
		if g.depth == 0 {
			g.barRed()
		} else {
			g.cvtOp()
		}
	case w < 93:
		g.callOp()
	case w < 95:
		g.specialOp()
	default:
		if g.depth == 0 {
			g.approxOp()
		} else {
			g.intOp()
		}
	}
}

func ity(bits int, signed bool) string {
	if signed {
		return fmt.Sprintf("s%d", bits)
	}
	return fmt.Sprintf("u%d", bits)
}

// nonzero returns a register holding b, or 1 where b is 0: division by
// zero is unspecified in PTX.
func (g *gen) nonzero(b string, bits int) string {
	c := intClass(bits)
	q, t := g.tmp(cP), g.tmp(c)
	g.emit("setp.eq.b%d %s, %s, 0", bits, q, b)
	g.emit("selp.b%d %s, 1, %s, %s", bits, t, b, q)
	return t
}

// shiftAmt is a shift amount: any 32-bit value is defined (amounts past
// the width clamp), but small ones are more telling.
func (g *gen) shiftAmt() string {
	if g.r.chance(0.5) {
		return fmt.Sprint(g.r.intn(70))
	}
	return g.use(cR)
}

func (g *gen) intOp() {
	bits := pick(g.r, []int{16, 32, 32, 32, 64, 64})
	signed := g.r.chance(0.5)
	c := intClass(bits)
	t := ity(bits, signed)
	a := func() string { return g.use(c) }
	b := func() string { return g.opnd(c, bits, signed) }
	switch g.r.intn(27) {
	case 0, 1:
		op := pick(g.r, []string{"add", "sub"})
		g.def("int.add", c, func(d string) string { return fmt.Sprintf("%s.%s %s, %s, %s", op, t, d, a(), b()) })
	case 2:
		op := pick(g.r, []string{"add", "sub"})
		g.def("int.sat", cR, func(d string) string {
			return fmt.Sprintf("%s.sat.s32 %s, %s, %s", op, d, g.use(cR), g.opnd(cR, 32, true))
		})
	case 3:
		hl := pick(g.r, []string{"lo", "hi"})
		g.def("int.mul", c, func(d string) string { return fmt.Sprintf("mul.%s.%s %s, %s, %s", hl, t, d, a(), b()) })
	case 4:
		if bits == 64 {
			bits, c, t = 32, cR, ity(32, signed)
		}
		g.def("int.mul", intClass(2*bits), func(d string) string {
			return fmt.Sprintf("mul.wide.%s %s, %s, %s", t, d, g.use(c), g.opnd(c, bits, signed))
		})
	case 5:
		hl := pick(g.r, []string{"lo", "hi"})
		g.def("int.mad", c, func(d string) string { return fmt.Sprintf("mad.%s.%s %s, %s, %s, %s", hl, t, d, a(), b(), a()) })
	case 6:
		if bits == 64 {
			bits, c, t = 32, cR, ity(32, signed)
		}
		wc := intClass(2 * bits)
		g.def("int.mad", wc, func(d string) string {
			return fmt.Sprintf("mad.wide.%s %s, %s, %s, %s", t, d, g.use(c), g.use(c), g.use(wc))
		})
	case 7:
		op := pick(g.r, []string{"min", "max"})
		g.def("int.minmax", c, func(d string) string { return fmt.Sprintf("%s.%s %s, %s, %s", op, t, d, a(), b()) })
	case 8:
		op := pick(g.r, []string{"div", "rem"})
		x, y := a(), g.nonzero(a(), bits)
		g.def("int.div", c, func(d string) string { return fmt.Sprintf("%s.%s %s, %s, %s", op, t, d, x, y) })
	case 9:
		op := pick(g.r, []string{"and", "or", "xor"})
		if g.r.chance(0.25) {
			g.def("int.logic", cP, func(d string) string {
				return fmt.Sprintf("%s.pred %s, %s, %s", op, d, g.use(cP), g.use(cP))
			})
			return
		}
		g.def("int.logic", c, func(d string) string { return fmt.Sprintf("%s.b%d %s, %s, %s", op, bits, d, a(), b()) })
	case 10:
		op := pick(g.r, []string{"not", "cnot"})
		if op == "not" && g.r.chance(0.3) {
			g.def("int.logic", cP, func(d string) string { return fmt.Sprintf("not.pred %s, %s", d, g.use(cP)) })
			return
		}
		g.def("int.logic", c, func(d string) string { return fmt.Sprintf("%s.b%d %s, %s", op, bits, d, a()) })
	case 11:
		op := pick(g.r, []string{"neg", "abs"})
		g.def("int.negabs", c, func(d string) string { return fmt.Sprintf("%s.s%d %s, %s", op, bits, d, a()) })
	case 12:
		if g.r.chance(0.5) {
			g.def("int.shift", c, func(d string) string { return fmt.Sprintf("shl.b%d %s, %s, %s", bits, d, a(), g.shiftAmt()) })
		} else {
			g.def("int.shift", c, func(d string) string { return fmt.Sprintf("shr.%s %s, %s, %s", t, d, a(), g.shiftAmt()) })
		}
	case 13:
		if bits == 16 {
			bits, c = 32, cR
		}
		op := pick(g.r, []string{"popc", "clz"})
		g.def("int.bits", cR, func(d string) string { return fmt.Sprintf("%s.b%d %s, %s", op, bits, d, g.use(c)) })
	case 14:
		if bits == 16 {
			bits, c = 32, cR
		}
		g.def("int.bits", c, func(d string) string { return fmt.Sprintf("brev.b%d %s, %s", bits, d, g.use(c)) })
	case 15:
		if bits == 16 {
			bits, c = 32, cR
		}
		sa := ""
		if g.r.chance(0.5) {
			sa = ".shiftamt"
		}
		g.def("int.bits", cR, func(d string) string { return fmt.Sprintf("bfind%s.%s %s, %s", sa, ity(bits, signed), d, g.use(c)) })
	case 16:
		if bits == 16 {
			bits, c = 32, cR
		}
		g.def("int.bfe", c, func(d string) string {
			return fmt.Sprintf("bfe.%s %s, %s, %s, %s", ity(bits, signed), d, g.use(c), g.posLen(), g.posLen())
		})
	case 17:
		if bits == 16 {
			bits, c = 32, cR
		}
		g.def("int.bfi", c, func(d string) string {
			return fmt.Sprintf("bfi.b%d %s, %s, %s, %s, %s", bits, d, g.use(c), g.use(c), g.posLen(), g.posLen())
		})
	case 18:
		mode := pick(g.r, []string{"", "", "", ".f4e", ".b4e", ".rc8", ".ecl", ".ecr", ".rc16"})
		g.def("int.prmt", cR, func(d string) string {
			return fmt.Sprintf("prmt.b32%s %s, %s, %s, %s", mode, d, g.use(cR), g.use(cR), g.opnd(cR, 32, false))
		})
	case 19:
		dir, mode := pick(g.r, []string{"l", "r"}), pick(g.r, []string{"wrap", "clamp"})
		g.def("int.shf", cR, func(d string) string {
			return fmt.Sprintf("shf.%s.%s.b32 %s, %s, %s, %s", dir, mode, d, g.use(cR), g.use(cR), g.shiftAmt())
		})
	case 20:
		g.def("int.lop3", cR, func(d string) string {
			return fmt.Sprintf("lop3.b32 %s, %s, %s, %s, %d", d, g.use(cR), g.use(cR), g.use(cR), g.r.intn(256))
		})
	case 21:
		mode := pick(g.r, []string{"clamp", "wrap"})
		if g.r.chance(0.5) {
			g.def("int.bmsk", cR, func(d string) string {
				return fmt.Sprintf("bmsk.%s.b32 %s, %s, %s", mode, d, g.shiftAmt(), g.shiftAmt())
			})
		} else {
			g.def("int.szext", cR, func(d string) string {
				return fmt.Sprintf("szext.%s.%s %s, %s, %s", mode, ity(32, signed), d, g.use(cR), g.shiftAmt())
			})
		}
	case 22:
		ta, tb := ity(32, g.r.chance(0.5)), ity(32, g.r.chance(0.5))
		if g.r.chance(0.5) {
			g.def("int.dp", cR, func(d string) string {
				return fmt.Sprintf("dp4a.%s.%s %s, %s, %s, %s", ta, tb, d, g.use(cR), g.use(cR), g.use(cR))
			})
		} else {
			hl := pick(g.r, []string{"lo", "hi"})
			g.def("int.dp", cR, func(d string) string {
				return fmt.Sprintf("dp2a.%s.%s.%s %s, %s, %s, %s", hl, ta, tb, d, g.use(cR), g.use(cR), g.use(cR))
			})
		}
	case 23:
		g.def("int.sad", c, func(d string) string { return fmt.Sprintf("sad.%s %s, %s, %s, %s", t, d, a(), b(), a()) })
	case 24:
		hl := pick(g.r, []string{"lo", "hi"})
		t32 := ity(32, signed)
		if g.r.chance(0.5) {
			g.def("int.mul24", cR, func(d string) string { return fmt.Sprintf("mul24.%s.%s %s, %s, %s", hl, t32, d, g.use(cR), g.use(cR)) })
		} else {
			g.def("int.mul24", cR, func(d string) string {
				return fmt.Sprintf("mad24.%s.%s %s, %s, %s, %s", hl, t32, d, g.use(cR), g.use(cR), g.use(cR))
			})
		}
	case 25:
		g.carryChain()
	default:
		g.def("int.mul", c, func(d string) string { return fmt.Sprintf("mul.hi.%s %s, %s, %s", t, d, a(), a()) })
	}
}

// posLen is a bit position or length for bfe and bfi: any value is
// defined (only the low 8 bits count).
func (g *gen) posLen() string {
	if g.r.chance(0.6) {
		return fmt.Sprint(g.r.intn(70))
	}
	return g.use(cR)
}

// carryChain emits an extended-precision add, subtract or multiply-add:
// the condition code lives only between its instructions.
func (g *gen) carryChain() {
	if g.version >= 2 {
		// A guard that skips an instruction of the chain on some lanes
		// leaves the condition code the next one reads undefined there.
		g.noGuard = true
		defer func() { g.noGuard = false }()
	}
	bits := pick(g.r, []int{32, 32, 64})
	c := intClass(bits)
	t := ity(bits, g.r.chance(0.3))
	n := 2 + g.r.intn(2)
	switch g.r.intn(3) {
	case 0, 1:
		op := pick(g.r, []string{"add", "sub"})
		for i := 0; i < n; i++ {
			name := op + ".cc"
			if i > 0 {
				name = op + "c.cc"
				if i == n-1 {
					name = op + "c"
				}
			}
			g.def("int.carry", c, func(d string) string { return fmt.Sprintf("%s.%s %s, %s, %s", name, t, d, g.use(c), g.use(c)) })
		}
	default:
		if bits == 64 {
			t = ity(64, false)
		}
		for i := 0; i < n; i++ {
			hl := pick(g.r, []string{"lo", "hi"})
			name := "mad." + hl + ".cc"
			if i > 0 {
				name = "madc." + hl + ".cc"
				if i == n-1 {
					name = "madc." + hl
				}
			}
			g.def("int.carry", c, func(d string) string {
				return fmt.Sprintf("%s.%s %s, %s, %s, %s", name, t, d, g.use(c), g.use(c), g.use(c))
			})
		}
	}
}

var (
	intCmps   = []string{"eq", "ne", "lt", "le", "gt", "ge"}
	uintCmps  = []string{"eq", "ne", "lo", "ls", "hi", "hs", "lt", "ge"}
	floatCmps = []string{"eq", "ne", "lt", "le", "gt", "ge", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"}
)

func (g *gen) cmpOp() {
	switch g.r.intn(6) {
	case 0, 1:
		bits := pick(g.r, []int{16, 32, 64})
		signed := g.r.chance(0.5)
		c := intClass(bits)
		cmp := pick(g.r, intCmps)
		if !signed {
			cmp = pick(g.r, uintCmps)
		}
		t := ity(bits, signed)
		if g.r.chance(0.3) {
			bop := pick(g.r, []string{"and", "or", "xor"})
			g.def2("cmp.setp", cP, cP, func(d1, d2 string) string {
				return fmt.Sprintf("setp.%s.%s.%s %s|%s, %s, %s, %s", cmp, bop, t, d1, d2, g.use(c), g.opnd(c, bits, signed), g.use(cP))
			})
			return
		}
		g.def("cmp.setp", cP, func(d string) string {
			return fmt.Sprintf("setp.%s.%s %s, %s, %s", cmp, t, d, g.use(c), g.opnd(c, bits, signed))
		})
	case 2:
		c := pick(g.r, []class{cF, cF, cFD})
		ft, ftz := "f32", ""
		if c == cFD {
			ft = "f64"
		} else if g.r.chance(0.3) {
			ftz = ".ftz"
		}
		cmp := pick(g.r, floatCmps)
		if g.r.chance(0.3) {
			bop := pick(g.r, []string{"and", "or", "xor"})
			g.def2("cmp.setpf", cP, cP, func(d1, d2 string) string {
				return fmt.Sprintf("setp.%s.%s%s.%s %s|%s, %s, %s, %s", cmp, bop, ftz, ft, d1, d2, g.use(c), g.fopnd(c), g.use(cP))
			})
			return
		}
		g.def("cmp.setpf", cP, func(d string) string {
			return fmt.Sprintf("setp.%s%s.%s %s, %s, %s", cmp, ftz, ft, d, g.use(c), g.fopnd(c))
		})
	case 3:
		c := pick(g.r, []class{cH, cR, cD, cF, cFD})
		ty := map[class]string{cH: "b16", cR: "b32", cD: "b64", cF: "f32", cFD: "f64"}[c]
		g.def("cmp.selp", c, func(d string) string {
			return fmt.Sprintf("selp.%s %s, %s, %s, %s", ty, d, g.use(c), g.use(c), g.use(cP))
		})
	case 4:
		c := pick(g.r, []class{cR, cD, cF})
		dt := map[class]string{cR: pick(g.r, []string{"b32", "u32", "s32"}), cD: "b64", cF: "f32"}[c]
		if g.r.chance(0.5) {
			g.def("cmp.slct", c, func(d string) string {
				return fmt.Sprintf("slct.%s.s32 %s, %s, %s, %s", dt, d, g.use(c), g.use(c), g.use(cR))
			})
		} else {
			ftz := ""
			if g.r.chance(0.3) {
				ftz = ".ftz"
			}
			g.def("cmp.slct", c, func(d string) string {
				return fmt.Sprintf("slct%s.%s.f32 %s, %s, %s, %s", ftz, dt, d, g.use(c), g.use(c), g.use(cF))
			})
		}
	default:
		dc := pick(g.r, []class{cR, cF})
		dt := "u32"
		if dc == cF {
			dt = "f32"
		} else if g.r.chance(0.5) {
			dt = "s32"
		}
		if g.r.chance(0.5) {
			cmp := pick(g.r, intCmps)
			g.def("cmp.set", dc, func(d string) string {
				return fmt.Sprintf("set.%s.%s.s32 %s, %s, %s", cmp, dt, d, g.use(cR), g.use(cR))
			})
		} else {
			cmp := pick(g.r, floatCmps)
			g.def("cmp.set", dc, func(d string) string {
				return fmt.Sprintf("set.%s.%s.f32 %s, %s, %s", cmp, dt, d, g.use(cF), g.fopnd(cF))
			})
		}
	}
}

var rnds = []string{".rn", ".rz", ".rm", ".rp"}

func (g *gen) floatOp() {
	c := pick(g.r, []class{cF, cF, cFD})
	ft := "f32"
	if c == cFD {
		ft = "f64"
	}
	mods := func(sat bool) string {
		m := pick(g.r, rnds)
		if c == cF && g.r.chance(0.3) {
			m += ".ftz"
		}
		if sat && c == cF && g.r.chance(0.2) {
			m += ".sat"
		}
		return m
	}
	a := func() string { return g.fopnd(c) }
	switch g.r.intn(13) {
	case 0, 1, 2:
		op := pick(g.r, []string{"add", "sub", "mul"})
		m := mods(true)
		g.def("float.arith", c, func(d string) string { return fmt.Sprintf("%s%s.%s %s, %s, %s", op, m, ft, d, g.use(c), a()) })
	case 3:
		m := mods(false)
		g.def("float.div", c, func(d string) string { return fmt.Sprintf("div%s.%s %s, %s, %s", m, ft, d, g.use(c), a()) })
	case 4, 5:
		m := mods(true)
		op := pick(g.r, []string{"fma", "fma", "mad"})
		g.def("float.fma", c, func(d string) string {
			return fmt.Sprintf("%s%s.%s %s, %s, %s, %s", op, m, ft, d, g.use(c), a(), g.use(c))
		})
	case 6:
		op := pick(g.r, []string{"min", "max"})
		m := ""
		if c == cF && g.r.chance(0.3) {
			m += ".ftz"
		}
		if c == cF && g.r.chance(0.3) {
			m += ".NaN"
		}
		g.def("float.minmax", c, func(d string) string { return fmt.Sprintf("%s%s.%s %s, %s, %s", op, m, ft, d, g.use(c), a()) })
	case 7:
		op := pick(g.r, []string{"abs", "neg"})
		m := ""
		if c == cF && g.r.chance(0.3) {
			m = ".ftz"
		}
		g.def("float.negabs", c, func(d string) string { return fmt.Sprintf("%s%s.%s %s, %s", op, m, ft, d, g.use(c)) })
	case 8:
		m := mods(false)
		g.def("float.sqrt", c, func(d string) string { return fmt.Sprintf("sqrt%s.%s %s, %s", m, ft, d, g.use(c)) })
	case 9:
		m := mods(false)
		g.def("float.rcp", c, func(d string) string { return fmt.Sprintf("rcp%s.%s %s, %s", m, ft, d, g.use(c)) })
	case 10:
		g.def("float.copysign", c, func(d string) string { return fmt.Sprintf("copysign.%s %s, %s, %s", ft, d, g.use(c), g.use(c)) })
	case 11:
		k := pick(g.r, []string{"finite", "infinite", "number", "notanumber", "normal", "subnormal"})
		g.def("float.testp", cP, func(d string) string { return fmt.Sprintf("testp.%s.%s %s, %s", k, ft, d, g.use(c)) })
	default:
		op := pick(g.r, []string{"add", "mul", "sub"})
		g.def("float.arith", c, func(d string) string { return fmt.Sprintf("%s.%s %s, %s, %s", op, ft, d, g.use(c), g.use(c)) })
	}
}

func (g *gen) halfOp() {
	ht := pick(g.r, []string{"f16", "f16x2", "bf16", "bf16x2"})
	c := cH
	if ht == "f16x2" || ht == "bf16x2" {
		c = cR
	}
	isF16 := ht == "f16" || ht == "f16x2"
	switch g.r.intn(5) {
	case 0, 1:
		op := pick(g.r, []string{"add", "sub", "mul"})
		m := ".rn"
		if g.r.chance(0.2) {
			m = ""
		}
		if isF16 {
			if g.r.chance(0.25) {
				m += ".ftz"
			}
			if g.r.chance(0.25) {
				m += ".sat"
			}
		}
		g.def("half.arith", c, func(d string) string { return fmt.Sprintf("%s%s.%s %s, %s, %s", op, m, ht, d, g.use(c), g.use(c)) })
	case 2:
		m := ".rn"
		switch {
		case g.r.chance(0.2):
			m += ".relu"
		case isF16 && g.r.chance(0.3):
			m += pick(g.r, []string{".ftz", ".sat", ".ftz.sat"})
		}
		g.def("half.fma", c, func(d string) string {
			return fmt.Sprintf("fma%s.%s %s, %s, %s, %s", m, ht, d, g.use(c), g.use(c), g.use(c))
		})
	case 3:
		op := pick(g.r, []string{"min", "max"})
		m := ""
		if g.r.chance(0.3) {
			m = ".NaN"
		}
		g.def("half.minmax", c, func(d string) string { return fmt.Sprintf("%s%s.%s %s, %s, %s", op, m, ht, d, g.use(c), g.use(c)) })
	default:
		op := pick(g.r, []string{"neg", "abs"})
		g.def("half.negabs", c, func(d string) string { return fmt.Sprintf("%s.%s %s, %s", op, ht, d, g.use(c)) })
	}
}

// intReg picks a register class at least as wide as an integer type of
// the given width: ld, st and cvt may use wider registers.
func (g *gen) intReg(bits int) (class, int) {
	var opts []int
	for _, w := range []int{16, 32, 64} {
		if w >= bits {
			opts = append(opts, w)
		}
	}
	w := pick(g.r, opts)
	return intClass(w), w
}

var allInts = []struct {
	bits   int
	signed bool
}{{8, false}, {16, false}, {32, false}, {64, false}, {8, true}, {16, true}, {32, true}, {64, true}}

func (g *gen) cvtOp() {
	switch g.r.intn(7) {
	case 0, 1:
		dt, st := pick(g.r, allInts), pick(g.r, allInts)
		dc, _ := g.intReg(dt.bits)
		sc, _ := g.intReg(st.bits)
		sat := ""
		// ptxas refuses .sat where the source's range fits the
		// destination's.
		fits := dt.signed == st.signed && dt.bits >= st.bits || !st.signed && dt.signed && dt.bits > st.bits
		if g.r.chance(0.4) && !fits {
			sat = ".sat"
		}
		g.def("cvt.int", dc, func(d string) string {
			return fmt.Sprintf("cvt%s.%s.%s %s, %s", sat, ity(dt.bits, dt.signed), ity(st.bits, st.signed), d, g.use(sc))
		})
	case 2:
		dt := pick(g.r, allInts)
		dc, _ := g.intReg(dt.bits)
		sc := pick(g.r, []class{cF, cF, cFD})
		st := map[class]string{cF: "f32", cFD: "f64"}[sc]
		m := pick(g.r, []string{".rni", ".rzi", ".rmi", ".rpi"})
		if sc == cF && g.r.chance(0.3) {
			m += ".ftz"
		}
		g.def("cvt.f2i", dc, func(d string) string {
			return fmt.Sprintf("cvt%s.%s.%s %s, %s", m, ity(dt.bits, dt.signed), st, d, g.use(sc))
		})
	case 3:
		st := pick(g.r, allInts)
		sc, _ := g.intReg(st.bits)
		dc := pick(g.r, []class{cF, cF, cFD})
		dt := map[class]string{cF: "f32", cFD: "f64"}[dc]
		m := pick(g.r, rnds)
		g.def("cvt.i2f", dc, func(d string) string {
			return fmt.Sprintf("cvt%s.%s.%s %s, %s", m, dt, ity(st.bits, st.signed), d, g.use(sc))
		})
	case 4:
		switch g.r.intn(4) {
		case 0:
			m := pick(g.r, rnds)
			if g.r.chance(0.3) {
				m += ".ftz"
			}
			if g.r.chance(0.2) {
				m += ".sat"
			}
			g.def("cvt.f2f", cF, func(d string) string { return fmt.Sprintf("cvt%s.f32.f64 %s, %s", m, d, g.use(cFD)) })
		case 1:
			m := ""
			if g.r.chance(0.3) {
				m += ".ftz"
			}
			g.def("cvt.f2f", cFD, func(d string) string { return fmt.Sprintf("cvt%s.f64.f32 %s, %s", m, d, g.use(cF)) })
		case 2:
			m := pick(g.r, []string{".rni", ".rzi", ".rmi", ".rpi"})
			if g.r.chance(0.3) {
				m += ".ftz"
			}
			g.def("cvt.f2f", cF, func(d string) string { return fmt.Sprintf("cvt%s.f32.f32 %s, %s", m, d, g.use(cF)) })
		default:
			m := pick(g.r, []string{".rni", ".rzi", ".rmi", ".rpi"})
			g.def("cvt.f2f", cFD, func(d string) string { return fmt.Sprintf("cvt%s.f64.f64 %s, %s", m, d, g.use(cFD)) })
		}
	default:
		switch g.r.intn(6) {
		case 0:
			m := pick(g.r, []string{".rn", ".rz"})
			if g.r.chance(0.25) {
				m += ".relu"
			}
			ht := pick(g.r, []string{"f16", "bf16"})
			g.def("cvt.half", cH, func(d string) string { return fmt.Sprintf("cvt%s.%s.f32 %s, %s", m, ht, d, g.use(cF)) })
		case 1:
			ht := pick(g.r, []string{"f16", "bf16"})
			g.def("cvt.half", cF, func(d string) string { return fmt.Sprintf("cvt.f32.%s %s, %s", ht, d, g.use(cH)) })
		case 2:
			m := ".rn"
			if g.r.chance(0.25) {
				m += ".relu"
			}
			ht := pick(g.r, []string{"f16x2", "bf16x2"})
			g.def("cvt.half", cR, func(d string) string {
				return fmt.Sprintf("cvt%s.%s.f32 %s, %s, %s", m, ht, d, g.use(cF), g.use(cF))
			})
		case 3:
			g.def("cvt.half", cFD, func(d string) string { return fmt.Sprintf("cvt.f64.f16 %s, %s", d, g.use(cH)) })
		case 4:
			m := pick(g.r, rnds)
			g.def("cvt.half", cH, func(d string) string { return fmt.Sprintf("cvt%s.f16.f64 %s, %s", m, d, g.use(cFD)) })
		default:
			m := pick(g.r, []string{".rni", ".rzi", ".rmi", ".rpi"})
			dt := pick(g.r, allInts[1:])
			if dt.bits == 64 || dt.bits == 8 {
				dt.bits = 32
			}
			dc, _ := g.intReg(dt.bits)
			g.def("cvt.half", dc, func(d string) string {
				return fmt.Sprintf("cvt%s.%s.f16 %s, %s", m, ity(dt.bits, dt.signed), d, g.use(cH))
			})
		}
	}
}

func (g *gen) movOp() {
	switch g.r.intn(6) {
	case 0:
		g.def("mov.pack", cR, func(d string) string { return fmt.Sprintf("mov.b32 %s, {%s, %s}", d, g.use(cH), g.use(cH)) })
	case 1:
		g.def("mov.pack", cD, func(d string) string { return fmt.Sprintf("mov.b64 %s, {%s, %s}", d, g.use(cR), g.use(cR)) })
	case 2:
		if g.depth > 0 {
			g.def("mov.bits", cR, func(d string) string { return fmt.Sprintf("mov.b32 %s, %s", d, g.use(cF)) })
			return
		}
		g.def2("mov.unpack", cR, cR, func(d1, d2 string) string { return fmt.Sprintf("mov.b64 {%s, %s}, %s", d1, d2, g.use(cD)) })
	case 3:
		if g.depth > 0 {
			g.def("mov.bits", cF, func(d string) string { return fmt.Sprintf("mov.b32 %s, %s", d, g.use(cR)) })
			return
		}
		g.def2("mov.unpack", cH, cH, func(d1, d2 string) string { return fmt.Sprintf("mov.b32 {%s, %s}, %s", d1, d2, g.use(cR)) })
	case 4:
		switch g.r.intn(4) {
		case 0:
			g.def("mov.bits", cR, func(d string) string { return fmt.Sprintf("mov.b32 %s, %s", d, g.use(cF)) })
		case 1:
			g.def("mov.bits", cF, func(d string) string { return fmt.Sprintf("mov.b32 %s, %s", d, g.use(cR)) })
		case 2:
			g.def("mov.bits", cD, func(d string) string { return fmt.Sprintf("mov.b64 %s, %s", d, g.use(cFD)) })
		default:
			g.def("mov.bits", cFD, func(d string) string { return fmt.Sprintf("mov.b64 %s, %s", d, g.use(cD)) })
		}
	default:
		bits := pick(g.r, []int{16, 32, 64})
		signed := g.r.chance(0.5)
		g.def("mov.imm", intClass(bits), func(d string) string { return fmt.Sprintf("mov.%s %s, %s", ity(bits, signed), d, g.imm(bits, signed)) })
	}
}

// memTypes are the types of loads and stores, with a register class
// that holds each.
var memTypes = []struct {
	name  string
	bytes int
	cls   []class
}{
	{"u8", 1, []class{cH, cR, cD}}, {"s8", 1, []class{cH, cR, cD}}, {"b8", 1, []class{cH, cR}},
	{"u16", 2, []class{cH, cR, cD}}, {"s16", 2, []class{cH, cR, cD}}, {"b16", 2, []class{cH, cR}},
	{"u32", 4, []class{cR, cD}}, {"s32", 4, []class{cR, cD}}, {"b32", 4, []class{cR, cF, cD}}, {"f32", 4, []class{cF}},
	{"u64", 8, []class{cD}}, {"s64", 8, []class{cD}}, {"b64", 8, []class{cD, cFD}}, {"f64", 8, []class{cFD}},
}

func (g *gen) memOp() {
	mt := pick(g.r, memTypes)
	c := pick(g.r, mt.cls)
	switch g.r.intn(5) {
	case 0, 1:
		// A load from this thread's inputs, or a neighbour's: the input
		// is never written, so any thread may read any of it.
		base := g.in
		if g.r.chance(0.4) {
			base = g.neighbourInput()
		}
		vec := 1
		if g.depth == 0 && g.r.chance(0.35) {
			vec = pick(g.r, []int{2, 4})
			for mt.bytes*vec > 16 {
				vec /= 2
			}
		}
		size := mt.bytes * vec
		off := g.r.intn(inStride/size) * size
		nc := ""
		if g.r.chance(0.3) {
			nc = ".nc"
		}
		if vec == 1 {
			g.def("mem.ld.global", c, func(d string) string {
				return fmt.Sprintf("ld.global%s.%s %s, [%s+%d]", nc, mt.name, d, base, off)
			})
			return
		}
		g.fams["mem.ld.global.vec"]++
		var ds []string
		for i := 0; i < vec; i++ {
			ds = append(ds, g.tmp(c))
		}
		text := fmt.Sprintf("ld.global%s.v%d.%s {%s}, [%s+%d]", nc, vec, mt.name, joinRegs(ds), base, off)
		g.emit("%s", text)
		for _, d := range ds {
			rg := &reg{name: d, cls: c, last: text, writes: 1}
			g.pool[c] = append(g.pool[c], rg)
			g.byName[d] = rg
		}
	case 2:
		// Through local memory, at a run-time index.
		size := mt.bytes
		idx, la := g.tmp(cR), g.tmp(cD)
		g.addr(la)
		g.emit("and.b32 %s, %s, %d", idx, g.use(cR), (64-size)&^(size-1))
		g.emit("cvt.u64.u32 %s, %s", la, idx)
		lb := g.tmp(cD)
		g.addr(lb)
		g.emit("mov.u64 %s, lbuf", lb)
		g.emit("add.s64 %s, %s, %s", la, la, lb)
		g.emit("st.local.%s [%s], %s", mt.name, la, g.use(c))
		g.fams["mem.st.local"]++
		off := g.r.intn(64/size) * size
		if g.r.chance(0.5) {
			ga := g.tmp(cD)
			g.addr(ga)
			g.emit("cvta.local.u64 %s, %s", ga, lb)
			g.def("mem.ld.generic", c, func(d string) string { return fmt.Sprintf("ld.%s %s, [%s+%d]", mt.name, d, ga, off) })
			return
		}
		g.def("mem.ld.local", c, func(d string) string { return fmt.Sprintf("ld.local.%s %s, [lbuf+%d]", mt.name, d, off) })
	case 3:
		g.def("mem.ld.param", cR, func(d string) string { return fmt.Sprintf("ld.param.u32 %s, [pscalar]", d) })
	default:
		// Narrow loads at every naturally aligned offset of a word.
		mt := pick(g.r, memTypes[:6])
		c := pick(g.r, mt.cls)
		off := g.r.intn(inStride/mt.bytes) * mt.bytes
		g.def("mem.ld.narrow", c, func(d string) string { return fmt.Sprintf("ld.global.%s %s, [%s+%d]", mt.name, d, g.in, off) })
	}
}

func joinRegs(rs []string) string {
	s := ""
	for i, r := range rs {
		if i > 0 {
			s += ", "
		}
		s += r
	}
	return s
}

// neighbourInput is the address of another thread's inputs.
func (g *gen) neighbourInput() string {
	t, a := g.tmp(cR), g.tmp(cD)
	g.addr(a)
	g.emit("add.u32 %s, %s, %d", t, g.gtid, 1+g.r.intn(int(g.prog.Threads())))
	g.emit("rem.u32 %s, %s, %d", t, t, g.prog.Threads())
	g.emit("mul.wide.u32 %s, %s, %d", a, t, inStride)
	b := g.tmp(cD)
	g.addr(b)
	g.emit("ld.param.u64 %s, [pin]", b)
	g.emit("cvta.to.global.u64 %s, %s", b, b)
	g.emit("add.s64 %s, %s, %s", a, a, b)
	return a
}
