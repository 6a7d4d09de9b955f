package ptx

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"testing"
)

// The PTX ISA lets ld, st and cvt use registers wider than the
// instruction's type ("Operand Size Exceeding Instruction-Type Size",
// tables 27 and 28): a wider source is truncated to the type, and a result
// written into a wider destination is sign-extended for signed types and
// zero-extended otherwise. These tests run every type pair the tables
// allow, in every state space and vector width, and hold the emulator to
// a model written from the tables rather than from the interpreter.

var (
	memTypes = []ptype{tB8, tB16, tB32, tB64, tU8, tU16, tU32, tU64, tS8, tS16, tS32, tS64, tF32, tF64}
	regTypes = []ptype{tB16, tB32, tB64, tU16, tU32, tU64, tS16, tS32, tS64, tF32, tF64}
	intTypes = []ptype{tU8, tU16, tU32, tU64, tS8, tS16, tS32, tS64}
)

func isBitType(t ptype) bool { return t >= tB8 && t <= tB128 }

// widthOK says whether register type r may hold the data of an ld, st or
// cvt of type t: the register is at least as wide, and floating-point
// types meet only themselves or bit-size types (notes 1 and 4 of both
// tables).
func widthOK(t, r ptype) bool {
	if r.size() < t.size() {
		return false
	}
	switch {
	case t.float():
		return r == t || isBitType(r)
	case r.float():
		return isBitType(t)
	}
	return true
}

// extendTo is table 28's rule: the low t.bits() of v, sign-extended for a
// signed instruction type and zero-extended otherwise, to r's width.
func extendTo(v uint64, t, r ptype) uint64 {
	v &= t.mask()
	if t.signed() && v>>(t.bits()-1)&1 == 1 {
		v |= ^t.mask()
	}
	return v & r.mask()
}

// pattern is the 16 bytes the load tests read: every byte has its high bit
// set in one half and clear in the other, so sign and zero extension
// differ at every width.
var pattern = [16]byte{0x81, 0xf2, 0x83, 0xa4, 0x95, 0xe6, 0xb7, 0xc8, 0x19, 0x2a, 0x3b, 0x4c, 0x5d, 0x6e, 0x7f, 0x70}

// widthKernel runs a one-thread kernel k(in, out, blob[16]) whose body
// declares what it needs, and returns out.
func widthKernel(t *testing.T, decls, body string, in []byte, outLen int, blob []byte) []byte {
	t.Helper()
	src := fmt.Sprintf(`.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_in, .param .u64 k_out, .param .align 16 .b8 k_blob[16])
{
	.reg .b64 %%a<4>;
	.reg .b64 %%s<4>;
	.shared .align 16 .b8 sh[16];
	.local .align 16 .b8 lo[16];
%s
	ld.param.u64 %%a0, [k_in];
	ld.param.u64 %%a1, [k_out];
%s
	ret;
}
`, decls, body)
	m, err := Load([]byte(src))
	if err != nil {
		t.Fatalf("Load: %v\n%s", err, src)
	}
	f := mustFunc(t, m, "k")
	mem := newTestMem()
	ia, oa := mem.alloc(len(in)), mem.alloc(outLen)
	copy(mem.bytes(ia), in)
	p := params(t, f, ia, oa, uint64(0))
	copy(p[16:32], blob)
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Params: p}, mem, 1); err != nil {
		t.Fatalf("run: %v\n%s", err, src)
	}
	return append([]byte(nil), mem.bytes(oa)[:outLen]...)
}

func vecMod(n int) string {
	if n == 1 {
		return ""
	}
	return fmt.Sprintf(".v%d", n)
}

func regList(prefix string, n int) string {
	if n == 1 {
		return prefix + "0"
	}
	var s []string
	for i := 0; i < n; i++ {
		s = append(s, fmt.Sprintf("%s%d", prefix, i))
	}
	return "{" + strings.Join(s, ", ") + "}"
}

func leUint(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestLoadWidths: ld.T into every register type table 28 allows, in every
// state space, scalar and vector.
func TestLoadWidths(t *testing.T) {
	spaces := []struct{ name, stage, addr, op string }{
		{"global", "", "[%a0]", "ld.global"},
		{"global_nc", "", "[%a0]", "ld.global.nc"},
		{"generic_global", "", "[%a0]", "ld"},
		{"shared", "st.shared.b64 [sh], %s0;\n\tst.shared.b64 [sh+8], %s1;", "[sh]", "ld.shared"},
		{"generic_shared", "st.shared.b64 [sh], %s0;\n\tst.shared.b64 [sh+8], %s1;\n\tcvta.shared.u64 %a2, sh;", "[%a2]", "ld"},
		{"local", "st.local.b64 [lo], %s0;\n\tst.local.b64 [lo+8], %s1;", "[lo]", "ld.local"},
		{"param", "", "[k_blob]", "ld.param"},
	}
	n := 0
	for _, mt := range memTypes {
		for _, rt := range regTypes {
			if !widthOK(mt, rt) {
				continue
			}
			for _, vec := range []int{1, 2, 4} {
				if mt.size()*vec > 16 {
					continue
				}
				for _, sp := range spaces {
					name := fmt.Sprintf("%s%s.%s/%s", sp.op, vecMod(vec), mt, rt)
					t.Run(name, func(t *testing.T) {
						decls := fmt.Sprintf("\t.reg .%s %%v<4>;", rt)
						body := fmt.Sprintf("\tld.global.b64 %%s0, [%%a0];\n\tld.global.b64 %%s1, [%%a0+8];\n\t%s\n\t%s%s.%s %s, %s;\n",
							sp.stage, sp.op, vecMod(vec), mt, regList("%v", vec), sp.addr)
						for i := 0; i < vec; i++ {
							body += fmt.Sprintf("\tst.global.b%d [%%a1+%d], %%v%d;\n", rt.bits(), i*rt.size(), i)
						}
						out := widthKernel(t, decls, body, pattern[:], vec*rt.size(), pattern[:])
						for i := 0; i < vec; i++ {
							raw := leUint(pattern[i*mt.size() : (i+1)*mt.size()])
							want := extendTo(raw, mt, rt)
							got := leUint(out[i*rt.size() : (i+1)*rt.size()])
							if got != want {
								t.Errorf("element %d: register holds %#x, want %#x (memory %#x)", i, got, want, raw)
							}
						}
					})
					n++
				}
			}
		}
	}
	t.Logf("%d load forms", n)
}

// TestStoreWidths: st.T from every register type table 27 allows writes
// exactly the low T bits of each register and nothing around them.
func TestStoreWidths(t *testing.T) {
	const sentinel = 0xa5
	spaces := []struct{ name, pre, addr, op, post string }{
		{"global", "", "[%a1]", "st.global", ""},
		{"generic_global", "", "[%a1]", "st", ""},
		{"shared", "st.shared.b64 [sh], %s2;\n\tst.shared.b64 [sh+8], %s2;", "[sh]", "st.shared",
			"ld.shared.b64 %s0, [sh];\n\tld.shared.b64 %s1, [sh+8];\n\tst.global.b64 [%a1], %s0;\n\tst.global.b64 [%a1+8], %s1;"},
		{"generic_shared", "st.shared.b64 [sh], %s2;\n\tst.shared.b64 [sh+8], %s2;\n\tcvta.shared.u64 %a2, sh;", "[%a2]", "st",
			"ld.shared.b64 %s0, [sh];\n\tld.shared.b64 %s1, [sh+8];\n\tst.global.b64 [%a1], %s0;\n\tst.global.b64 [%a1+8], %s1;"},
		{"local", "st.local.b64 [lo], %s2;\n\tst.local.b64 [lo+8], %s2;", "[lo]", "st.local",
			"ld.local.b64 %s0, [lo];\n\tld.local.b64 %s1, [lo+8];\n\tst.global.b64 [%a1], %s0;\n\tst.global.b64 [%a1+8], %s1;"},
	}
	// Register i holds regVals[i], wider than any narrow type's range.
	regVals := []uint64{0x8877665544332211, 0xf1e2d3c4b5a69788, 0x0123456789abcdef, 0xfedcba9876543210}
	in := make([]byte, 48)
	for i, v := range regVals {
		binary.LittleEndian.PutUint64(in[8*i:], v)
	}
	for i := 32; i < 48; i++ {
		in[i] = sentinel
	}
	for _, mt := range memTypes {
		for _, rt := range regTypes {
			if !widthOK(mt, rt) {
				continue
			}
			for _, vec := range []int{1, 2, 4} {
				if mt.size()*vec > 16 {
					continue
				}
				for _, sp := range spaces {
					t.Run(fmt.Sprintf("%s%s.%s/%s", sp.op, vecMod(vec), mt, rt), func(t *testing.T) {
						decls := fmt.Sprintf("\t.reg .%s %%v<4>;", rt)
						body := "\tld.global.b64 %s2, [%a0+32];\n"
						if sp.name == "global" || sp.name == "generic_global" {
							body += "\tst.global.b64 [%a1], %s2;\n\tst.global.b64 [%a1+8], %s2;\n"
						}
						for i := 0; i < vec; i++ {
							body += fmt.Sprintf("\tld.global.b%d %%v%d, [%%a0+%d];\n", rt.bits(), i, 8*i)
						}
						body += fmt.Sprintf("\t%s\n\t%s%s.%s %s, %s;\n\t%s\n", sp.pre, sp.op, vecMod(vec), mt, sp.addr, regList("%v", vec), sp.post)
						out := widthKernel(t, decls, body, in, 16, nil)
						want := make([]byte, 16)
						for i := range want {
							want[i] = sentinel
						}
						for i := 0; i < vec; i++ {
							v := regVals[i] & rt.mask()
							for j := 0; j < mt.size(); j++ {
								want[i*mt.size()+j] = byte(v >> (8 * j))
							}
						}
						if string(out) != string(want) {
							t.Errorf("memory % x, want % x", out, want)
						}
					})
				}
			}
		}
	}
}

// regOfWidth is a register type of the given width, varying its flavour
// (bit, unsigned, signed) with k: the flavour must not matter.
func regOfWidth(bits uint, k int) ptype {
	flavours := map[uint][]ptype{16: {tB16, tU16, tS16}, 32: {tB32, tU32, tS32}, 64: {tB64, tU64, tS64}}
	f := flavours[bits]
	return f[k%len(f)]
}

// cvtIntModel converts the integer in the low bits of a register per the
// ISA: truncate to the source type and read it with the source's
// signedness, clamp under .sat, keep the destination type's bits and
// extend them to the destination register.
func cvtIntModel(reg uint64, dt, st, rd ptype, sat bool) uint64 {
	v := reg & st.mask()
	neg := false
	if st.signed() && v>>(st.bits()-1)&1 == 1 {
		v |= ^st.mask()
		neg = true
	}
	if sat {
		switch {
		case dt.signed():
			hi := int64(dt.mask() >> 1)
			lo := -hi - 1
			switch {
			case neg && int64(v) < lo:
				v = uint64(lo)
			case !neg && v > uint64(hi):
				v = uint64(hi)
			}
		case neg:
			v = 0
		case v > dt.mask():
			v = dt.mask()
		}
	}
	return extendTo(v, dt, rd)
}

var widthInputs = []uint64{0, 1, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x10000, 0x7fffffff, 0x80000000,
	0xffffffff, 0x100000000, 0x7fffffffffffffff, 0x8000000000000000, 0xffffffffffffffff, 0xffffffffffffff80,
	0xffffffffffff8000, 0xffffffff80000000, 0x12345678deadbeef, 0xfedcba9876543210, 0x00000000fffffffe,
	0x000000000000fffe, 0xfffffffffffffffe, 0x123, 0xabcdef, 0x80008000, 0x7fff7fff, 0x8181818181818181,
	0x0101010101010101, 0x5555aaaa5555aaaa}

// TestCvtIntWidths: every integer conversion pair, with and without .sat,
// from source registers wider than the source type (the excess must be
// ignored) into destination registers wider than the destination type
// (the result must be extended per its signedness).
func TestCvtIntWidths(t *testing.T) {
	k := 0
	for _, dt := range intTypes {
		for _, st := range intTypes {
			for _, rsBits := range []uint{16, 32, 64} {
				for _, rdBits := range []uint{16, 32, 64} {
					if rsBits < st.bits() || rdBits < dt.bits() {
						continue
					}
					for _, sat := range []bool{false, true} {
						k++
						rs, rd := regOfWidth(rsBits, k), regOfWidth(rdBits, k+1)
						mod := ""
						if sat {
							mod = ".sat"
						}
						name := fmt.Sprintf("cvt%s.%s.%s/%s<-%s", mod, dt, st, rd, rs)
						t.Run(name, func(t *testing.T) {
							body := fmt.Sprintf("cvt.u%d.u64 %%rs_, %%rd1;\n\tcvt%s.%s.%s %%rd_, %%rs_;\n\tcvt.u64.u%d %%rd3, %%rd_;",
								rsBits, mod, dt, st, rdBits)
							if rsBits == 64 {
								body = strings.Replace(body, "cvt.u64.u64 %rs_, %rd1;", "mov.b64 %rs_, %rd1;", 1)
							}
							if rdBits == 64 {
								body = strings.Replace(body, "cvt.u64.u64 %rd3, %rd_;", "mov.b64 %rd3, %rd_;", 1)
							}
							body = fmt.Sprintf("{\n\t.reg .%s %%rs_;\n\t.reg .%s %%rd_;\n\t%s\n\t}", rs, rd, body)
							got, err := snippet(t, body, "rd3", widthInputs, nil)
							if err != nil {
								t.Fatal(err)
							}
							for l, a := range widthInputs {
								if want := cvtIntModel(a&rs.mask(), dt, st, rd, sat); got[l] != want {
									t.Fatalf("register %#x: got %#x, want %#x", a&rs.mask(), got[l], want)
								}
							}
						})
					}
				}
			}
		}
	}
}

// TestCvtFloatNarrowInt: float-to-integer conversions into narrow types
// saturate, and land sign- or zero-extended in wider registers;
// narrow-integer-to-float conversions ignore the register's excess bits.
func TestCvtFloatNarrowInt(t *testing.T) {
	floats := []float32{0, -0.0, 1.5, -1.5, 127.9, 128.2, -128.7, -129.5, 255.5, 256.5, 32767.5, 32768.5, -32768.9,
		-32769.5, 65535.4, 65536.5, -2.5e9, 4.5e9, float32(math.Inf(1)), float32(math.Inf(-1)), float32(math.NaN()),
		1e-40, -1e-40, 3.4e38, -3.4e38, 100, -100, 0.99, -0.99, 7e4, -7e4, 2.1e9}
	in := make([]uint64, len(floats))
	for i, f := range floats {
		in[i] = uint64(math.Float32bits(f))
	}
	for k, dt := range []ptype{tS8, tU8, tS16, tU16, tS32, tU32} {
		for _, rdBits := range []uint{16, 32, 64} {
			if rdBits < dt.bits() {
				continue
			}
			rd := regOfWidth(rdBits, k)
			t.Run(fmt.Sprintf("cvt.rzi.%s.f32/%s", dt, rd), func(t *testing.T) {
				store := fmt.Sprintf("cvt.u64.u%d %%rd3, %%d_;", rdBits)
				if rdBits == 64 {
					store = "mov.b64 %rd3, %d_;"
				}
				body := fmt.Sprintf("{\n\t.reg .%s %%d_;\n\tcvt.rzi.%s.f32 %%d_, %%f1;\n\t%s\n\t}", rd, dt, store)
				got, err := snippet(t, body, "rd3", in, nil)
				if err != nil {
					t.Fatal(err)
				}
				for l, f := range floats {
					x := math.Trunc(float64(f))
					var v int64
					switch {
					case f != f:
						v = 0
					case dt.signed():
						hi := float64(int64(1)<<(dt.bits()-1) - 1)
						v = int64(math.Max(math.Min(x, hi), -hi-1))
					default:
						v = int64(math.Max(math.Min(x, float64(dt.mask())), 0))
					}
					if want := extendTo(uint64(v), dt, rd); got[l] != want {
						t.Fatalf("%g: got %#x, want %#x", f, got[l], want)
					}
				}
			})
		}
	}
	for k, st := range []ptype{tS8, tU8, tS16, tU16} {
		for _, rsBits := range []uint{16, 32} {
			rs := regOfWidth(rsBits, k)
			t.Run(fmt.Sprintf("cvt.rn.f32.%s/%s", st, rs), func(t *testing.T) {
				body := fmt.Sprintf("{\n\t.reg .%s %%s_;\n\tcvt.u%d.u64 %%s_, %%rd1;\n\tcvt.rn.f32.%s %%f3, %%s_;\n\t}", rs, rsBits, st)
				got, err := snippet(t, body, "f3", widthInputs, nil)
				if err != nil {
					t.Fatal(err)
				}
				for l, a := range widthInputs {
					v := a & st.mask()
					if st.signed() {
						v = sext(v, st.bits())
					}
					want := uint64(math.Float32bits(float32(int64(v))))
					if !st.signed() {
						want = uint64(math.Float32bits(float32(v)))
					}
					if got[l] != want {
						t.Fatalf("register %#x: got %#x, want %#x", a, got[l], want)
					}
				}
			})
		}
	}
}

// TestMovTypes: mov between registers of one size keeps every bit, for
// every type the size admits, and narrow immediates are truncated to the
// type.
func TestMovTypes(t *testing.T) {
	bySize := map[int][]ptype{2: {tB16, tU16, tS16}, 4: {tB32, tU32, tS32, tF32}, 8: {tB64, tU64, tS64, tF64}}
	for size, types := range bySize {
		for _, it := range types {
			for _, dr := range types {
				for _, sr := range types {
					if it.float() && (dr != it && !isBitType(dr) || sr != it && !isBitType(sr)) {
						continue
					}
					t.Run(fmt.Sprintf("mov.%s/%s<-%s", it, dr, sr), func(t *testing.T) {
						bits := size * 8
						load, store := fmt.Sprintf("cvt.u%d.u64 %%s_, %%rd1;", bits), fmt.Sprintf("cvt.u64.u%d %%rd3, %%d_;", bits)
						if bits == 64 {
							load, store = "mov.b64 %s_, %rd1;", "mov.b64 %rd3, %d_;"
						}
						if sr.float() {
							load = fmt.Sprintf("{\n\t.reg .b%d %%t_;\n\t%s\n\tmov.b%d %%s_, %%t_;\n\t}", bits, strings.Replace(load, "%s_", "%t_", 1), bits)
						}
						if dr.float() {
							store = fmt.Sprintf("{\n\t.reg .b%d %%t_;\n\tmov.b%d %%t_, %%d_;\n\t%s\n\t}", bits, bits, strings.Replace(store, "%d_", "%t_", 1))
						}
						body := fmt.Sprintf("{\n\t.reg .%s %%s_;\n\t.reg .%s %%d_;\n\t%s\n\tmov.%s %%d_, %%s_;\n\t%s\n\t}", sr, dr, load, it, store)
						got, err := snippet(t, body, "rd3", widthInputs, nil)
						if err != nil {
							t.Fatal(err)
						}
						for l, a := range widthInputs {
							if want := a & it.mask(); got[l] != want {
								t.Fatalf("%#x: got %#x, want %#x", a, got[l], want)
							}
						}
					})
				}
			}
		}
	}
	imms := []struct {
		body string
		want uint64
	}{
		{"{\n\t.reg .s16 %h;\n\tmov.s16 %h, -1;\n\tcvt.u64.u16 %rd3, %h;\n\t}", 0xffff},
		{"{\n\t.reg .u16 %h;\n\tmov.u16 %h, 0x12345;\n\tcvt.u64.u16 %rd3, %h;\n\t}", 0x2345},
		{"mov.s32 %r3, -2;\n\tcvt.u64.u32 %rd3, %r3;", 0xfffffffe},
		{"mov.b32 %r3, 0x1ffffffff;\n\tcvt.u64.u32 %rd3, %r3;", 0xffffffff},
		{"mov.s64 %rd3, -2;", 0xfffffffffffffffe},
	}
	for i, c := range imms {
		t.Run(fmt.Sprintf("immediate%d", i), func(t *testing.T) {
			got, err := snippet(t, c.body, "rd3", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got[0] != c.want {
				t.Fatalf("got %#x, want %#x", got[0], c.want)
			}
		})
	}
}

// TestSignedLoadIntoWideAccumulator is the kernel that found this class
// of bug: nvcc sums ints into a 64-bit accumulator with
// `ld.global.s32 %rd, [addr]`, and the emulator zero-extended the load.
func TestSignedLoadIntoWideAccumulator(t *testing.T) {
	src := `.version 8.0
.target sm_90
.address_size 64
.visible .entry sum64(.param .u64 in, .param .u64 out, .param .u32 n)
{
	.reg .pred %p<2>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<8>;
	.shared .align 8 .b8 acc[8];
	ld.param.u64 %rd1, [in];
	ld.param.u64 %rd2, [out];
	ld.param.u32 %r1, [n];
	mov.b64 %rd3, 0;
	mov.b32 %r2, 0;
$L_loop:
	setp.ge.u32 %p1, %r2, %r1;
	@%p1 bra $L_done;
	mul.wide.u32 %rd4, %r2, 4;
	add.s64 %rd5, %rd1, %rd4;
	ld.global.s32 %rd6, [%rd5];
	add.s64 %rd3, %rd3, %rd6;
	add.s32 %r2, %r2, 1;
	bra $L_loop;
$L_done:
	st.shared.u64 [acc], %rd3;
	ld.shared.s32 %rd7, [acc];
	st.global.u64 [%rd2], %rd3;
	st.global.u64 [%rd2+8], %rd7;
	ret;
}
`
	m, err := Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	f := mustFunc(t, m, "sum64")
	mem := newTestMem()
	vals := []int32{5, -7, 100, -2147483648, 2147483647, -1, 8040}
	ia, oa := mem.alloc(4*len(vals)), mem.alloc(16)
	var want int64
	for i, v := range vals {
		binary.LittleEndian.PutUint32(mem.bytes(ia)[4*i:], uint32(v))
		want += int64(v)
	}
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1},
		Params: params(t, f, ia, oa, uint32(len(vals)))}, mem, 1); err != nil {
		t.Fatal(err)
	}
	ob := mem.bytes(oa)
	if got := int64(binary.LittleEndian.Uint64(ob)); got != want {
		t.Errorf("sum = %d, want %d", got, want)
	}
	if got, w := int64(binary.LittleEndian.Uint64(ob[8:])), int64(int32(want)); got != w {
		t.Errorf("ld.shared.s32 into a 64-bit register = %#x, want %#x", got, w)
	}
}
