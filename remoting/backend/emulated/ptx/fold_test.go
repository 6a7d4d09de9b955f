package ptx

import (
	"errors"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// What an H200 computed where ptxas folded an operand through the
// instruction that wrote it, as the version-3 corpus (e2e/ptxgen)
// recorded it, and the same instructions without the fold, which follow
// the ISA. %r1/%f1 hold a and %r2 holds b in every lane.
func TestPtxasFolds(t *testing.T) {
	const loop = "mov.u32 %r5, 0; $Lf: add.u32 %r5, %r5, 1; setp.lt.u32 %p5, %r5, 3; @%p5 bra $Lf;"
	for _, c := range []struct {
		name string
		seed int
		body string
		res  string
		a, b uint64
		want uint64
	}{
		// a register only ever holding a constant folds as the constant
		{"bfe.s32 position in a register holding 50", 1795, "mov.u32 %r4, 50; bfe.s32 %r3, %r1, %r4, 54;", "r3", 0x3f6cbf41, 0, 0xffffffff},
		{"bfe.s32 position 50 computed", 0, "and.b32 %r4, %r2, 255; bfe.s32 %r3, %r1, %r4, 54;", "r3", 0x3f6cbf41, 50, 0},
		// a constant f16 NaN converts to double through single precision's canonical NaN
		{"cvt.f64.f16 of a constant NaN", 914, "mov.s16 %rs4, -23; cvt.f64.f16 %fd3, %rs4;", "fd3", 0, 0, 0x7fffffffe0000000},
		{"cvt.f64.f16 of a constant NaN across a loop, written again later", 2934, "mov.s16 %rs4, -1;" + loop + "cvt.f64.f16 %fd3, %rs4; mov.s16 %rs4, 0;", "fd3", 0, 0, 0x7fffffffe0000000},
		{"cvt.f64.f16 of a NaN that is not a constant", 0, "cvt.u16.u32 %rs4, %r1; cvt.f64.f16 %fd3, %rs4;", "fd3", 0xffe9, 0, 0xffffa40000000000},
		{"cvt.f64.f16 of a NaN a loop may overwrite", 0, "mov.s16 %rs4, -23; mov.u32 %r5, 0; $Lg: cvt.f64.f16 %fd3, %rs4; cvt.u16.u32 %rs4, %r1; add.u32 %r5, %r5, 1; setp.lt.u32 %p5, %r5, 3; @%p5 bra $Lg;", "fd3", 0xffe9, 0, 0xffffa40000000000},
		// max of a register and its copy is a move, the NaN unchanged
		{"max.f16 of a register and its selp copy", 3088, "cvt.u16.u32 %rs1, %r1; setp.eq.u32 %p4, %r2, 0; selp.b16 %rs4, %rs1, %rs1, %p4; max.f16 %rs3, %rs1, %rs4;", "rs3", 0xfffe, 0, 0xfffe},
		{"max.f16 of two registers equal by value", 0, "cvt.u16.u32 %rs1, %r1; cvt.u16.u32 %rs4, %r1; max.f16 %rs3, %rs1, %rs4;", "rs3", 0xfffe, 0, 0x7fff},
		// .ftz flushes a result that is tiny before it is rounded to 2^-126
		{"mul.rn.ftz.f32 tiny, rounding to -2^-126", 1978, "mul.rn.ftz.f32 %f3, %f1, 0f80800000;", "f3", 0x3f7fffff, 0, 0x80000000},
		{"mul.rn.f32 the same, without .ftz", 0, "mul.rn.f32 %f3, %f1, 0f80800000;", "f3", 0x3f7fffff, 0, 0x80800000},
		{"mul.rn.ftz.f32 rounding up to 2^-126 is not tiny", 0, "mul.rn.ftz.f32 %f3, %f1, 0f00800001;", "f3", 0x3f7ffffe, 0, 0x00800000},
		{"mul.rp.ftz.f32 just below 2^-126 is tiny", 0, "mul.rp.ftz.f32 %f3, %f1, 0f00800000;", "f3", 0x3f7fffff, 0, 0},
		{"mul.rn.ftz.f32 NaN", 0, "mul.rn.ftz.f32 %f3, %f1, 0f00800000;", "f3", 0x7fc00000, 0, 0x7fffffff},
		// shl.b64 by an immediate of cvt.s64.u32 shifts the value sign-extended
		{"shl.b64 by 1 of cvt.s64.u32 with bit 31 set", 1395, "cvt.s64.u32 %rd4, %r1; shl.b64 %rd3, %rd4, 1;", "rd3", 0xc54388db, 0, 0xffffffff8a8711b6},
		{"shl.b64 by 31 of cvt.s64.u32 with bit 31 set", 1395, "cvt.s64.u32 %rd4, %r1; shl.b64 %rd3, %rd4, 31;", "rd3", 0xffffffff, 0, 0xffffffff80000000},
		{"shl.b64 by 32 of cvt.s64.u32: the extension is shifted out", 1395, "cvt.s64.u32 %rd4, %r1; shl.b64 %rd3, %rd4, 32;", "rd3", 0xc54388db, 0, 0xc54388db00000000},
		{"shl.b64 by 1 of cvt.s64.u32 with bit 31 clear", 1395, "cvt.s64.u32 %rd4, %r1; shl.b64 %rd3, %rd4, 1;", "rd3", 0x55555555, 0, 0xaaaaaaaa},
		{"shl.b64 by a register of cvt.s64.u32", 0, "cvt.s64.u32 %rd4, %r1; and.b32 %r4, %r2, 63; shl.b64 %rd3, %rd4, %r4;", "rd3", 0xc54388db, 1, 0x18a8711b6},
		{"shl.b64 by 1 of cvt.u64.u32", 0, "cvt.u64.u32 %rd4, %r1; shl.b64 %rd3, %rd4, 1;", "rd3", 0xc54388db, 0, 0x18a8711b6},
		{"shl.b64 by 1 of cvt.s64.u16", 0, "cvt.u16.u32 %rs4, %r1; cvt.s64.u16 %rd4, %rs4; shl.b64 %rd3, %rd4, 1;", "rd3", 0x8000, 0, 0x10000},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := snippet(t, c.body, c.res, splat(c.a), splat(c.b))
			if err != nil {
				t.Fatalf("seed %d: %v", c.seed, err)
			}
			if got[0] != c.want {
				t.Fatalf("seed %d: got %#x, want %#x", c.seed, got[0], c.want)
			}
		})
	}
}

// Shapes the version-3 corpus showed ptxas rewriting so that an H200's
// result is not the ISA's and not one the emulator can reproduce: they
// are refused (CUDA_ERROR_NOT_SUPPORTED) for the operand values where it
// matters, and only there.
func TestRefusedFolds(t *testing.T) {
	const half = "cvt.u16.u32 %rs1, %r1; "
	for _, c := range []struct {
		name    string
		seed    int
		body    string
		a, b    uint64
		refused bool
	}{
		// a + (b - a) saturating: the device returns b
		{"add.sat.s32 across a sub, saturating", 838, "sub.s32 %r4, %r2, %r1; add.sat.s32 %r3, %r1, %r4;", 0x91233ed4, 0x3fffffff, true},
		{"add.sat.s32 across a sub, in range", 838, "sub.s32 %r4, %r2, %r1; add.sat.s32 %r3, %r1, %r4;", 5, 7, false},
		{"sub.sat.s32 across an add.cc, saturating", 3986, "add.cc.u32 %r4, %r2, %r1; sub.sat.s32 %r3, %r1, %r4;", 0x7fc17fc1, 0x3a10f219, true},
		{"add.sat.s32 across a sub of a register changed since", 0, "sub.s32 %r4, %r2, %r1; add.u32 %r1, %r1, 1; add.sat.s32 %r3, %r1, %r4;", 0x91233ed4, 0x3fffffff, false},
		{"add.sat.s32 of unrelated registers, saturating", 0, "add.sat.s32 %r3, %r1, %r2;", 0x91233ed4, 0xaedcc12b, false},
		// rem.s32 of abs.s32 of INT_MIN: the device takes an unsigned remainder
		{"rem.s32 of abs.s32 of INT_MIN", 2851, "abs.s32 %r4, %r1; rem.s32 %r3, %r4, %r2;", 0x80000000, 0x44370000, true},
		{"rem.s32 of abs.s32 of -5", 2851, "abs.s32 %r4, %r1; rem.s32 %r3, %r4, %r2;", 0xfffffffb, 0x44370000, false},
		{"rem.u32 of abs.s32 of INT_MIN", 0, "abs.s32 %r4, %r1; rem.u32 %r3, %r4, %r2;", 0x80000000, 0x44370000, false},
		// an 8-bit store of a half-precision result stores something else
		{"st.shared.b8 of sub.rn.sat.f16", 1599, half + "sub.rn.sat.f16 %rs4, %rs1, %rs1; st.shared.b8 [sm], %rs4; ld.shared.u8 %r3, [sm];", 0x3c00, 0, true},
		{"st.shared.u8 of a guarded cvt.rz.bf16.f32", 1026, "setp.ne.u32 %p4, %r2, 0; cvt.u16.u32 %rs4, %r1; @%p4 cvt.rz.bf16.f32 %rs4, %f1; st.shared.u8 [sm], %rs4; ld.shared.u8 %r3, [sm];", 0x2ec30e56, 1, true},
		{"st.shared.b16 of sub.rn.sat.f16", 0, half + "sub.rn.sat.f16 %rs4, %rs1, %rs1; st.shared.b16 [sm], %rs4; ld.shared.u8 %r3, [sm];", 0x3c00, 0, false},
		{"st.shared.b8 of an integer overwriting a half result", 0, half + "sub.rn.sat.f16 %rs4, %rs1, %rs1; add.u16 %rs4, %rs1, 1; st.shared.b8 [sm], %rs4; ld.shared.u8 %r3, [sm];", 0x3c00, 0, false},
		// a cnot's result read as a half or as a 16-bit shift
		{"cvt.rni.s32.f16 of a cnot's 1", 601, "cvt.u16.u32 %rs1, %r1; cnot.b16 %rs4, %rs1; cvt.rni.s32.f16 %r3, %rs4;", 0, 0, true},
		{"cvt.rni.s32.f16 of a cnot's 0", 601, "cvt.u16.u32 %rs1, %r1; cnot.b16 %rs4, %rs1; cvt.rni.s32.f16 %r3, %rs4;", 5, 0, false},
		{"shr.s16 by a cnot's 1", 3704, "cvt.u16.u32 %rs1, %r1; cnot.b32 %r4, %r2; shr.s16 %rs3, %rs1, %r4; cvt.u32.u16 %r3, %rs3;", 0x47, 0, true},
		{"shr.s32 by a cnot's 1", 0, "cnot.b32 %r4, %r2; shr.s32 %r3, %r1, %r4;", 0x47, 0, false},
		// sqrt.ftz of a set.f32 whose comparison a flush makes true: ptxas
		// rebuilds the square root around the flushed comparison
		{"sqrt.rz.ftz of set.ge 0 >= a subnormal", 598, "set.ge.f32.f32 %f4, %f1, %f2; sqrt.rz.ftz.f32 %f5, %f4; mov.b32 %r3, %f5;", 0, 0x47, true},
		{"sqrt.rn.ftz of set.ge -subnormal >= 0", 598, "set.ge.f32.f32 %f4, %f1, %f2; sqrt.rn.ftz.f32 %f5, %f4; mov.b32 %r3, %f5;", 0x80000001, 0, true},
		{"sqrt.rz.ftz of a guarded set.ge 0 >= a subnormal", 598, "setp.eq.u32 %p4, %r15, %r15; @%p4 set.ge.f32.f32 %f4, %f1, %f2; sqrt.rz.ftz.f32 %f5, %f4; mov.b32 %r3, %f5;", 0, 0x47, true},
		{"sqrt.rz.ftz of set.ge 0 >= a normal", 598, "set.ge.f32.f32 %f4, %f1, %f2; sqrt.rz.ftz.f32 %f5, %f4; mov.b32 %r3, %f5;", 0, 0x3f800000, false},
		{"sqrt.rz.ftz of set.ne a subnormal != 0: the flush makes it false", 0, "set.ne.f32.f32 %f4, %f1, %f2; sqrt.rz.ftz.f32 %f5, %f4; mov.b32 %r3, %f5;", 1, 0, false},
		{"sqrt.rz without .ftz of set.ge 0 >= a subnormal", 0, "set.ge.f32.f32 %f4, %f1, %f2; sqrt.rz.f32 %f5, %f4; mov.b32 %r3, %f5;", 0, 0x47, false},
		{"sqrt.approx.ftz of set.ge 0 >= a subnormal", 0, "set.ge.f32.f32 %f4, %f1, %f2; sqrt.approx.ftz.f32 %f5, %f4; mov.b32 %r3, %f5;", 0, 0x47, false},
		{"add.ftz of set.ge 0 >= a subnormal", 0, "set.ge.f32.f32 %f4, %f1, %f2; add.ftz.f32 %f5, %f4, %f4; mov.b32 %r3, %f5;", 0, 0x47, false},
		{"sqrt.rz.ftz of set.ge.ftz 0 >= a subnormal", 0, "set.ge.ftz.f32.f32 %f4, %f1, %f2; sqrt.rz.ftz.f32 %f5, %f4; mov.b32 %r3, %f5;", 0, 0x47, false},
		{"sqrt.rz.ftz of a set.ge overwritten before it", 0, "set.ge.f32.f32 %f4, %f1, %f2; mov.b32 %f4, %r2; sqrt.rz.ftz.f32 %f5, %f4; mov.b32 %r3, %f5;", 0, 0x47, false},
		// shl.b64 of a register cvt.s64.u32 may have written
		{"shl.b64 by 1 of a guarded cvt.s64.u32 with bit 31 set", 1395, "setp.ne.u32 %p4, %r2, 0; cvt.u64.u32 %rd4, %r2; @%p4 cvt.s64.u32 %rd4, %r1; shl.b64 %rd5, %rd4, 1; cvt.u32.u64 %r3, %rd5;", 0xc54388db, 1, true},
		{"shl.b64 by 1 of a guarded cvt.s64.u32 with bit 31 clear", 1395, "setp.ne.u32 %p4, %r2, 0; cvt.u64.u32 %rd4, %r2; @%p4 cvt.s64.u32 %rd4, %r1; shl.b64 %rd5, %rd4, 1; cvt.u32.u64 %r3, %rd5;", 0x45438db, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := snippet(t, c.body, "r3", splat(c.a), splat(c.b))
			var ce *cu.Error
			refused := errors.As(err, &ce) && ce.Code == cu.ErrorNotSupported
			if err != nil && !refused {
				t.Fatalf("seed %d: %v", c.seed, err)
			}
			if refused != c.refused {
				t.Fatalf("seed %d: refused %v (%v), want %v", c.seed, refused, err, c.refused)
			}
		})
	}
}
