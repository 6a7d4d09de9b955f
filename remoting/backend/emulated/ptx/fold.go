package ptx

import (
	"math/bits"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// What ptxas knows about a register from the instructions that write it,
// and uses when it compiles the readers. The generated corpus
// (e2e/ptxgen) shows an H200 computing some instructions otherwise than
// the ISA says once ptxas has seen where an operand came from: it folds a
// register that only ever receives a constant as that constant, treats
// a copy as the register copied, and rewrites arithmetic across the
// instruction that defined an operand. The emulator follows the folds it
// can reproduce and refuses (CUDA_ERROR_NOT_SUPPORTED) the lanes where a
// rewrite changes a result it cannot reproduce. The analysis goes by
// register name over a function body, as signReads does.

// bodyDefs lists, per register, the instructions of a function body that
// write it: every register named by an instruction's first operand
// (a second destination "%r|%p", a vector "{%h0, %h1}" or call results
// included). Stores, branches and barriers name an address, a label or a
// number there, so they write nothing.
func bodyDefs(body []stmt) map[string][]*instr {
	defs := map[string][]*instr{}
	for _, s := range body {
		if s.kind != stInstr || len(s.in.args) == 0 {
			continue
		}
		in := s.in
		d := in.args[0]
		switch d.kind {
		case oReg:
			defs[d.name] = append(defs[d.name], in)
			if d.pair != "" {
				defs[d.pair] = append(defs[d.pair], in)
			}
		case oVec, oList:
			for _, e := range d.elems {
				if e.kind == oReg {
					defs[e.name] = append(defs[e.name], in)
				}
			}
		}
	}
	return defs
}

// onlyDef is the single instruction that writes register name, unguarded,
// or nil.
func (c *fcomp) onlyDef(name string) *instr {
	ds := c.defs[name]
	if len(ds) != 1 || ds[0].guard != "" {
		return nil
	}
	return ds[0]
}

// constOf is the value of an operand ptxas knows to be a constant: an
// immediate, or a register whose only write is a mov of an immediate
// (bfe seed 1795, cvt.f64.f16 seeds 914, 2934 and 4089 of the version-3
// corpus fold through such a register as through the immediate).
func (c *fcomp) constOf(o operand) (uint64, bool) {
	switch o.kind {
	case oImm:
		return o.ival, true
	case oReg:
		d := c.onlyDef(o.name)
		if d == nil {
			d = c.straightDef(o.name)
		}
		if d != nil && d.op == "mov" && d.guard == "" && len(d.args) == 2 && d.args[0].kind == oReg && d.args[1].kind == oImm {
			return d.args[1].ival, true
		}
	}
	return 0, false
}

// straightDef is the one instruction whose write of register name
// reaches the instruction being compiled on every path through the
// function body (cvt.f64.f16 seed 2934 of the version-3 corpus reads a
// constant across a loop that does not write it, and the register is
// written again later). It is nil where several writes reach it, a
// guarded one does, or a path from the function's entry writes nothing.
func (c *fcomp) straightDef(name string) *instr {
	return c.straightDefAt(name, c.at)
}

func (c *fcomp) straightDefAt(name string, at int) *instr {
	ds, entry := c.reaching(name, at)
	if entry || len(ds) != 1 || ds[0].guard != "" {
		return nil
	}
	return ds[0]
}

// reaching is the instructions whose writes of register name reach
// statement at of the function body, and whether a path from the entry
// reaches it without a write. A guarded write reaches, and so does what
// reaches it.
func (c *fcomp) reaching(name string, at int) (defs []*instr, entry bool) {
	if c.preds == nil {
		c.preds = bodyPreds(c.body)
	}
	seen := map[int]bool{}
	stack := append([]int(nil), c.preds[at]...)
	if len(stack) == 0 {
		return nil, true
	}
	for len(stack) > 0 {
		i := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[i] {
			continue
		}
		seen[i] = true
		if s := c.body[i]; s.kind == stInstr && writes(s.in, name) {
			defs = append(defs, s.in)
			if s.in.guard == "" {
				continue
			}
		}
		if i == 0 || len(c.preds[i]) == 0 {
			entry = true
			continue
		}
		stack = append(stack, c.preds[i]...)
	}
	return defs, entry
}

// indexOf is the index in the function body of an instruction.
func (c *fcomp) indexOf(in *instr) int {
	for i, s := range c.body {
		if s.kind == stInstr && s.in == in {
			return i
		}
	}
	return -1
}

// writes says whether an instruction writes register name (see bodyDefs).
func writes(in *instr, name string) bool {
	if len(in.args) == 0 {
		return false
	}
	d := in.args[0]
	switch d.kind {
	case oReg:
		return d.name == name || d.pair == name
	case oVec, oList:
		for _, e := range d.elems {
			if e.kind == oReg && e.name == name {
				return true
			}
		}
	}
	return false
}

// bodyPreds is, per statement of a function body, the statements control
// can come from: the one before it unless that one always branches or
// returns, and every branch to it if it is a label.
func bodyPreds(body []stmt) [][]int {
	labels := map[string]int{}
	for i, s := range body {
		if s.kind == stLabel {
			labels[s.label] = i
		}
	}
	preds := make([][]int, len(body))
	for i, s := range body {
		falls := true
		if s.kind == stInstr {
			in := s.in
			switch in.op {
			case "bra":
				if len(in.args) > 0 && in.args[0].kind == oSym {
					if t, ok := labels[in.args[0].name]; ok {
						preds[t] = append(preds[t], i)
					}
				}
				falls = in.guard != ""
			case "brx":
				// Its targets come from a table: any label may be one.
				for _, t := range labels {
					preds[t] = append(preds[t], i)
				}
				falls = in.guard != ""
			case "ret", "exit", "trap":
				falls = in.guard != ""
			}
		}
		if falls && i+1 < len(body) {
			preds[i+1] = append(preds[i+1], i)
		}
	}
	return preds
}

// copyOf is the register that register name is an unguarded copy of (a
// mov, or a selp of one register on both sides), or "".
func (c *fcomp) copyOf(name string) string {
	d := c.onlyDef(name)
	if d == nil || len(d.args) < 2 || d.args[0].kind != oReg {
		return ""
	}
	switch {
	case d.op == "mov" && len(d.args) == 2 && d.args[1].kind == oReg:
		return d.args[1].name
	case d.op == "selp" && len(d.args) == 4 && d.args[1].kind == oReg && d.args[2].kind == oReg && d.args[1].name == d.args[2].name:
		return d.args[1].name
	}
	return ""
}

// sameReg says whether ptxas sees two operands as one register: the same
// name, or one a copy (copyOf) of the other, which nothing writes again.
// min and max of such a pair are a move of it (max.f16 seed 3088 of the
// version-3 corpus: a NaN comes through unchanged).
func (c *fcomp) sameReg(p, q operand) bool {
	if p.kind != oReg || q.kind != oReg {
		return false
	}
	if p.name == q.name {
		return true
	}
	once := func(n string) bool { return len(c.defs[n]) <= 1 }
	return c.copyOf(q.name) == p.name && once(p.name) || c.copyOf(p.name) == q.name && once(q.name)
}

// satAcrossWrap says whether add.sat or sub.sat reads a register that a
// wrapping add or sub computed from its other operand, unchanged since: a + (b - a) or
// a - (b + a). ptxas cancels the common operand as if no saturation
// could happen, and an H200 returns b or -b where the sum saturates
// (add.sat.s32 seed 838, sub.sat.s32 seed 3986 of the version-3 corpus).
func (c *fcomp) satAcrossWrap(in *instr) bool {
	a := in.args
	if len(a) != 3 || a[1].kind != oReg || a[2].kind != oReg {
		return false
	}
	// d = other op z (or z op other), the only write of d that reaches
	// here, with other holding the same value here as there.
	from := func(d, other string) bool {
		def := c.straightDef(d)
		if def == nil || def.op != "add" && def.op != "sub" || hasMod(def.mods, "sat") || len(def.args) != 3 {
			return false
		}
		shares := false
		for _, o := range def.args[1:] {
			shares = shares || o.kind == oReg && o.name == other
		}
		if !shares {
			return false
		}
		here, there := c.straightDef(other), c.straightDefAt(other, c.indexOf(def))
		return here != nil && here == there
	}
	return from(a[1].name, a[2].name) || from(a[2].name, a[1].name)
}

// binRefuse is bin for an instruction whose result the emulator cannot
// establish for some operands: such a lane fails the launch with
// CUDA_ERROR_NOT_SUPPORTED, and why is formatted with both operands.
func binRefuse(f func(a, b uint64) uint64, refuse func(a, b uint64) bool, why string) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			if refuse(r[a+l], r[b+l]) {
				w.fail(cu.ErrorNotSupported, in, why, r[a+l], r[b+l])
			}
			r[d+l] = f(r[a+l], r[b+l])
		}
	}
}

// halfWriter says whether an instruction writes a half-precision float
// (f16, bf16 or a packed pair): arithmetic of those types or a
// conversion to one.
func halfWriter(in *instr) bool {
	ts := typesOf(in.mods)
	if len(ts) == 0 {
		return false
	}
	t := ts[len(ts)-1]
	switch in.op {
	case "cvt":
		t = ts[0]
	case "mov", "ld", "ldu", "selp", "shfl", "atom", "cvta", "setp", "set", "testp":
		return false
	}
	return t == tF16 || t == tBF16 || t == tF16x2 || t == tBF16x2
}

// byteStoreOfHalf says whether an 8-bit store stores a register whose
// value may come from a half-precision instruction (one whose write
// reaches the store). ptxas then stores something other
// than the register's low byte (the value converted to an integer, as
// far as the recording shows: 1.0 stores 1): st.shared.b8 of a
// sub.rn.sat.f16 (seed 1599 of the version-3 corpus), st.local.b8 and
// st.shared.u8 of a cvt.rn/rz.bf16.f32 (3974, 1026).
func (c *fcomp) byteStoreOfHalf(t ptype, src operand) bool {
	if t.size() != 1 {
		return false
	}
	regs := []operand{src}
	if src.kind == oVec {
		regs = src.elems
	}
	for _, o := range regs {
		if o.kind != oReg {
			continue
		}
		ds, _ := c.reaching(o.name, c.at)
		for _, d := range ds {
			if halfWriter(d) {
				return true
			}
		}
	}
	return false
}

// refuseAlways fails the launch with CUDA_ERROR_NOT_SUPPORTED on the
// first lane that runs the instruction.
func refuseAlways(why string) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		if m != 0 {
			w.fail(cu.ErrorNotSupported, in, "%s", why)
		}
	}
}

// cnotFed says whether a cnot's write of operand o may reach the
// instruction being compiled. ptxas keeps a cnot's result as a truth
// value and rebuilds it for each reader, and some readers then see the
// truth value rather than the bits 0 or 1: cvt.rni.s32.f16 of a cnot's 1
// gives 1, as an integer would, where the half 0x0001 rounds to 0
// (seed 601 of the version-3 corpus; cvt.f32.f16 seed 436 of version 1),
// and shr.s16 by a cnot's 1 gave 0 for 0x47 (seed 3704; shl.b16 seed 368
// of version 1). The emulator refuses those readers' lanes where the
// cnot gave 1.
func (c *fcomp) cnotFed(o operand) bool {
	if o.kind != oReg {
		return false
	}
	ds, _ := c.reaching(o.name, c.at)
	for _, d := range ds {
		if d.op == "cnot" {
			return true
		}
	}
	return false
}

const cnotWhy = "operand %#x from a cnot: ptxas rebuilds a cnot's result for this reader, which then sees a truth value rather than the bits; the emulator cannot follow that"
