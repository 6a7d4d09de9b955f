package ptxgen

import "fmt"

// accOp is an atomic operation whose final memory value does not depend
// on the order in which threads apply it: integer add, the bitwise
// operations, min and max, inc and dec with one fixed limit, and float
// adds of small integers, which round nowhere.
type accOp struct {
	op, ty string
	cls    class
	bytes  int
}

var accOps = []accOp{
	{"add", "u32", cR, 4}, {"add", "s32", cR, 4}, {"add", "u64", cD, 8}, {"and", "b32", cR, 4}, {"or", "b32", cR, 4},
	{"xor", "b32", cR, 4}, {"and", "b64", cD, 8}, {"or", "b64", cD, 8}, {"xor", "b64", cD, 8}, {"min", "u32", cR, 4},
	{"max", "u32", cR, 4}, {"min", "s32", cR, 4}, {"max", "s32", cR, 4}, {"min", "u64", cD, 8}, {"max", "s64", cD, 8},
	{"min", "s64", cD, 8}, {"inc", "u32", cR, 4}, {"dec", "u32", cR, 4}, {"add", "f32", cF, 4}, {"add", "f64", cFD, 8},
}

// accValue emits an operand for op: a register, a small integer as a
// float for float adds, or the fixed limit of inc and dec.
func (g *gen) accValue(a accOp, limit int) string {
	switch {
	case a.op == "inc" || a.op == "dec":
		return fmt.Sprint(limit)
	case a.ty == "f32" || a.ty == "f64":
		t, f := g.tmp(cR), g.tmp(a.cls)
		g.emit("and.b32 %s, %s, 255", t, g.use(cR))
		g.emit("cvt.rn.%s.u32 %s, %s", a.ty, f, t)
		return f
	}
	return g.use(a.cls)
}

func (g *gen) atomOp() {
	if g.r.chance(0.5) {
		// A global accumulator shared by every thread of the launch.
		i := g.r.intn(len(g.accs))
		a := g.accs[i]
		v := g.accValue(a, g.accLimit[i])
		space := pick(g.r, []string{".global", ""})
		g.fams["atom.global.acc"]++
		if g.r.chance(0.5) {
			g.emit("red%s.%s.%s [%s+%d], %s", space, a.op, a.ty, g.acc, 8*i, v)
		} else {
			// The old value depends on the order of the threads: it goes
			// to a register nothing reads, and no trace records it.
			g.emitUntraced("atom%s.%s.%s %s, [%s+%d], %s", space, a.op, a.ty, g.tmp(a.cls), g.acc, 8*i, v)
		}
		return
	}
	// This thread's own words: the old value is defined.
	type own struct {
		op, ty string
		cls    class
		off    int
		cas    bool
	}
	ops := []own{
		{"add", "u32", cR, 0, false}, {"exch", "b32", cR, 0, false}, {"cas", "b32", cR, 4, true},
		{"min", "s32", cR, 4, false}, {"max", "u32", cR, 0, false}, {"and", "b32", cR, 4, false},
		{"or", "b32", cR, 0, false}, {"xor", "b32", cR, 4, false}, {"inc", "u32", cR, 0, false},
		{"dec", "u32", cR, 4, false}, {"add", "u64", cD, 8, false}, {"exch", "b64", cD, 8, false},
		{"cas", "b64", cD, 8, true}, {"min", "u64", cD, 8, false}, {"max", "s64", cD, 8, false},
		{"add", "f32", cF, 4, false}, {"add", "f64", cFD, 8, false},
	}
	o := pick(g.r, ops)
	space := pick(g.r, []string{".global", ""})
	if o.cas {
		g.def("atom.global.own", o.cls, func(d string) string {
			return fmt.Sprintf("atom%s.cas.%s %s, [%s+%d], %s, %s", space, o.ty, d, g.ownA, o.off, g.use(o.cls), g.use(o.cls))
		})
		return
	}
	g.def("atom.global.own", o.cls, func(d string) string {
		return fmt.Sprintf("atom%s.%s.%s %s, [%s+%d], %s", space, o.op, o.ty, d, g.ownA, o.off, g.use(o.cls))
	})
}

func (g *gen) warpOp() {
	mask := "0xffffffff"
	if g.depth > 0 {
		mask = g.member
	}
	g.noGuard = true
	defer func() { g.noGuard = false }()
	k := g.r.intn(7)
	if g.depth > 0 && k == 0 {
		k = 1 // shfl reads other lanes' values: only with every lane present
	}
	switch k {
	case 0:
		mode := pick(g.r, []string{"up", "down", "bfly", "idx"})
		b := fmt.Sprint(g.r.intn(32))
		if g.r.chance(0.4) {
			b = g.use(cR)
		}
		w := pick(g.r, []int{32, 32, 16, 8, 4, 2})
		cv := (32 - w) << 8
		if mode != "up" {
			cv |= 0x1f
		}
		if g.r.chance(0.2) {
			cv = g.r.intn(0x2000)
		}
		if g.r.chance(0.5) {
			g.def2("warp.shfl", cR, cP, func(d1, d2 string) string {
				return fmt.Sprintf("shfl.sync.%s.b32 %s|%s, %s, %s, %d, %s", mode, d1, d2, g.use(cR), b, cv, mask)
			})
			return
		}
		g.def("warp.shfl", cR, func(d string) string {
			return fmt.Sprintf("shfl.sync.%s.b32 %s, %s, %s, %d, %s", mode, d, g.use(cR), b, cv, mask)
		})
	case 1:
		m := pick(g.r, []string{"all", "any", "uni"})
		g.def("warp.vote", cP, func(d string) string { return fmt.Sprintf("vote.sync.%s.pred %s, %s, %s", m, d, g.use(cP), mask) })
	case 2:
		g.def("warp.vote", cR, func(d string) string { return fmt.Sprintf("vote.sync.ballot.b32 %s, %s, %s", d, g.use(cP), mask) })
	case 3:
		c, ty := cR, "b32"
		if g.r.chance(0.4) {
			c, ty = cD, "b64"
		}
		// Matching is likelier on values few lanes differ in.
		src := g.use(c)
		if g.r.chance(0.6) {
			t := g.tmp(c)
			g.emit("and.%s %s, %s, 3", ty, t, src)
			src = t
		}
		if g.r.chance(0.5) {
			g.def("warp.match", cR, func(d string) string { return fmt.Sprintf("match.any.sync.%s %s, %s, %s", ty, d, src, mask) })
			return
		}
		g.def2("warp.match", cR, cP, func(d1, d2 string) string {
			return fmt.Sprintf("match.all.sync.%s %s|%s, %s, %s", ty, d1, d2, src, mask)
		})
	case 4, 5:
		op := pick(g.r, []string{"add", "min", "max", "and", "or", "xor"})
		ty := "b32"
		if op == "add" || op == "min" || op == "max" {
			ty = pick(g.r, []string{"u32", "s32"})
		}
		g.def("warp.redux", cR, func(d string) string { return fmt.Sprintf("redux.sync.%s.%s %s, %s, %s", op, ty, d, g.use(cR), mask) })
	default:
		g.def2("warp.elect", cR, cP, func(d1, d2 string) string { return fmt.Sprintf("elect.sync %s|%s, %s", d1, d2, mask) })
	}
}

// region is an if/else or a loop holding more statements. Registers it
// writes exist before it, so every path leaves them defined.
func (g *gen) region() {
	saved := g.member
	defer func() { g.member = saved }()
	if g.r.chance(0.55) {
		g.fams["ctl.if"]++
		p := g.use(cP)
		member := ""
		if g.warp && g.depth == 0 && g.r.chance(0.5) {
			member = g.tmp(cR)
			g.emit("vote.sync.ballot.b32 %s, %s, 0xffffffff", member, p)
		}
		els, end := g.label(), g.label()
		g.emit("@!%s bra %s", p, els)
		g.depth++
		g.member = member
		for n := 1 + g.r.intn(6); n > 0; n-- {
			g.stmt()
		}
		g.member = ""
		g.emit("bra %s", end)
		g.place(els)
		for n := g.r.intn(5); n > 0; n-- {
			g.stmt()
		}
		g.depth--
		g.place(end)
		return
	}
	g.fams["ctl.loop"]++
	cnt, q := g.tmp(cR), g.tmp(cP)
	src := g.use(cR)
	trips := pick(g.r, []int{3, 7, 15})
	g.emit("and.b32 %s, %s, %d", cnt, src, trips)
	outer := g.mult
	g.mult *= trips + 1
	defer func() { g.mult = outer }()
	top, next, end := g.label(), g.label(), g.label()
	g.place(top)
	g.emit("setp.eq.u32 %s, %s, 0", q, cnt)
	g.emit("@%s bra %s", q, end)
	g.depth++
	g.member = ""
	for n := 1 + g.r.intn(4); n > 0; n-- {
		g.stmt()
	}
	if g.r.chance(0.4) {
		qb := g.tmp(cP)
		g.emit("setp.%s.s32 %s, %s, %s", pick(g.r, intCmps), qb, g.use(cR), g.use(cR))
		g.emit("@%s bra %s", qb, pick(g.r, []string{end, next}))
		g.fams["ctl.break"]++
		for n := g.r.intn(3); n > 0; n-- {
			g.stmt()
		}
	}
	g.place(next)
	g.emit("sub.u32 %s, %s, 1", cnt, cnt)
	g.emit("bra %s", top)
	g.depth--
	g.place(end)
}

// sharedPhase exchanges values through shared memory between barriers:
// each thread fills its own 16 bytes (whole, then narrow parts), and
// after the barrier reads a neighbour's, in other widths. Or the block
// updates shared accumulators with atomics and reads the totals.
func (g *gen) sharedPhase() {
	if g.r.chance(0.35) {
		g.sharedAtomics()
		return
	}
	g.fams["mem.shared"]++
	sa := g.tmp(cR)
	g.addr(sa)
	g.emit("mov.u32 %s, sbuf", sa)
	g.emit("mad.lo.s32 %s, %s, 16, %s", sa, g.tid, sa)
	g.emit("st.shared.v2.b64 [%s], {%s, %s}", sa, g.use(cD), g.use(cD))
	for n := g.r.intn(4); n > 0; n-- {
		mt := pick(g.r, memTypes)
		off := g.r.intn(16/mt.bytes) * mt.bytes
		g.emit("st.shared.%s [%s+%d], %s", mt.name, sa, off, g.use(pick(g.r, mt.cls)))
	}
	g.emit("bar.sync 0")
	t, na := g.tmp(cR), g.tmp(cR)
	g.addr(na)
	g.emit("add.u32 %s, %s, %d", t, g.tid, g.r.intn(int(g.prog.Block)))
	g.emit("rem.u32 %s, %s, %d", t, t, g.prog.Block)
	g.emit("mov.u32 %s, sbuf", na)
	g.emit("mad.lo.s32 %s, %s, 16, %s", na, t, na)
	generic := ""
	if g.r.chance(0.4) {
		a64 := g.tmp(cD)
		g.addr(a64)
		g.emit("cvt.u64.u32 %s, %s", a64, na)
		g.emit("cvta.shared.u64 %s, %s", a64, a64)
		generic = a64
	}
	for n := 1 + g.r.intn(3); n > 0; n-- {
		mt := pick(g.r, memTypes)
		c := pick(g.r, mt.cls)
		vec := 1
		if g.r.chance(0.3) {
			vec = pick(g.r, []int{2, 4})
			for mt.bytes*vec > 16 {
				vec /= 2
			}
		}
		size := mt.bytes * vec
		off := g.r.intn(16/size) * size
		addr, sp := na, ".shared"
		if generic != "" {
			addr, sp = generic, ""
		}
		if vec == 1 {
			g.def("mem.ld.shared", c, func(d string) string { return fmt.Sprintf("ld%s.%s %s, [%s+%d]", sp, mt.name, d, addr, off) })
			continue
		}
		g.fams["mem.ld.shared.vec"]++
		var ds []string
		for i := 0; i < vec; i++ {
			ds = append(ds, g.tmp(c))
		}
		text := fmt.Sprintf("ld%s.v%d.%s {%s}, [%s+%d]", sp, vec, mt.name, joinRegs(ds), addr, off)
		g.emit("%s", text)
		for _, d := range ds {
			rg := &reg{name: d, cls: c, last: text, writes: 1}
			g.pool[c] = append(g.pool[c], rg)
			g.byName[d] = rg
		}
	}
	g.emit("bar.sync 0")
}

func (g *gen) sharedAtomics() {
	g.fams["atom.shared"]++
	j := g.r.intn(8)
	a := pick(g.r, accOps)
	limit := 1 + g.r.intn(100)
	// Thread j starts word j; for a float add, with a small integer.
	pinit, sa := g.tmp(cP), g.tmp(cR)
	g.addr(sa)
	g.emit("setp.lt.u32 %s, %s, 8", pinit, g.tid)
	g.emit("mov.u32 %s, sacc", sa)
	g.emit("mad.lo.s32 %s, %s, 8, %s", sa, g.tid, sa)
	g.emit("@%s st.shared.b64 [%s], %s", pinit, sa, g.use(cD))
	if g.prog.Block < 8 {
		// Fewer than 8 threads: the words nobody starts must not be read.
		j %= int(g.prog.Block)
	}
	if a.ty == "f32" || a.ty == "f64" {
		pj := g.tmp(cP)
		g.emit("setp.eq.u32 %s, %s, %d", pj, g.tid, j)
		v := g.accValue(a, 0)
		g.emit("@%s st.shared.%s [sacc+%d], %s", pj, a.ty, 8*j, v)
	}
	g.emit("bar.sync 0")
	v := g.accValue(a, limit)
	if g.r.chance(0.5) {
		g.emit("red.shared.%s.%s [sacc+%d], %s", a.op, a.ty, 8*j, v)
	} else {
		g.emitUntraced("atom.shared.%s.%s %s, [sacc+%d], %s", a.op, a.ty, g.tmp(a.cls), 8*j, v)
	}
	g.emit("bar.sync 0")
	g.noGuard = true
	g.def("atom.shared", a.cls, func(d string) string { return fmt.Sprintf("ld.shared.%s %s, [sacc+%d]", a.ty, d, 8*j) })
	g.noGuard = false
	g.emit("bar.sync 0")
}

func (g *gen) barRed() {
	g.noGuard = true
	defer func() { g.noGuard = false }()
	switch g.r.intn(3) {
	case 0:
		g.def("bar.red", cR, func(d string) string { return fmt.Sprintf("bar.red.popc.u32 %s, 0, %s", d, g.use(cP)) })
	case 1:
		op := pick(g.r, []string{"and", "or"})
		g.def("bar.red", cP, func(d string) string { return fmt.Sprintf("bar.red.%s.pred %s, 0, %s", op, d, g.use(cP)) })
	default:
		g.fams["bar.sync"]++
		g.emit("%s", pick(g.r, []string{"bar.sync 0", "barrier.sync 0", "bar.sync 1"}))
	}
}

// helperFuncs are device functions the kernels call, in nvcc's calling
// convention (.param arguments and results).
var helperFuncs = []string{`.func (.param .b32 hr) h0(.param .b32 ha, .param .b32 hb)
{
	.reg .b32 %t<5>;
	.reg .pred %tp;
	ld.param.b32 %t0, [ha];
	ld.param.b32 %t1, [hb];
	mul.lo.s32 %t2, %t0, %t1;
	shr.s32 %t3, %t0, 3;
	setp.gt.s32 %tp, %t2, %t3;
	selp.b32 %t4, %t2, %t3, %tp;
	xor.b32 %t4, %t4, %t1;
	st.param.b32 [hr], %t4;
	ret;
}
`, `.func (.param .b64 hr) h1(.param .b64 ha, .param .f32 hb)
{
	.reg .b64 %t<4>;
	.reg .f32 %tf<2>;
	ld.param.b64 %t0, [ha];
	ld.param.f32 %tf0, [hb];
	cvt.rzi.s64.f32 %t1, %tf0;
	add.s64 %t2, %t0, %t1;
	mul.hi.u64 %t3, %t2, %t0;
	xor.b64 %t3, %t3, %t2;
	st.param.b64 [hr], %t3;
	ret;
}
`}

func (g *gen) callOp() {
	i := g.r.intn(len(helperFuncs))
	if g.helpers&(1<<i) == 0 {
		g.helpers |= 1 << i
		g.funcs.WriteString(helperFuncs[i])
		g.funcs.WriteString("\n")
	}
	if i == 0 {
		a, b := g.use(cR), g.use(cR)
		g.def("call", cR, func(d string) string {
			return fmt.Sprintf("{\n\t.param .b32 qa;\n\t.param .b32 qb;\n\t.param .b32 qr;\n\tst.param.b32 [qa], %s;\n\tst.param.b32 [qb], %s;\n\tcall (qr), h0, (qa, qb);\n\tld.param.b32 %s, [qr];\n\t}", a, b, d)
		})
		return
	}
	a, b := g.use(cD), g.use(cF)
	g.def("call", cD, func(d string) string {
		return fmt.Sprintf("{\n\t.param .b64 qa;\n\t.param .f32 qb;\n\t.param .b64 qr;\n\tst.param.b64 [qa], %s;\n\tst.param.f32 [qb], %s;\n\tcall (qr), h1, (qa, qb);\n\tld.param.b64 %s, [qr];\n\t}", a, b, d)
	})
}

func (g *gen) specialOp() {
	s := pick(g.r, []string{"%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x", "%laneid", "%lanemask_eq", "%lanemask_lt",
		"%lanemask_le", "%lanemask_gt", "%lanemask_ge", "%tid.y", "%ntid.y", "%nctaid.y"})
	g.def("special", cR, func(d string) string { return fmt.Sprintf("mov.u32 %s, %s", d, s) })
}

// approxOp computes an approximate function of an exact, bounded input
// and writes it to the approximate outputs, which are compared within the
// ISA's error bounds rather than bit for bit. Its result feeds nothing.
func (g *gen) approxOp() {
	// x in [-8, 8) and y in [1/16, 16), both exact.
	t, f := g.tmp(cR), g.tmp(cF)
	g.emit("and.b32 %s, %s, 65535", t, g.use(cR))
	g.emit("cvt.rn.f32.u32 %s, %s", f, t)
	fresh := func(c class, text func(d string) string) string {
		d := g.tmp(c)
		s := text(d)
		g.emit("%s", s)
		rg := &reg{name: d, cls: c, last: s, writes: 1}
		g.pool[c] = append(g.pool[c], rg)
		g.byName[d] = rg
		return d
	}
	x := fresh(cF, func(d string) string { return fmt.Sprintf("fma.rn.f32 %s, %s, 0f39800000, 0fC1000000", d, f) })
	y := fresh(cF, func(d string) string { return fmt.Sprintf("fma.rn.f32 %s, %s, 0f39800000, 0f3D800000", d, f) })
	type aop struct {
		op   string
		in   string
		cls  class
		bin  bool
		ftzs bool
	}
	ops := []aop{
		{op: "ex2.approx", in: "x", cls: cF, ftzs: true}, {op: "sin.approx", in: "x", cls: cF, ftzs: true},
		{op: "cos.approx", in: "x", cls: cF, ftzs: true}, {op: "tanh.approx", in: "x", cls: cF},
		{op: "lg2.approx", in: "y", cls: cF, ftzs: true}, {op: "rsqrt.approx", in: "y", cls: cF, ftzs: true},
		{op: "sqrt.approx", in: "y", cls: cF, ftzs: true}, {op: "rcp.approx", in: "x", cls: cF, ftzs: true},
		{op: "div.approx", in: "x", cls: cF, bin: true, ftzs: true}, {op: "div.full", in: "x", cls: cF, bin: true, ftzs: true},
		{op: "rcp.approx.ftz", in: "y", cls: cFD}, {op: "rsqrt.approx", in: "y", cls: cFD},
		{op: "ex2.approx", in: "x", cls: cH}, {op: "tanh.approx", in: "x", cls: cH},
	}
	o := pick(g.r, ops)
	in := x
	if o.in == "y" {
		in = y
	}
	ty := map[class]string{cF: "f32", cFD: "f64", cH: "f16"}[o.cls]
	switch o.cls {
	case cFD:
		in = fresh(cFD, func(d string) string { return fmt.Sprintf("cvt.f64.f32 %s, %s", d, in) })
	case cH:
		in = fresh(cH, func(d string) string { return fmt.Sprintf("cvt.rn.f16.f32 %s, %s", d, in) })
	}
	name := o.op
	if o.ftzs && g.r.chance(0.4) {
		name += ".ftz"
	}
	name += "." + ty
	res := g.tmp(o.cls)
	in2 := ""
	// An approximation is compared within bounds, not bit for bit: no
	// trace records it.
	if o.bin {
		in2 = y
		g.emitUntraced("%s %s, %s, %s", name, res, in, in2)
	} else {
		g.emitUntraced("%s %s, %s", name, res, in)
	}
	g.fams["approx."+o.op]++
	size := classBytes[o.cls]
	g.aoff = (g.aoff + size - 1) &^ (size - 1)
	g.emit("@%s st.global.b%d [%s+%d], %s", g.w0, 8*size, g.alane, g.aoff, res)
	g.approx = append(g.approx, ApproxSlot{Op: name, Off: g.aoff, Size: size})
	g.approxIn = append(g.approxIn, [2]string{in, in2})
	g.aoff += size
}
