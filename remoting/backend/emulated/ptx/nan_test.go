package ptx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Double results with NaN operands, as an H200 computed them in the
// generated corpus (e2e/ptxgen, version 2; the seed's instruction trace
// gives the operands). A zero want means the device's result depends on
// ptxas's register allocation, and the emulator refuses it.
func TestNaN64(t *testing.T) {
	const refused = 0
	for _, c := range []struct {
		seed    int
		op      string
		a, b, c uint64
		want    uint64
	}{
		// one NaN operand: it comes through quieted, sign and payload kept
		{0, "add", 0x7ff0000000000789, 0x3ff8000000000000, 0, 0x7ff8000000000789},
		{0, "mul", 0x3ff8000000000000, 0xfff4000000000abc, 0, 0xfffc000000000abc},
		{240, "fma", 0x3d4d800000000001, 0xfff8000000000000, 0x3fb0d00000000000, 0xfff8000000000000},
		{0, "max", 0x7ff8000000000123, 0x3ff8000000000000, 0, 0x3ff8000000000000},
		// no NaN operand: the default NaN
		{0, "add", 0x7ff0000000000000, 0xfff0000000000000, 0, 0xfff8000000000000},
		// two equal NaNs: that NaN, whichever ptxas chose
		{0, "sub", 0x7ff0000000000789, 0x7ff8000000000789, 0, 0x7ff8000000000789},
		{0, "fma", 0xffffffffffffffad, 0x3ff0000000000000, 0xffffffffffffffad, 0xffffffffffffffad},
		{0, "min", 0x7ff8000000000123, 0x7ff8000000000123, 0, 0x7ff8000000000123},
		// two different NaNs: the device returned the first operand's in
		// these kernels and the second's in as many others of the same
		// shape (seeds 20, 42, 48, 69; the probe nan-order)
		{8, "mul", 0xffffffffffffff7e, 0xfffe100000000000, 0, refused},
		{20, "sub", 0xffffffffffffffb2, 0xfff8000000000000, 0, refused},
		{42, "min", 0xffffffffffffffff, 0xfffe040000000000, 0, refused},
		{69, "max", 0xffffffffffffffb2, 0xfffab80000000000, 0, refused},
		{29, "fma", 0xfff8000000000000, 0xffffffff26b1a7f7, 0x3fb0d00000000000, refused},
		{240, "fma", 0xfff8000000000000, 0x3d4d800000000001, 0xffffffff667f3bcd, refused},
		// two equal signalling NaNs in max: ptxas may prove the operands
		// equal and make it a move, which keeps the NaN signalling
		{2393, "max", 0x7ff4000000000001, 0x7ff4000000000001, 0, refused},
	} {
		name := fmt.Sprintf("seed%d/%s/%#x,%#x,%#x", c.seed, c.op, c.a, c.b, c.c)
		t.Run(name, func(t *testing.T) {
			var got uint64
			var ok bool
			if c.op == "fma" {
				got, ok = fma64Fn(nil)(c.a, c.b, c.c)
			} else {
				got, ok = float64Binary(c.op, nil)(c.a, c.b)
			}
			switch {
			case c.want == refused && ok:
				t.Errorf("got %#x; want a refusal", got)
			case c.want != refused && !ok:
				t.Errorf("refused; want %#x", c.want)
			case ok && got != c.want:
				t.Errorf("got %#x; want %#x", got, c.want)
			}
		})
	}
}

// A kernel that meets two different NaNs in a double operation fails
// with CUDA_ERROR_NOT_SUPPORTED naming the instruction, rather than
// return either.
func TestNaN64Refused(t *testing.T) {
	src := `.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 p)
{
	.reg .b64 %a;
	.reg .f64 %x, %y, %z;
	ld.param.u64 %a, [p];
	ld.global.f64 %x, [%a];
	ld.global.f64 %y, [%a+8];
	add.rn.f64 %z, %x, %y;
	st.global.f64 [%a+16], %z;
	ret;
}
`
	m, err := Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	f := mustFunc(t, m, "k")
	run := func(x, y uint64) ([]byte, error) {
		mem := newTestMem()
		a := mem.alloc(24)
		binary.LittleEndian.PutUint64(mem.bytes(a), x)
		binary.LittleEndian.PutUint64(mem.bytes(a)[8:], y)
		err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Params: params(t, f, a)}, mem, 1)
		return mem.bytes(a)[16:24], err
	}
	out, err := run(0x7ff8000000000123, 0x3ff0000000000000)
	if err != nil || binary.LittleEndian.Uint64(out) != 0x7ff8000000000123 {
		t.Fatalf("one NaN: %#x, %v; want 0x7ff8000000000123", out, err)
	}
	_, err = run(0x7ff8000000000123, 0xfff8000000000456)
	var ce *cu.Error
	if !errors.As(err, &ce) || ce.Code != cu.ErrorNotSupported || !strings.Contains(err.Error(), "add.rn.f64 %z, %x, %y") {
		t.Fatalf("two NaNs: %v; want CUDA_ERROR_NOT_SUPPORTED naming add.rn.f64", err)
	}
}

// bfi.b32 with a constant position and length, as an H200 computed it in
// the generated corpus (version 2; operands from the seed's instruction
// trace).
func TestBfiConstants(t *testing.T) {
	for _, c := range []struct {
		seed          int
		a, b          uint64
		pos, ln, want uint64
	}{
		{64, 0x4495, 0x8000800d, 20, 69, 0x8150800d},      // 69 inserts 5 bits
		{422, 0x80000000, 0x51785cf4, 26, 64, 0x51785cf4}, // 64 inserts nothing
		{525, 0xa7802786, 0x0, 3, 32, 0x0},                // 32 inserts nothing
		{829, 0x7297ffff, 0x0, 23, 65, 0x800000},
		{1139, 0x65fccdd4, 0xae39c208, 6, 67, 0xae39c308},
		{2122, 0x9, 0x9b97f17c, 4, 68, 0x9b97f19c},
		{3096, 0xc4539bf4, 0xc4539bf4, 1, 66, 0xc4539bf0},
		{903, 0xff800001, 0x0, 8, 55, 0x80000100}, // byte-aligned: to the top bit
		{1463, 0x7fff7fff, 0xfff00000, 0, 36, 0x7fff7fff},
		{1792, 0x9, 0x580ea01f, 8, 41, 0x91f},
		{3390, 0xe3, 0xffffffff, 0, 56, 0xe3},
		{3466, 0x1c99, 0xdb1a7fb6, 16, 36, 0x1c997fb6},
		{3501, 0x569023dc, 0x435c0aaa, 16, 35, 0x23dc0aaa},
		{0, 0x12345678, 0x9abcdef0, 16, 64, 0x5678def0}, // the probe: byte-aligned, to the top bit
		{0, 0x12345678, 0x9abcdef0, 70, 3, 0x9abcdef0},
	} {
		ln, ok := bfiConstLen(c.pos, c.ln)
		if !ok {
			t.Errorf("seed %d: bfi.b32 pos %d len %d refused", c.seed, c.pos, c.ln)
			continue
		}
		if got := bfi(tB32)(c.a, c.b, c.pos, ln); got != c.want {
			t.Errorf("seed %d: bfi.b32 %#x, %#x, %d, %d = %#x; the device gave %#x", c.seed, c.a, c.b, c.pos, c.ln, got, c.want)
		}
	}
	// Shapes no recording established are refused.
	for _, pl := range [][2]uint64{{1, 70}, {3, 100}, {31, 255}} {
		if _, ok := bfiConstLen(pl[0], pl[1]); ok {
			t.Errorf("bfi.b32 pos %d len %d: not refused", pl[0], pl[1])
		}
	}
}

// Shapes whose result on an H200 depends on how ptxas rewrote the code
// around them, each seen in the version-2 corpus (e2e/ptxgen): the
// emulator refuses the operand values for which that matters, and only
// them, with CUDA_ERROR_NOT_SUPPORTED naming the instruction.
func TestRefusedShapes(t *testing.T) {
	for _, c := range []struct {
		name    string
		seed    int    // the corpus kernel that showed it
		body    string // reads %f1/%r1 (from a), writes the stored register
		res     string
		a       uint64
		refused bool
	}{
		// a neg.f32 read by a select: ptxas folds it, and the select
		// passes the operand's NaN with its sign changed
		{"neg.f32 of NaN read by selp", 852, "neg.f32 %f4, %f1; setp.eq.u32 %p3, %r1, 0; selp.f32 %f3, %f4, %f1, %p3;", "f3", 0x7fc00001, true},
		{"neg.f32 of a number read by selp", 852, "neg.f32 %f4, %f1; setp.eq.u32 %p3, %r1, 0; selp.f32 %f3, %f4, %f1, %p3;", "f3", 0x3f800000, false},
		// read by a conversion to double, and by another neg
		{"abs.f32 of NaN read by cvt.f64.f32", 2679, "abs.f32 %f4, %f1; cvt.f64.f32 %fd1, %f4; cvt.rn.f32.f64 %f3, %fd1;", "f3", 0xffc00123, true},
		{"neg.f32 of NaN read by neg", 1211, "neg.f32 %f4, %f1; neg.f32 %f3, %f4;", "f3", 0x7fffffff, true},
		// only arithmetic and stores read it: the canonical NaN, established
		{"neg.f32 of NaN read by add", 0, "neg.f32 %f4, %f1; add.f32 %f3, %f4, %f1;", "f3", 0x7fc00001, false},
		{"neg.f32 of NaN stored", 0, "neg.f32 %f3, %f1;", "f3", 0x7fc00001, false},
		// a guarded instruction whose guard is false keeps the register
		{"neg.f32 of NaN kept by a guarded write", 3314, "neg.f32 %f3, %f1; setp.eq.u32 %p3, %r1, 0; @%p3 sub.rz.f32 %f3, %f1, 0f40500000;", "f3", 0x7fc12345, true},
		// 16-bit neg and abs of -32768 stay +32768 in ptxas's 32-bit register
		{"abs.s16 of -32768", 2486, "cvt.u16.u32 %rs1, %r1; abs.s16 %rs3, %rs1; cvt.s32.s16 %r3, %rs3;", "r3", 0x8000, true},
		{"neg.s16 of -32768", 2301, "cvt.u16.u32 %rs1, %r1; neg.s16 %rs3, %rs1; cvt.s32.s16 %r3, %rs3;", "r3", 0x8000, true},
		{"abs.s16 of -32767", 2486, "cvt.u16.u32 %rs1, %r1; abs.s16 %rs3, %rs1; cvt.s32.s16 %r3, %rs3;", "r3", 0x8001, false},
		// ptxas assumes abs is not negative (a slct on it takes the first operand)
		{"abs.s32 of INT_MIN as a slct selector", 518, "abs.s32 %r4, %r1; slct.u32.s32 %r3, 1, 2, %r4;", "r3", 0x80000000, true},
		{"abs.s32 of INT_MIN stored", 0, "abs.s32 %r3, %r1;", "r3", 0x80000000, false},
		{"neg.s32 of INT_MIN", 0, "neg.s32 %r3, %r1;", "r3", 0x80000000, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := snippet(t, c.body, c.res, splat(c.a), splat(c.a))
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
