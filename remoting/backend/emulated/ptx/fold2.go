package ptx

import (
	"math/bits"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// More of ptxas's rewrites that the generated corpus (e2e/ptxgen) shows an
// H200 computing otherwise than the ISA says; see fold.go.

// setReadByFtz says whether the result of set (a set with a .f32
// destination, writing register name) may reach an instruction with .ftz
// that reads it. ptxas keeps such a set as the comparison and rebuilds
// the reader around it, and the comparison then flushes subnormal
// operands as the reader's .ftz does: sqrt.rz.ftz.f32 of set.ge's 0.0
// from 0 >= a positive subnormal gave the canonical NaN (seed 598 of the
// version-3 corpus), the result of a square root's fast path given the 0
// the flushed comparison said was 1.0.
func (c *fcomp) setReadByFtz(set *instr, name string) bool {
	for i, s := range c.body {
		if s.kind != stInstr || s.in == set || s.in.op != "sqrt" || hasMod(s.in.mods, "approx") || !hasMod(s.in.mods, "ftz") || !readsReg(s.in, name) {
			continue
		}
		ds, _ := c.reaching(name, i)
		for _, d := range ds {
			if d == set {
				return true
			}
		}
	}
	return false
}

// readsReg says whether an instruction reads register name as a source
// operand (its operands after the first, vector elements included).
func readsReg(in *instr, name string) bool {
	for _, o := range in.args[min(1, len(in.args)):] {
		if o.kind == oReg && o.name == name {
			return true
		}
		for _, e := range o.elems {
			if e.kind == oReg && e.name == name {
				return true
			}
		}
	}
	return false
}

const setFtzWhy = "operands %#x and %#x compare otherwise once subnormals are flushed: this set's result is read by an instruction with .ftz, which ptxas rebuilds around the comparison, flushed; the emulator cannot follow that"

func refuseSetFtz(w *warp, in *inst, p, q uint64) {
	w.fail(cu.ErrorNotSupported, in, setFtzWhy, p, q)
}

// setRefuseFtz is a set's execFn that refuses the lanes whose comparison
// changes when subnormal operands are flushed (setReadByFtz).
func setRefuseFtz(set, flushed func(p, q, r uint64) uint64) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		d, a, b, c := int(in.d)*warpSize, int(in.a)*warpSize, int(in.b)*warpSize, int(in.c)*warpSize
		for ; m != 0; m &= m - 1 {
			l := bits.TrailingZeros32(m)
			v := set(r[a+l], r[b+l], r[c+l])
			if v == 0 && flushed(r[a+l], r[b+l], r[c+l]) != 0 {
				refuseSetFtz(w, in, r[a+l], r[b+l])
			}
			r[d+l] = v
		}
	}
}

// zextToSigned says whether operand o may come from a conversion of an
// unsigned 32-bit value to .s64 (cvt.s64.u32), and whether that
// conversion is the only write of it that reaches the instruction being
// compiled.
func (c *fcomp) zextToSigned(o operand) (may, only bool) {
	if o.kind != oReg {
		return false, false
	}
	isZext := func(d *instr) bool {
		ts := typesOf(d.mods)
		return d.op == "cvt" && len(ts) == 2 && ts[0] == tS64 && ts[1] == tU32
	}
	ds, entry := c.reaching(o.name, c.at)
	for _, d := range ds {
		if isZext(d) {
			may = true
		}
	}
	return may, may && !entry && len(ds) == 1 && ds[0].guard == ""
}

// constOfReg says whether operand o is a register ptxas knows to hold a
// constant (constOf).
func (c *fcomp) constOfReg(o operand) bool {
	_, ok := c.constOf(o)
	return o.kind == oReg && ok
}

// shlOfZext compiles shl.b64 by a constant of a register that cvt.s64.u32
// wrote. ptxas folds the pair into one wide shift that extends the 32-bit
// value by the destination type's sign: shl.b64 by 1 of cvt.s64.u32 of
// 0xc54388db gives 0xffffffff8a8711b6 where the register holds
// 0x00000000c54388db (seed 1395 of the version-3 corpus; the probe
// shl-zext shows it for shifts by 1, 4 and 31 of every value with bit 31
// set, and not for a shift by a register, by 32, or of cvt.s64.u16). With
// an immediate amount and the conversion the only write of the operand
// that reaches the shift, the emulator does the same; where another write
// may reach it, or the amount is a register holding a constant, it
// refuses the lanes whose result would differ.
func (c *fcomp) shlOfZext(src, amt operand) (execFn, bool) {
	may, only := c.zextToSigned(src)
	if !may {
		return nil, false
	}
	isa := intBinary("shl", tB64, nil)
	differs := func(p, q uint64) bool { return p>>31 == 1 && q&0xffffffff < 32 }
	if only && amt.kind != oReg {
		return bin(func(p, q uint64) uint64 {
			if differs(p, q) {
				return uint64(int64(int32(uint32(p))) << (q & 0xffffffff))
			}
			return isa(p, q)
		}), true
	}
	return binRefuse(isa, differs, zextWhy), true
}

const zextWhy = "operands %#x and %#x: the shifted value may come from cvt.s64.u32 with bit 31 set, which ptxas folds into the shift as if sign-extended (bits 32 and up differ for shifts below 32); the emulator cannot tell whether it did"
