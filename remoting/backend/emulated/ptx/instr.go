package ptx

import (
	"fmt"
	"math"
	"math/bits"
)

// instr compiles one instruction. Operand preparation (negated predicates,
// clock reads) may emit preparatory instructions first; an instruction the
// emulator cannot execute compiles to one that fails with
// CUDA_ERROR_NOT_SUPPORTED when it runs.
func (c *fcomp) instr(in *instr) {
	start := len(c.f.code)
	defer func() {
		if r := recover(); r != nil {
			u, ok := r.(*unsupportedError)
			if !ok {
				panic(r)
			}
			c.f.code = c.f.code[:start]
			c.f.code = append(c.f.code, inst{fn: opUnsupported(u.what), guard: -1, d: -1, d2: -1, src: in, unsupported: u.what})
		}
	}()
	x := inst{guard: -1, guardNeg: in.guardNeg, d: -1, a: -1, b: -1, c: -1, e: -1, d2: -1, src: in}
	if in.guard != "" {
		s := c.lookup(in.guard)
		if s == nil || s.kind != symReg {
			c.failf("guard %q is not a declared predicate", in.guard)
		}
		x.guard = s.slot
	}
	c.build(in, &x)
	c.f.code = append(c.f.code, x)
}

func unsupported(format string, args ...any) {
	panic(&unsupportedError{what: fmt.Sprintf(format, args...)})
}

func (c *fcomp) nargs(in *instr, n ...int) {
	for _, k := range n {
		if len(in.args) == k {
			return
		}
	}
	c.failf("`%s` takes %v operands, has %d", in.text, n, len(in.args))
}

// lastType is the instruction's operand type (its last type modifier).
func (c *fcomp) lastType(in *instr) ptype {
	ts := typesOf(in.mods)
	if len(ts) == 0 {
		c.failf("`%s` has no type", in.text)
	}
	return ts[len(ts)-1]
}

func (c *fcomp) build(in *instr, x *inst) {
	a := in.args
	switch in.op {
	case "mov":
		c.nargs(in, 2)
		t := c.lastType(in)
		x.t = t
		switch {
		case a[0].kind == oVec:
			c.unpack(in, x, t)
		case a[1].kind == oVec:
			c.pack(in, x, t)
		default:
			if a[1].kind == oSym || a[1].kind == oReg {
				if s := c.lookup(a[1].name); s != nil && s.kind == symParam {
					unsupported("taking the address of function parameter %q", a[1].name)
				}
			}
			x.d = c.dst(a[0])
			x.a = c.val(a[1], t)
			if t.size() < 8 && t != tPred {
				mask := t.mask()
				x.fn = un(func(v uint64) uint64 { return v & mask })
			} else {
				x.fn = opMov
			}
		}
	case "addc", "subc", "madc":
		c.carryOp(in, x)
	case "add", "sub", "mad":
		if hasMod(in.mods, "cc") {
			c.carryOp(in, x)
			return
		}
		if in.op == "mad" {
			c.mad(in, x)
			return
		}
		fallthrough
	case "mul", "div", "rem", "min", "max", "mul24", "copysign":
		c.nargs(in, 3)
		t := c.lastType(in)
		x.t = t
		x.d = c.dst(a[0])
		x.a, x.b = c.val(a[1], t), c.val(a[2], t)
		if t.float() || t == tF16x2 || t == tBF16x2 {
			if c.floatPeephole(in, x, t) {
				return
			}
		}
		if t.float() {
			if t == tF16 || t == tBF16 {
				x.fn = bin(halfBinary(in.op, t, in.mods))
				return
			}
			if t == tF64 {
				f := float64Binary(in.op, in.mods)
				if f == nil {
					unsupported("%s on .%s", in.op, t)
				}
				x.fn = binNaN(f)
				return
			}
			f := floatBinary(in.op, t, in.mods)
			if f == nil {
				unsupported("%s on .%s", in.op, t)
			}
			x.fn = bin(f)
			return
		}
		if t == tF16x2 || t == tBF16x2 {
			x.fn = bin(halfBinary(in.op, t, in.mods))
			return
		}
		f := intBinary(in.op, t, in.mods)
		if f == nil {
			unsupported("%s on .%s", in.op, t)
		}
		if t == tS32 && hasMod(in.mods, "sat") && (in.op == "add" || in.op == "sub") && c.satAcrossWrap(in) {
			wrap := intBinary(in.op, t, nil)
			x.fn = binRefuse(f, func(p, q uint64) bool { return f(p, q) != wrap(p, q) },
				"operands %#x and %#x saturate: ptxas cancels the operand this one shares with the add or sub that computed the other, as if no saturation could happen; the emulator cannot follow that rewrite")
			return
		}
		if code, ok := fastInt(in.op, t, in.mods); ok {
			x.fn, x.aux = opFastInt, code
			return
		}
		switch {
		case in.op == "add" && (t == tS32 || t == tU32 || t == tB32) && !hasMod(in.mods, "sat"):
			x.fn = opAdd32
		case in.op == "add" && t.size() == 8:
			x.fn = opAdd64
		case in.op == "mul" && t == tS32 && hasMod(in.mods, "wide"):
			x.fn = opMulWideS32
		default:
			x.fn = bin(f)
		}
	case "fma", "mad24":
		c.mad(in, x)
	case "sad":
		c.nargs(in, 4)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		x.a, x.b, x.c = c.val(a[1], t), c.val(a[2], t), c.val(a[3], t)
		x.fn = ter(func(p, q, r uint64) uint64 {
			u, v := t.ext(p), t.ext(q)
			var d uint64
			if t.signed() && int64(u) > int64(v) || !t.signed() && u > v {
				d = u - v
			} else {
				d = v - u
			}
			return (d + r) & t.mask()
		})
	case "neg", "abs", "not", "cnot", "popc", "clz", "brev", "sqrt", "rsqrt", "rcp", "ex2", "lg2", "sin", "cos", "tanh", "bfind":
		c.nargs(in, 2)
		t := c.lastType(in)
		x.t = t
		x.d = c.dst(a[0])
		x.a = c.val(a[1], t)
		var f func(uint64) uint64
		switch {
		case in.op == "bfind":
			f = bfind(t, hasMod(in.mods, "shiftamt"))
		case t.float():
			if t == tF16 || t == tBF16 {
				f = halfUnary(in.op, t, in.mods)
			} else {
				f = floatUnary(in.op, t, in.mods)
			}
		case t == tF16x2 || t == tBF16x2:
			f = halfUnary(in.op, t, in.mods)
		default:
			f = intUnary(in.op, t)
		}
		if f == nil {
			unsupported("%s on .%s", in.op, t)
		}
		if g := guardedSignOp(in, t); g != nil {
			f = g
		}
		if lo := intSignMin(in.op, t); lo != 0 && (t == tS16 || c.slctSel[a[0].name]) {
			x.fn = unRefuse(f, func(v uint64) bool { return v&t.mask() == lo },
				"operand %#x, the type's most negative value: ptxas computes 16-bit neg and abs in 32 bits and assumes abs is not negative, so the readers of the result see +2^(n-1) or a non-negative value; the emulator cannot follow which")
			return
		}
		if nan := foldedSignNaN(in.op, t); nan != nil && c.signSensitiveDst(in, a[0]) {
			x.fn = unRefuse(f, nan, "NaN operand %#x: its result is read where ptxas may fold the sign change into the reader, which then sees the operand's NaN with the sign changed instead of the canonical NaN; the emulator cannot follow ptxas's choice")
			return
		}
		x.fn = un(f)
	case "and", "or", "xor":
		c.nargs(in, 3)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		x.a, x.b = c.val(a[1], t), c.val(a[2], t)
		if code, ok := fastInt(in.op, t, in.mods); ok {
			x.fn, x.aux = opFastInt, code
			return
		}
		x.fn = bin(intBinary(in.op, t, nil))
	case "shl", "shr":
		c.nargs(in, 3)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		x.a, x.b = c.val(a[1], t), c.val(a[2], tU32)
		if t.size() == 2 && c.cnotFed(a[2]) {
			f := intBinary(in.op, t, nil)
			x.fn = binRefuse(f, func(_, q uint64) bool { return q&0xffffffff == 1 }, "operands %#x and %#x: the shift is "+cnotWhy[len("operand %#x "):])
			return
		}
		if in.op == "shl" && t.size() == 8 && a[2].kind != oReg || in.op == "shl" && t.size() == 8 && c.constOfReg(a[2]) {
			if fold, ok := c.shlOfZext(a[1], a[2]); ok {
				x.fn = fold
				return
			}
		}
		if in.op == "shl" && t.size() == 8 {
			x.fn = opShl64
			return
		}
		if code, ok := fastInt(in.op, t, in.mods); ok {
			x.fn, x.aux = opFastInt, code
			return
		}
		x.fn = bin(intBinary(in.op, t, nil))
	case "bfe":
		c.nargs(in, 4)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		x.a, x.b, x.c = c.val(a[1], t), c.val(a[2], tU32), c.val(a[3], tU32)
		x.fn = ter(bfe(t))
		// With a constant position past bit 31 and a non-zero constant
		// length, an H200 returns all ones from bfe.s32 whatever the
		// value (the compiler folds it so; see e2e/ptxgen's probes).
		// A register holding a constant (constOf) folds as the constant.
		if pos, ok := c.constOf(a[2]); ok && t == tS32 {
			if ln, ok := c.constOf(a[3]); ok && pos&0xff >= 32 && ln&0xff != 0 {
				x.fn = ter(func(_, _, _ uint64) uint64 { return 0xffffffff })
			}
		}
	case "bfi":
		c.nargs(in, 5)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		x.a, x.b, x.c, x.e = c.val(a[1], t), c.val(a[2], t), c.val(a[3], tU32), c.val(a[4], tU32)
		x.fn = quad(bfi(t))
		pos, okP := c.constOf(a[3])
		ln, okL := c.constOf(a[4])
		if t.size() == 4 && okP && okL {
			if ln, ok := bfiConstLen(pos, ln); ok {
				x.e = c.constSlot(ln)
			} else {
				unsupported("bfi.b32 with the constant position %d and length %d (what the device computes for them is not established)", pos, ln)
			}
		}
	case "prmt":
		c.nargs(in, 4)
		mode := ""
		for _, m := range in.mods {
			switch m {
			case "f4e", "b4e", "rc8", "ecl", "ecr", "rc16":
				mode = m
			}
		}
		x.d = c.dst(a[0])
		x.a, x.b, x.c = c.val(a[1], tB32), c.val(a[2], tB32), c.val(a[3], tB32)
		x.fn = ter(prmt(mode))
	case "shf":
		c.nargs(in, 4)
		x.d = c.dst(a[0])
		x.a, x.b, x.c = c.val(a[1], tB32), c.val(a[2], tB32), c.val(a[3], tU32)
		x.fn = ter(shf(hasMod(in.mods, "l"), hasMod(in.mods, "wrap")))
	case "lop3":
		c.nargs(in, 5)
		if a[0].pair != "" {
			unsupported("lop3 with a predicate result")
		}
		x.d = c.dst(a[0])
		x.a, x.b, x.c, x.e = c.val(a[1], tB32), c.val(a[2], tB32), c.val(a[3], tB32), c.val(a[4], tB32)
		x.fn = quad(lop3)
	case "bmsk":
		// bmsk.mode.b32 d, a, b: b one-bits starting at bit a
		c.nargs(in, 3)
		x.d = c.dst(a[0])
		x.a, x.b = c.val(a[1], tU32), c.val(a[2], tU32)
		wrap := hasMod(in.mods, "wrap")
		x.fn = bin(func(p, q uint64) uint64 {
			pos, n := uint32(p), uint32(q)
			if wrap {
				pos, n = pos&31, n&31
			} else {
				pos, n = min(pos, 32), min(n, 32)
			}
			return (uint64(1)<<n - 1) << pos & 0xffffffff
		})
	case "szext":
		// szext.mode.type d, a, b: extend the low b bits of a
		c.nargs(in, 3)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		x.a, x.b = c.val(a[1], t), c.val(a[2], tU32)
		wrap := hasMod(in.mods, "wrap")
		x.fn = bin(func(p, q uint64) uint64 {
			n := uint32(q)
			if wrap {
				n &= 31
			} else {
				n = min(n, 32)
			}
			if n == 0 {
				return 0
			}
			v := p & (uint64(1)<<n - 1)
			if t.signed() {
				v = sext(v, uint(n))
			}
			return v & 0xffffffff
		})
	case "dp4a", "dp2a":
		c.nargs(in, 4)
		ts := typesOf(in.mods)
		if len(ts) != 2 {
			c.failf("`%s` needs two types", in.text)
		}
		x.d = c.dst(a[0])
		x.a, x.b, x.c = c.val(a[1], tB32), c.val(a[2], tB32), c.val(a[3], tB32)
		if in.op == "dp4a" {
			x.fn = ter(dp4a(ts[0].signed(), ts[1].signed()))
		} else {
			x.fn = ter(dp2a(ts[0].signed(), ts[1].signed(), hasMod(in.mods, "hi")))
		}
	case "selp":
		c.nargs(in, 4)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		x.a, x.b, x.c = c.val(a[1], t), c.val(a[2], t), c.val(a[3], tPred)
		x.fn = ter(func(p, q, r uint64) uint64 {
			if r != 0 {
				return p
			}
			return q
		})
	case "slct":
		c.nargs(in, 4)
		ts := typesOf(in.mods)
		if len(ts) != 2 {
			c.failf("`%s` needs two types", in.text)
		}
		t, ct := ts[0], ts[1]
		x.d = c.dst(a[0])
		x.a, x.b, x.c = c.val(a[1], t), c.val(a[2], t), c.val(a[3], ct)
		ftz := hasMod(in.mods, "ftz")
		x.fn = ter(func(p, q, r uint64) uint64 {
			var ge bool
			if ct == tF32 {
				ge = readFloat(tF32, r, ftz) >= 0
			} else {
				ge = int32(r) >= 0
			}
			if ge {
				return p
			}
			return q
		})
	case "testp":
		c.nargs(in, 2)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		x.a = c.val(a[1], t)
		x.fn = un(testp(in.mods[0], t))
	case "setp", "set":
		c.setp(in, x)
	case "cvt":
		c.cvt(in, x)
	case "cvta":
		c.nargs(in, 2)
		x.d = c.dst(a[0])
		x.a = c.val(a[1], tU64)
		to := hasMod(in.mods, "to")
		var win uint64
		switch {
		case hasMod(in.mods, "shared") || hasMod(in.mods, "shared::cta"):
			win = SharedWindow
		case hasMod(in.mods, "local"):
			win = LocalWindow
		case hasMod(in.mods, "global"), hasMod(in.mods, "const"):
			win = 0
		case hasMod(in.mods, "param"):
			win = ParamWindow
		default:
			unsupported("cvta for this state space")
		}
		t := c.lastType(in)
		mask := t.mask()
		if to {
			x.fn = un(func(v uint64) uint64 { return (v - win) & mask })
		} else {
			x.fn = un(func(v uint64) uint64 { return (v&mask + win) })
		}
	case "isspacep":
		c.nargs(in, 2)
		x.d = c.dst(a[0])
		x.a = c.val(a[1], tU64)
		var f func(v uint64) uint64
		switch {
		case hasMod(in.mods, "shared"):
			f = func(v uint64) uint64 { return b2u(v&^(windowSize-1) == SharedWindow) }
		case hasMod(in.mods, "local"):
			f = func(v uint64) uint64 { return b2u(v&^(windowSize-1) == LocalWindow) }
		case hasMod(in.mods, "param"):
			f = func(v uint64) uint64 { return b2u(v&^(windowSize-1) == ParamWindow) }
		default:
			f = func(v uint64) uint64 {
				h := v &^ (windowSize - 1)
				return b2u(h != SharedWindow && h != LocalWindow && h != ParamWindow)
			}
		}
		x.fn = un(f)
	case "ld", "ldu":
		c.ld(in, x)
	case "st":
		c.st(in, x)
	case "atom", "red":
		c.atom(in, x)
	case "cp":
		c.cp(in, x)
	case "bra":
		c.nargs(in, 1)
		if a[0].kind != oSym {
			unsupported("indirect branch")
		}
		x.ctl = cBra
		c.fixups = append(c.fixups, fixup{pc: len(c.f.code), label: a[0].name, in: in})
	case "brx":
		unsupported("indexed branch")
	case "ret":
		x.ctl = cRet
	case "exit":
		x.ctl = cExit
	case "call":
		c.call(in, x)
	case "bar", "barrier":
		c.bar(in, x)
	case "membar", "fence", "nanosleep", "prefetch", "prefetchu", "pmevent", "discard", "applypriority",
		"griddepcontrol", "setmaxnreg":
		x.fn = opNop
	case "createpolicy":
		if len(a) == 0 {
			c.failf("`%s` has no destination", in.text)
		}
		x.d = c.dst(a[0])
		zero := c.constSlot(0)
		x.a = zero
		x.fn = opMov
	case "trap", "brkpt":
		x.fn = opTrap
	case "shfl":
		c.shfl(in, x)
	case "vote":
		c.vote(in, x)
	case "activemask":
		c.nargs(in, 1)
		x.d = c.dst(a[0])
		x.fn = opActivemask
	case "match":
		c.nargs(in, 3)
		t := c.lastType(in)
		x.d = c.dst(a[0])
		if a[0].pair != "" {
			x.d2 = c.dst(operand{kind: oReg, name: a[0].pair})
		}
		x.a = c.val(a[1], t)
		x.e = c.val(a[2], tB32)
		x.fn = opMatch(hasMod(in.mods, "all"), t)
	case "redux":
		c.nargs(in, 3)
		t := c.lastType(in)
		op := ""
		for _, m := range in.mods {
			switch m {
			case "add", "min", "max", "and", "or", "xor":
				op = m
			}
		}
		if op == "" || t.float() {
			unsupported("redux of this kind")
		}
		x.d = c.dst(a[0])
		x.a = c.val(a[1], t)
		x.e = c.val(a[2], tB32)
		x.fn = opRedux(op, t)
	case "elect":
		c.nargs(in, 2)
		x.d = c.dst(a[0])
		if a[0].pair != "" {
			x.d2 = c.dst(operand{kind: oReg, name: a[0].pair})
		}
		x.e = c.val(a[1], tB32)
		x.fn = opElect
	default:
		unsupported("no emulation for %q", in.op)
	}
}

// mad compiles mad, fma and mad24 (without a condition code).
func (c *fcomp) mad(in *instr, x *inst) {
	a := in.args
	c.nargs(in, 4)
	t := c.lastType(in)
	x.t = t
	x.d = c.dst(a[0])
	x.a, x.b, x.c = c.val(a[1], t), c.val(a[2], t), c.val(a[3], t)
	if t.float() || t == tF16x2 || t == tBF16x2 {
		if t == tF16 || t == tBF16 || t == tF16x2 || t == tBF16x2 {
			x.fn = ter(halfFma(t, in.mods))
			return
		}
		if t == tF64 {
			x.fn = terNaN(fma64Fn(in.mods))
			return
		}
		if t == tF32 && roundMode(in.mods) == rmRN && !hasMod(in.mods, "ftz") && !hasMod(in.mods, "sat") {
			x.fn = opFmaF32
			return
		}
		x.fn = ter(fmaFn(t, in.mods))
		return
	}
	mods := in.mods
	op := "mul"
	if in.op == "mad24" {
		op = "mul24"
	}
	mul := intBinary(op, t, mods)
	dt := t
	if hasMod(mods, "wide") {
		dt = map[ptype]ptype{tU16: tU32, tS16: tS32, tU32: tU64, tS32: tS64}[t]
	}
	dm := dt.mask()
	if hasMod(mods, "hi") && hasMod(mods, "sat") && t == tS32 {
		x.fn = ter(func(p, q, r uint64) uint64 { return sat32(int64(int32(mul(p, q))) + int64(int32(r))) })
		return
	}
	if in.op == "mad" && hasMod(mods, "lo") && t.size() == 4 {
		x.fn = opMadLo32
		return
	}
	x.fn = ter(func(p, q, r uint64) uint64 { return (mul(p, q) + r) & dm })
}

// carryOp compiles the condition-code forms: add.cc, addc, sub.cc, subc,
// mad.cc and madc.
func (c *fcomp) carryOp(in *instr, x *inst) {
	a := in.args
	t := c.lastType(in)
	if t.size() != 4 && t.size() != 8 {
		c.failf("`%s`: carry arithmetic is 32- or 64-bit", in.text)
	}
	x.t = t
	var f uint32
	switch in.op {
	case "addc":
		f = ccIn
	case "subc":
		f = ccIn | ccSub
	case "madc":
		f = ccIn | ccMad
	case "sub":
		f = ccSub
	case "mad":
		f = ccMad
	}
	if hasMod(in.mods, "cc") {
		f |= ccOut
	}
	if f&ccMad != 0 {
		c.nargs(in, 4)
		if hasMod(in.mods, "hi") {
			f |= ccHi
		} else if !hasMod(in.mods, "lo") {
			c.failf("`%s` needs .lo or .hi", in.text)
		}
		x.c = c.val(a[3], t)
	} else {
		c.nargs(in, 3)
	}
	x.d = c.dst(a[0])
	x.a, x.b = c.val(a[1], t), c.val(a[2], t)
	x.e = c.carrySlot()
	x.aux = f
	x.fn = opCarry
}

func (c *fcomp) unpack(in *instr, x *inst, t ptype) {
	el := in.args[0].elems
	if len(el) < 2 || t.bits()%uint(len(el)) != 0 {
		c.failf("bad vector in `%s`", in.text)
	}
	w := t.bits() / uint(len(el))
	x.a = c.val(in.args[1], t)
	for _, e := range el {
		x.vec = append(x.vec, c.dst(e))
	}
	em := uint64(1)<<w - 1
	x.fn = func(wp *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			v := r[int(in.a)*warpSize+l]
			for i, d := range in.vec {
				r[int(d)*warpSize+l] = v >> (uint(i) * w) & em
			}
		}
	}
}

func (c *fcomp) pack(in *instr, x *inst, t ptype) {
	el := in.args[1].elems
	if len(el) < 2 || t.bits()%uint(len(el)) != 0 {
		c.failf("bad vector in `%s`", in.text)
	}
	w := t.bits() / uint(len(el))
	x.d = c.dst(in.args[0])
	et := map[uint]ptype{8: tB8, 16: tB16, 32: tB32}[w]
	for _, e := range el {
		x.vec = append(x.vec, c.val(e, et))
	}
	em := uint64(1)<<w - 1
	x.fn = func(wp *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			var v uint64
			for i, s := range in.vec {
				v |= (r[int(s)*warpSize+l] & em) << (uint(i) * w)
			}
			r[int(in.d)*warpSize+l] = v
		}
	}
}

var cmpOps = map[string]bool{"eq": true, "ne": true, "lt": true, "le": true, "gt": true, "ge": true,
	"lo": true, "ls": true, "hi": true, "hs": true, "equ": true, "neu": true, "ltu": true, "leu": true,
	"gtu": true, "geu": true, "num": true, "nan": true}

func (c *fcomp) setp(in *instr, x *inst) {
	a := in.args
	var cmp, boolop string
	for _, m := range in.mods {
		switch {
		case cmpOps[m] && cmp == "":
			cmp = m
		case m == "and" || m == "or" || m == "xor":
			boolop = m
		}
	}
	ts := typesOf(in.mods)
	if cmp == "" || len(ts) == 0 {
		c.failf("`%s` lacks a comparison or a type", in.text)
	}
	st := ts[len(ts)-1]
	if boolop != "" {
		c.nargs(in, 4)
	} else {
		c.nargs(in, 3)
	}
	x.d = c.dst(a[0])
	if a[0].pair != "" {
		x.d2 = c.dst(operand{kind: oReg, name: a[0].pair})
	}
	x.a, x.b = c.val(a[1], st), c.val(a[2], st)
	var cf func(p, q uint64) bool
	if st.float() {
		cf = floatCompare(cmp, st, hasMod(in.mods, "ftz"))
	} else if st == tF16x2 || st == tBF16x2 {
		unsupported("packed half comparisons")
	} else {
		cf = intCompare(cmp, st)
	}
	if cf == nil {
		c.failf("comparison %q does not apply to .%s", cmp, st)
	}
	combine := func(v bool, r uint64) bool { return v }
	if boolop != "" {
		x.c = c.val(a[3], tPred)
		switch boolop {
		case "and":
			combine = func(v bool, r uint64) bool { return v && r != 0 }
		case "or":
			combine = func(v bool, r uint64) bool { return v || r != 0 }
		case "xor":
			combine = func(v bool, r uint64) bool { return v != (r != 0) }
		}
	} else {
		x.c = c.constSlot(0)
	}
	if in.op == "set" {
		dt := ts[0]
		one := uint64(0xffffffff)
		if dt == tF32 {
			one = uint64(math.Float32bits(1))
		}
		set := func(p, q, r uint64) uint64 {
			if combine(cf(p, q), r) {
				return one
			}
			return 0
		}
		x.fn = ter(set)
		var flushed func(p, q, r uint64) uint64
		if dt == tF32 && st == tF32 && !hasMod(in.mods, "ftz") && c.setReadByFtz(in, a[0].name) {
			fcf := floatCompare(cmp, st, true)
			flushed = func(p, q, r uint64) uint64 {
				if combine(fcf(p, q), r) {
					return one
				}
				return 0
			}
			x.fn = setRefuseFtz(set, flushed)
		}
		if dt == tF32 && x.guard >= 0 {
			x.fn, x.e, x.guard = guardedSetF32(set, flushed), x.guard, -1
		}
		return
	}
	if x.d2 < 0 && boolop == "" {
		if fast := setpFast(cmp, st); fast != nil {
			x.fn = fast
			return
		}
		x.fn = setpFn(cf)
		return
	}
	if x.d2 < 0 {
		x.fn = ter(func(p, q, r uint64) uint64 { return b2u(combine(cf(p, q), r)) })
		return
	}
	x.fn = bin2(func(p, q, r uint64) (uint64, uint64) {
		v := cf(p, q)
		return b2u(combine(v, r)), b2u(combine(!v, r))
	})
}

func (c *fcomp) cvt(in *instr, x *inst) {
	ts := typesOf(in.mods)
	if len(ts) != 2 {
		c.failf("`%s` needs a destination and a source type", in.text)
	}
	dt, st := ts[0], ts[1]
	a := in.args
	if dt == tF16x2 || dt == tBF16x2 {
		c.nargs(in, 3)
		x.d = c.dst(a[0])
		x.a, x.b = c.val(a[1], st), c.val(a[2], st)
		relu := hasMod(in.mods, "relu")
		conv := func(v uint64) uint64 {
			f := float32(readFloat(st, v, false))
			if relu && f <= 0 {
				f = 0 // negatives and -0 become +0; NaN stays NaN
			}
			if dt == tF16x2 {
				return uint64(f32ToF16(f))
			}
			return uint64(f32ToBF16(f))
		}
		x.fn = bin(func(p, q uint64) uint64 { return conv(p)<<16 | conv(q) })
		return
	}
	if dt == tB128 || st == tB128 || dt == tTF32 || st == tTF32 || dt == tPred || st == tPred {
		unsupported("cvt between .%s and .%s", dt, st)
	}
	c.nargs(in, 2)
	x.d = c.dst(a[0])
	x.a = c.val(a[1], st)
	f := cvtFn(dt, st, in.mods)
	if v, ok := c.constOf(a[1]); ok && dt == tF64 && st == tF16 && v&0x7c00 == 0x7c00 && v&0x3ff != 0 {
		// ptxas folds the conversion of a constant NaN through single
		// precision's canonical NaN (seeds 914, 2934, 4089 of the
		// version-3 corpus).
		f = func(uint64) uint64 { return 0x7fffffffe0000000 }
	}
	if hasMod(in.mods, "relu") && (dt == tF16 || dt == tBF16) {
		g := f
		f = func(v uint64) uint64 {
			r := g(v)
			if r&0x8000 != 0 && r&0x7fff <= 0x7f80 && (dt == tBF16 || r&0x7fff <= 0x7c00) {
				return 0 // negative, or -0: +0 (a NaN stays a NaN)
			}
			return r
		}
	}
	if dm := c.widthMask(a[0]); dm > dt.mask() {
		// A result narrower than its register is extended to it: sign
		// extension for signed types, zero extension (which f's result
		// already is) for the others.
		if dt.signed() {
			g, w := f, dt.bits()
			f = func(v uint64) uint64 { return sext(g(v), w) & dm }
		}
	}
	if (st == tF16 || st == tBF16) && c.cnotFed(a[1]) {
		x.fn = unRefuse(f, func(v uint64) bool { return v&0xffff == 1 }, cnotWhy)
		return
	}
	x.fn = un(f)
}

// memSpace reads the state space of a memory instruction.
func memSpace(mods []string) uint8 {
	for _, m := range mods {
		switch m {
		case "global":
			return spGlobal
		case "shared", "shared::cta", "shared::cluster":
			return spShared
		case "local":
			return spLocal
		case "const":
			return spConst
		case "param", "param::entry", "param::func":
			return spParam
		}
	}
	return spGeneric
}

func vecLen(mods []string) uint8 {
	for _, m := range mods {
		switch m {
		case "v2":
			return 2
		case "v4":
			return 4
		case "v8":
			return 8
		}
	}
	return 1
}

// address resolves a memory operand "[base+off]" for space sp to a slot
// holding the base and a constant offset. Parameter operands resolve to
// their symbol instead.
func (c *fcomp) address(o operand, sp uint8) (slot int32, off uint64, ps *sym) {
	if o.kind != oAddr {
		c.failf("expected an address in `%s`", c.cur.text)
	}
	if o.base == nil {
		return c.constSlot(0), o.ival, nil
	}
	b := *o.base
	off = o.ival + b.ival
	b.ival = 0
	if _, ok := specialNames[b.name]; !ok {
		if s := c.lookup(b.name); s != nil {
			switch s.kind {
			case symKParam, symParam:
				return -1, uint64(s.off) + off, s
			case symShared:
				if sp == spGeneric {
					off += SharedWindow
				}
				return c.sharedSlot(s.idx), off, nil
			case symLocal:
				slot = c.addrSlot(fillLocal, int32(s.off))
				if sp == spGeneric {
					off += LocalWindow
				}
				return slot, off, nil
			}
		}
	}
	return c.val(b, tU64), off, nil
}

func (c *fcomp) ld(in *instr, x *inst) {
	c.nargs(in, 2)
	t := c.lastType(in)
	if t == tB128 {
		unsupported("128-bit loads")
	}
	sp := memSpace(in.mods)
	x.t, x.n, x.space = t, vecLen(in.mods), sp
	dstOp := in.args[0]
	if x.n > 1 {
		if dstOp.kind != oVec || len(dstOp.elems) != int(x.n) {
			c.failf("`%s` needs a %d-element vector destination", in.text, x.n)
		}
		for _, e := range dstOp.elems {
			x.vec = append(x.vec, c.dst(e))
		}
		x.dmask = c.widthMask(dstOp.elems...)
	} else {
		x.d = c.dst(dstOp)
		x.dmask = c.widthMask(dstOp)
	}
	slot, off, ps := c.address(in.args[1], sp)
	x.a, x.off = slot, off
	if ps != nil || sp == spParam {
		switch {
		case ps == nil && !c.f.entry:
			unsupported("parameter access through a register address in a function")
		case ps == nil:
			// ld.param [%rd]: a kernel-parameter address taken with mov
		case ps.kind == symParam:
			x.aux = 1
			x.a = -1
		default:
			x.a = -1
		}
		x.space = spParam
		x.fn = opLdParam
		return
	}
	// The 4-byte fast paths zero-extend: a signed load into a wider
	// register takes the general path, which sign-extends.
	zext := !t.signed() || x.dmask == 0xffffffff
	switch {
	case sp == spGlobal && x.n == 1 && t.size() == 4 && zext:
		x.fn = opLdGlobal32
	case sp == spShared && x.n == 1 && t.size() == 4 && zext:
		x.fn = opLdShared32
	case sp == spGeneric && x.n == 1 && t.size() == 4:
		x.fn = opLdGeneric32
	default:
		x.fn = opLd
	}
}

func (c *fcomp) st(in *instr, x *inst) {
	c.nargs(in, 2)
	t := c.lastType(in)
	if t == tB128 {
		unsupported("128-bit stores")
	}
	sp := memSpace(in.mods)
	x.t, x.n, x.space = t, vecLen(in.mods), sp
	src := in.args[1]
	if x.n > 1 {
		if src.kind != oVec || len(src.elems) != int(x.n) {
			c.failf("`%s` needs a %d-element vector source", in.text, x.n)
		}
		for _, e := range src.elems {
			x.vec = append(x.vec, c.val(e, t))
		}
	} else {
		x.b = c.val(src, t)
	}
	slot, off, ps := c.address(in.args[0], sp)
	x.a, x.off = slot, off
	if c.byteStoreOfHalf(t, src) {
		x.fn = refuseAlways("an 8-bit store of a register a half-precision instruction writes: ptxas stores the value converted, not the register's low byte, and the emulator cannot follow that")
		return
	}
	if ps != nil || sp == spParam {
		if ps == nil {
			unsupported("parameter access through a register address")
		}
		if ps.kind == symKParam {
			c.failf("kernel parameters are read-only")
		}
		x.aux = 1
		x.space = spParam
		x.fn = opStParam
		return
	}
	switch {
	case sp == spGlobal && x.n == 1 && t.size() == 4:
		x.fn = opStGlobal32
	case sp == spShared && x.n == 1 && t.size() == 4:
		x.fn = opStShared32
	case sp == spGeneric && x.n == 1 && t.size() == 4:
		x.fn = opStGeneric32
	default:
		x.fn = opSt
	}
}

func (c *fcomp) atom(in *instr, x *inst) {
	t := c.lastType(in)
	sp := memSpace(in.mods)
	if sp == spLocal || sp == spConst || sp == spParam {
		c.failf("atomics on .%s are not allowed", in.mods)
	}
	op := -1
	for _, m := range in.mods {
		if v, ok := atomOps[m]; ok {
			op = v
		}
	}
	if op < 0 {
		unsupported("atomic operation of this kind")
	}
	if vecLen(in.mods) > 1 {
		unsupported("vector atomics")
	}
	if t == tB128 || (t == tF16 || t == tBF16 || t == tF16x2 || t == tBF16x2) && op != atAdd {
		unsupported("atomics on .%s", t)
	}
	x.t, x.space, x.aux = t, sp, uint32(op)
	args := in.args
	if len(args) == 0 {
		c.failf("`%s` has no operands", in.text)
	}
	if in.op == "atom" {
		x.d = c.dst(args[0])
		x.dmask = c.widthMask(args[0])
		args = args[1:]
	}
	want := 2
	if op == atCas {
		want = 3
	}
	if len(args) != want {
		c.failf("`%s` has the wrong number of operands", in.text)
	}
	slot, off, ps := c.address(args[0], sp)
	if ps != nil {
		c.failf("atomics on parameters are not allowed")
	}
	x.a, x.off = slot, off
	x.b = c.val(args[1], t)
	if op == atCas {
		x.c = c.val(args[2], t)
	}
	x.fn = opAtom
}

func (c *fcomp) cp(in *instr, x *inst) {
	if len(in.mods) == 0 || in.mods[0] != "async" {
		unsupported("cp other than cp.async")
	}
	if hasMod(in.mods, "commit_group") || hasMod(in.mods, "wait_group") || hasMod(in.mods, "wait_all") {
		x.fn = opNop
		return
	}
	if hasMod(in.mods, "bulk") || hasMod(in.mods, "mbarrier") {
		unsupported("bulk or mbarrier-tracked cp.async")
	}
	a := in.args
	if len(a) < 3 || a[2].kind != oImm {
		c.failf("`%s` needs [dst], [src], size", in.text)
	}
	dslot, doff, _ := c.address(a[0], spShared)
	sslot, soff, _ := c.address(a[1], spGlobal)
	x.a, x.off = dslot, doff
	x.b, x.target = sslot, int32(soff)
	x.n = uint8(a[2].ival)
	if x.n != 4 && x.n != 8 && x.n != 16 {
		c.failf("cp.async size must be 4, 8 or 16")
	}
	if len(a) > 3 {
		x.c = c.val(a[3], tU32) // src-size: bytes to copy, the rest is zero-filled
	}
	x.fn = opCpAsync
}

func (c *fcomp) call(in *instr, x *inst) {
	a := in.args
	var rets, args []operand
	i := 0
	if i < len(a) && a[i].kind == oList {
		rets = a[i].elems
		i++
	}
	if i >= len(a) || a[i].kind != oSym {
		if i < len(a) && a[i].kind == oReg {
			unsupported("indirect call")
		}
		c.failf("`%s` does not name a function", in.text)
	}
	name := a[i].name
	i++
	if i < len(a) && a[i].kind == oList {
		args = a[i].elems
		i++
	}
	ci := &callInfo{name: name}
	loc := func(o operand) Param {
		s := c.lookup(o.name)
		if s == nil || s.kind != symParam {
			unsupported("call argument %q that is not a .param variable", o.name)
		}
		return Param{Offset: s.off, Size: s.size}
	}
	for _, r := range rets {
		ci.rets = append(ci.rets, loc(r))
	}
	for _, p := range args {
		ci.args = append(ci.args, loc(p))
	}
	x.ctl = cCall
	x.call = ci
}

func (c *fcomp) bar(in *instr, x *inst) {
	a := in.args
	mods := in.mods
	if hasMod(mods, "warp") {
		x.fn = opNop // bar.warp.sync: lanes run converged already
		return
	}
	if hasMod(mods, "cluster") {
		x.fn = opNop // a cluster is one block here
		return
	}
	x.ctl = cBar
	x.a, x.b = -1, -1
	red := hasMod(mods, "red")
	if red {
		if len(a) < 3 {
			c.failf("`%s` needs a destination, a barrier and a predicate", in.text)
		}
		x.d = c.dst(a[0])
		x.c = c.val(a[len(a)-1], tPred)
		op := redPopc
		if hasMod(mods, "and") {
			op = redAnd
		} else if hasMod(mods, "or") {
			op = redOr
		}
		x.aux = barReduces | barWaits | uint32(op)<<8
		a = a[1 : len(a)-1]
	} else if hasMod(mods, "arrive") {
		x.aux = 0
	} else {
		x.aux = barWaits
	}
	if len(a) == 0 {
		// barrier.sync with no operand is barrier 0 (CUDA 12+ spelling).
		return
	}
	if a[0].kind == oImm {
		if a[0].ival > 15 {
			c.failf("barrier %d does not exist (0..15)", a[0].ival)
		}
		x.aux |= uint32(a[0].ival)
	} else {
		x.a = c.val(a[0], tU32)
	}
	if len(a) > 1 {
		if a[1].kind == oImm && (a[1].ival == 0 || a[1].ival%warpSize != 0 || a[1].ival > 1024) {
			c.failf("barrier thread count %d must be a non-zero multiple of 32", a[1].ival)
		}
		x.b = c.val(a[1], tU32)
	}
}

func (c *fcomp) shfl(in *instr, x *inst) {
	a := in.args
	sync := hasMod(in.mods, "sync")
	if sync {
		c.nargs(in, 5)
	} else {
		c.nargs(in, 4)
	}
	switch {
	case hasMod(in.mods, "up"):
		x.aux = shflUp
	case hasMod(in.mods, "down"):
		x.aux = shflDown
	case hasMod(in.mods, "bfly"):
		x.aux = shflBfly
	case hasMod(in.mods, "idx"):
		x.aux = shflIdx
	default:
		c.failf("`%s` lacks a mode", in.text)
	}
	x.d = c.dst(a[0])
	if a[0].pair != "" {
		x.d2 = c.dst(operand{kind: oReg, name: a[0].pair})
	}
	x.a, x.b, x.c = c.val(a[1], tB32), c.val(a[2], tU32), c.val(a[3], tU32)
	if sync {
		x.e = c.val(a[4], tB32)
	}
	x.fn = opShfl
}

func (c *fcomp) vote(in *instr, x *inst) {
	a := in.args
	sync := hasMod(in.mods, "sync")
	if sync {
		c.nargs(in, 3)
		x.e = c.val(a[2], tB32)
	} else {
		c.nargs(in, 2)
	}
	switch {
	case hasMod(in.mods, "all"):
		x.aux = voteAll
	case hasMod(in.mods, "any"):
		x.aux = voteAny
	case hasMod(in.mods, "uni"):
		x.aux = voteUni
	case hasMod(in.mods, "ballot"):
		x.aux = voteBallot
	default:
		c.failf("`%s` lacks a mode", in.text)
	}
	x.d = c.dst(a[0])
	x.a = c.val(a[1], tPred)
	x.fn = opVote
}

// guardedSignOp is neg or abs of .f32 (without .ftz) under a guard as
// an H200 runs it after ptxas (measured by the generated corpus): a plain
// change of the sign bit, a NaN's payload kept and not quieted, where the
// unguarded instruction returns the canonical NaN. (The corpus shows the
// other float types and .ftz canonicalising under a guard too.) It is nil
// for every other instruction.
func guardedSignOp(in *instr, t ptype) func(uint64) uint64 {
	if in.guard == "" || t != tF32 || hasMod(in.mods, "ftz") {
		return nil
	}
	switch in.op {
	case "neg":
		return func(a uint64) uint64 { return a ^ 0x80000000 }
	case "abs":
		return func(a uint64) uint64 { return a &^ 0x80000000 }
	}
	return nil
}

// intSignMin is, for neg.s16, abs.s16, abs.s32 and abs.s64, the operand
// the emulator refuses: the type's most negative value. ptxas keeps 16-bit
// integers in 32-bit registers, and -(-32768) stays +32768 there, which
// the readers then see (cvt.s32.s16 seed 2486, mad.wide.s16 3008,
// mad.hi.s16 2301 of the version-2 corpus); and it assumes abs is not
// negative, so a slct on abs.s32 of INT_MIN takes the non-negative side
// (seed 518; the 32- and 64-bit case is refused only where the result is
// a slct selector or a signed div or rem operand, slctSel: stored, it is
// INT_MIN on the device, as the
// hand-written corpus's select_pred shows). It is 0 for other
// instructions.
func intSignMin(op string, t ptype) uint64 {
	switch {
	case op == "neg" && t == tS16, op == "abs" && (t == tS16 || t == tS32 || t == tS64):
		return 1 << (t.bits() - 1)
	}
	return 0
}

// foldedSignNaN is, for neg and abs of the single and half float types,
// the test for an operand whose result the emulator cannot establish
// where the result is read by a sign-sensitive instruction (signReads):
// a NaN. ptxas makes these instructions operand modifiers of their
// readers where it can, and a reader then sees the operand's NaN with its
// sign changed (payload kept) where a materialised neg or abs gives the
// canonical NaN. The version-2 corpus has both for the same shapes:
// neg.f32 read by neg.f32 (seed 1211), neg.f16 by cvt.f64.f16 (689,
// 1526, 3555, 4089), by selp (852, 1106, 2449, 2968), slct (169, 1403,
// 1667, 3594), cvt.f64.f32 (2479, 2679, 2689, 3638), and a register a
// guarded instruction whose guard is false keeps (2792, 3314, 3608). It
// is nil for other instructions; doubles keep the NaN either way.
func foldedSignNaN(op string, t ptype) func(uint64) bool {
	if op != "neg" && op != "abs" {
		return nil
	}
	switch t {
	case tF32:
		return isNaN32
	case tF16, tF16x2, tBF16, tBF16x2:
		h, lanes := halfFormatOf(t)
		return func(a uint64) bool {
			for i := 0; i < lanes; i++ {
				if h.isNaN(uint16(a >> (16 * i))) {
					return true
				}
			}
			return false
		}
	}
	return nil
}

// signReads names the registers of a function body that some instruction
// reads as a float where ptxas can make a neg or abs an operand modifier
// and a NaN's sign and payload reach the result (signSensitive). Stores, integer and
// bit instructions, the float arithmetic that returns the canonical NaN
// for any NaN operand, comparisons, testp and conversions to integers read
// a materialised neg or abs, which the corpus shows to be the canonical
// NaN. The analysis goes by register name over the whole body, which can
// only name more registers than the paths a kernel takes read.
func signReads(body []stmt) map[string]bool {
	regs := map[string]bool{}
	var mark func(o operand)
	mark = func(o operand) {
		switch o.kind {
		case oReg:
			regs[o.name] = true
		case oVec, oList:
			for _, e := range o.elems {
				mark(e)
			}
		}
	}
	for _, s := range body {
		if s.kind != stInstr {
			continue
		}
		for _, o := range signSensitive(s.in) {
			mark(o)
		}
	}
	return regs
}

// slctSels names the registers a function body uses where ptxas relies on
// abs being non-negative: slct selectors, and the operands of signed div
// and rem (rem.s32 of abs.s32 of INT_MIN is an unsigned remainder on an
// H200, seed 2851 of the version-3 corpus).
func slctSels(body []stmt) map[string]bool {
	regs := map[string]bool{}
	for _, s := range body {
		if s.kind == stInstr && s.in.op == "slct" && len(s.in.args) > 3 && s.in.args[3].kind == oReg {
			regs[s.in.args[3].name] = true
		}
		if s.kind == stInstr && (s.in.op == "div" || s.in.op == "rem") && len(s.in.args) == 3 {
			if ts := typesOf(s.in.mods); len(ts) > 0 && ts[len(ts)-1].signed() {
				for _, o := range s.in.args[1:] {
					if o.kind == oReg {
						regs[o.name] = true
					}
				}
			}
		}
	}
	return regs
}

// guardedWrites counts, per register, the guarded instructions of a
// function body that write it.
func guardedWrites(body []stmt) map[string]int {
	n := map[string]int{}
	for _, s := range body {
		if s.kind == stInstr && s.in.guard != "" && len(s.in.args) > 0 && s.in.args[0].kind == oReg {
			n[s.in.args[0].name]++
		}
	}
	return n
}

// signSensitiveDst says whether the result d of a neg or abs in reaches a
// reader where a NaN's sign matters: a sign-sensitive read (signReads),
// or another guarded instruction writing d, whose lanes with a false
// guard keep what this one wrote.
func (c *fcomp) signSensitiveDst(in *instr, d operand) bool {
	if c.signRead[d.name] {
		return true
	}
	n := c.guarded[d.name]
	if in.guard != "" {
		n--
	}
	return n > 0
}

// signSensitive is the operands an instruction reads as a float in a way
// that can pass a NaN's sign and payload on (see signReads).
func signSensitive(in *instr) []operand {
	if in.op == "call" {
		return in.args
	}
	ts := typesOf(in.mods)
	if len(in.args) < 2 || len(ts) == 0 {
		return nil
	}
	fl := func(t ptype) bool { return t.float() || t == tF16x2 || t == tBF16x2 }
	switch in.op {
	case "st", "setp", "set", "testp", "add", "sub", "mul", "fma", "mad", "div", "sqrt", "rsqrt", "rcp", "ex2", "lg2", "sin", "cos", "tanh":
		return nil
	case "cvt":
		if len(ts) == 2 && fl(ts[0]) && fl(ts[1]) {
			return in.args[1:2]
		}
		return nil
	case "slct":
		var out []operand
		if fl(ts[0]) && len(in.args) > 2 {
			out = append(out, in.args[1:3]...)
		}
		if fl(ts[len(ts)-1]) && len(in.args) > 3 {
			out = append(out, in.args[3])
		}
		return out
	}
	if fl(ts[len(ts)-1]) {
		return in.args[1:]
	}
	return nil
}

// guardedSetF32 runs a guarded set with a .f32 result as an H200 does
// after ptxas (measured by the generated corpus, e2e/ptxgen): ptxas
// computes the comparison as an integer 0 or -1 under the guard and
// converts its absolute value to float unguarded, so a lane whose guard
// is false does not keep its register d but gets float(|int32(d)|), the
// absolute value taken in 32 bits (INT_MIN gives -2^31). The
// guard (slot x.e, negated per x.guardNeg) is evaluated here, on every
// active lane.
func guardedSetF32(set, flushed func(p, q, r uint64) uint64) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b, c, g := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.c)*warpSize, int(in.e)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			if (r[g+l] != 0) != in.guardNeg {
				v := set(r[a+l], r[b+l], r[c+l])
				if flushed != nil && v == 0 && flushed(r[a+l], r[b+l], r[c+l]) != 0 {
					refuseSetFtz(w, in, r[a+l], r[b+l])
				}
				r[d+l] = v
				continue
			}
			v := int32(r[d+l])
			if v < 0 {
				v = -v // wraps as the hardware's does: INT_MIN stays INT_MIN
			}
			r[d+l] = uint64(math.Float32bits(float32(v)))
		}
	}
}

// floatPeephole applies what ptxas does to float instructions before the
// hardware sees them, where that changes a result an H200 returns (see
// e2e/ptxgen): it reports whether it compiled the instruction itself.
//
//   - min and max of a register with itself are the register, NaN payload
//     and all, in f16, f32 and f64 (not with .ftz or .NaN);
//   - a double sub of a constant is an add of the negated constant, which
//     shows in the sign of a NaN constant.
func (c *fcomp) floatPeephole(in *instr, x *inst, t ptype) bool {
	a := in.args
	switch {
	case (in.op == "min" || in.op == "max") && (t == tF16 || t == tF32 || t == tF64) && !hasMod(in.mods, "ftz") && !hasMod(in.mods, "NaN") &&
		c.sameReg(a[1], a[2]):
		x.fn = opMov
		return true
	case t == tF64 && in.op == "sub" && (a[2].kind == oImm || a[2].kind == oFImm):
		x.b = c.constSlot(immBits(a[2], t) ^ 1<<63)
		x.fn = binNaN(float64Binary("add", in.mods))
		return true
	}
	return false
}
