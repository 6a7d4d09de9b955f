package ptx

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
	"strings"
	"testing"
)

// snippet runs body in every lane of one warp. Lane l starts with
// %rd1 = a[l], %rd2 = b[l] and the 32-bit views %r1/%r2, %f1/%f2, the
// 64-bit float views %fd1/%fd2, and %r15 = %tid.x. The body leaves its result in the
// register named by res (r3, rd3, f3, fd3 or p3), which is returned per lane.
func snippet(t *testing.T, body, res string, a, b []uint64) ([]uint64, error) {
	t.Helper()
	var store string
	switch res {
	case "r3":
		store = "cvt.u64.u32 %rd3, %r3;"
	case "f3":
		store = "mov.b32 %r3, %f3;\n\tcvt.u64.u32 %rd3, %r3;"
	case "fd3":
		store = "mov.b64 %rd3, %fd3;"
	case "p3":
		store = "selp.u64 %rd3, 1, 0, %p3;"
	case "rs3":
		store = "cvt.u64.u16 %rd3, %rs3;"
	case "rd3":
	default:
		t.Fatalf("bad result register %q", res)
	}
	src := fmt.Sprintf(`.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_in, .param .u64 k_out)
{
	.reg .pred %%p<8>;
	.reg .b16 %%rs<8>;
	.reg .b32 %%r<16>;
	.reg .f32 %%f<16>;
	.reg .b64 %%rd<16>;
	.reg .f64 %%fd<16>;
	.shared .align 8 .b8 sm[512];
	ld.param.u64 %%rd10, [k_in];
	ld.param.u64 %%rd11, [k_out];
	mov.u32 %%r15, %%tid.x;
	mul.wide.u32 %%rd12, %%r15, 8;
	add.s64 %%rd13, %%rd10, %%rd12;
	ld.global.u64 %%rd1, [%%rd13];
	ld.global.u64 %%rd2, [%%rd13+256];
	cvt.u32.u64 %%r1, %%rd1;
	cvt.u32.u64 %%r2, %%rd2;
	mov.b32 %%f1, %%r1;
	mov.b32 %%f2, %%r2;
	mov.b64 %%fd1, %%rd1;
	mov.b64 %%fd2, %%rd2;
	mov.b64 %%rd3, 0;
	%s
	%s
	add.s64 %%rd14, %%rd11, %%rd12;
	st.global.u64 [%%rd14], %%rd3;
	ret;
}
`, body, store)
	m, err := Load([]byte(src))
	if err != nil {
		t.Fatalf("Load: %v\n%s", err, src)
	}
	f := mustFunc(t, m, "k")
	mem := newTestMem()
	in, out := mem.alloc(512), mem.alloc(256)
	ib := mem.bytes(in)
	for l := 0; l < 32; l++ {
		if l < len(a) {
			binary.LittleEndian.PutUint64(ib[8*l:], a[l])
		}
		if l < len(b) {
			binary.LittleEndian.PutUint64(ib[256+8*l:], b[l])
		}
	}
	err = f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Params: params(t, f, in, out)}, mem, 1)
	ob := mem.bytes(out)
	got := make([]uint64, 32)
	for l := range got {
		got[l] = binary.LittleEndian.Uint64(ob[8*l:])
	}
	return got, err
}

func lanes32(f func(l int) uint64) []uint64 {
	out := make([]uint64, 32)
	for l := range out {
		out[l] = f(l)
	}
	return out
}

func fb(x float32) uint64     { return uint64(math.Float32bits(x)) }
func db(x float64) uint64     { return math.Float64bits(x) }
func u32v(x int32) uint64     { return uint64(uint32(x)) }
func splat(v uint64) []uint64 { return lanes32(func(int) uint64 { return v }) }

type insnCase struct {
	name string
	body string
	res  string
	a, b []uint64
	want func(a, b uint64, lane int) uint64
}

func runInsnCases(t *testing.T, cases []insnCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tc.a, tc.b
			if a == nil {
				a = lanes32(func(l int) uint64 { return uint64(l) })
			}
			if b == nil {
				b = splat(0)
			}
			a = append(append([]uint64(nil), a...), make([]uint64, 32)...)[:32]
			b = append(append([]uint64(nil), b...), make([]uint64, 32)...)[:32]
			got, err := snippet(t, tc.body, tc.res, a, b)
			if err != nil {
				t.Fatalf("run: %v", err)
			}
			for l := 0; l < 32; l++ {
				if w := tc.want(a[l], b[l], l); got[l] != w {
					t.Fatalf("lane %d: a=%#x b=%#x: got %#x, want %#x", l, a[l], b[l], got[l], w)
				}
			}
		})
	}
}

var mixed32 = []uint64{0, 1, 2, 3, 7, 31, 32, 33, 0x7fffffff, 0x80000000, 0x80000001, 0xffffffff, 0xfffffffe,
	100, 1000, 12345678, 0xdeadbeef, 0x12345678, 5, 6, 9, 10, 64, 255, 256, 0xffff, 0x10000, 17, 0x55555555, 0xaaaaaaaa, 4, 8}
var mixed32b = []uint64{1, 2, 3, 0xffffffff, 2, 5, 31, 32, 2, 0x80000000, 0xffffffff, 0, 7, 9, 33, 0x10000, 3, 0xffff,
	13, 0x7fffffff, 1, 0, 64, 8, 16, 255, 0xffff, 1, 4, 3, 0xfffffff0, 40}

func TestIntegerInstructions(t *testing.T) {
	s := func(x uint64) int32 { return int32(uint32(x)) }
	runInsnCases(t, []insnCase{
		{"add.s32", "add.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return uint64(uint32(a + b)) }},
		{"add.sat.s32", "add.sat.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return sat32(int64(s(a)) + int64(s(b))) }},
		{"sub.s32", "sub.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return uint64(uint32(a - b)) }},
		{"mul.lo.s32", "mul.lo.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return uint64(uint32(a * b)) }},
		{"mul.hi.s32", "mul.hi.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			return uint64(uint32((int64(s(a)) * int64(s(b))) >> 32))
		}},
		{"mul.hi.u32", "mul.hi.u32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return (a * b) >> 32 }},
		{"mul.wide.s32", "mul.wide.s32 %rd3, %r1, %r2;", "rd3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return uint64(int64(s(a)) * int64(s(b))) }},
		{"mul.wide.u32", "mul.wide.u32 %rd3, %r1, %r2;", "rd3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return a * b }},
		{"mul.hi.u64", "mul.hi.u64 %rd3, %rd1, %rd2;", "rd3", []uint64{1 << 63, ^uint64(0), 3}, []uint64{4, ^uint64(0), 5}, func(a, b uint64, _ int) uint64 {
			h, _ := bits.Mul64(a, b)
			return h
		}},
		{"mul.hi.s64", "mul.hi.s64 %rd3, %rd1, %rd2;", "rd3", []uint64{1 << 63, ^uint64(0), 3, uint64(1<<62 + 5)}, []uint64{4, ^uint64(0), ^uint64(4), uint64(1<<40 + 3)}, func(a, b uint64, _ int) uint64 {
			x, y := int64(a), int64(b)
			hi, lo := bits.Mul64(uint64(x), uint64(y))
			_ = lo
			if x < 0 {
				hi -= uint64(y)
			}
			if y < 0 {
				hi -= uint64(x)
			}
			return hi
		}},
		{"mad.lo.s32", "mad.lo.s32 %r3, %r1, %r2, %r15;", "r3", mixed32, mixed32b, func(a, b uint64, l int) uint64 { return uint64(uint32(a*b + uint64(l))) }},
		{"mad.wide.u32", "mad.wide.u32 %rd3, %r1, %r2, %rd1;", "rd3", mixed32, mixed32b, func(a, b uint64, l int) uint64 { return a*b + a }},
		{"div.s32", "div.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if s(b) == 0 {
				return 0xffffffff
			}
			if s(b) == -1 {
				return uint64(uint32(-s(a)))
			}
			return uint64(uint32(s(a) / s(b)))
		}},
		{"div.u32", "div.u32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if b == 0 {
				return 0xffffffff
			}
			return a / b
		}},
		{"rem.s32", "rem.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if s(b) == 0 {
				return a
			}
			if s(b) == -1 {
				return 0
			}
			return uint64(uint32(s(a) % s(b)))
		}},
		{"rem.u64", "rem.u64 %rd3, %rd1, %rd2;", "rd3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if b == 0 {
				return a
			}
			return a % b
		}},
		{"min.s32", "min.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return uint64(uint32(min(s(a), s(b)))) }},
		{"max.u32", "max.u32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return max(a, b) }},
		{"abs.s32", "abs.s32 %r3, %r1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 {
			v := s(a)
			if v < 0 {
				v = -v
			}
			return uint64(uint32(v))
		}},
		{"neg.s32", "neg.s32 %r3, %r1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return uint64(uint32(-a)) }},
		{"and/or/xor/not", "and.b32 %r4, %r1, %r2; or.b32 %r5, %r1, %r2; xor.b32 %r6, %r4, %r5; not.b32 %r3, %r6;", "r3", mixed32, mixed32b,
			func(a, b uint64, _ int) uint64 { return uint64(^uint32((a & b) ^ (a | b))) }},
		{"shl.b32", "shl.b32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if uint32(b) >= 32 {
				return 0
			}
			return uint64(uint32(a) << b)
		}},
		{"shr.s32", "shr.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			return uint64(uint32(s(a) >> min(uint32(b), 31)))
		}},
		{"shr.u32", "shr.u32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if uint32(b) >= 32 {
				return 0
			}
			return uint64(uint32(a) >> b)
		}},
		{"shl.b64", "shl.b64 %rd3, %rd1, %r2;", "rd3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if uint32(b) >= 64 {
				return 0
			}
			return a << b
		}},
		{"popc.b32", "popc.b32 %r3, %r1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return uint64(bits.OnesCount32(uint32(a))) }},
		{"clz.b32", "clz.b32 %r3, %r1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return uint64(bits.LeadingZeros32(uint32(a))) }},
		{"clz.b64", "clz.b64 %r3, %rd1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return uint64(bits.LeadingZeros64(a)) }},
		{"brev.b32", "brev.b32 %r3, %r1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return uint64(bits.Reverse32(uint32(a))) }},
		{"popc.b64", "popc.b64 %r3, %rd1;", "r3", []uint64{^uint64(0), 1 << 40, 3}, nil, func(a, b uint64, _ int) uint64 { return uint64(bits.OnesCount64(a)) }},
		{"bfind.u32", "bfind.u32 %r3, %r1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 {
			if uint32(a) == 0 {
				return 0xffffffff
			}
			return uint64(31 - bits.LeadingZeros32(uint32(a)))
		}},
		{"bfe.u32", "bfe.u32 %r3, %r1, 4, 8;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return a >> 4 & 0xff }},
		{"bfe.s32", "bfe.s32 %r3, %r1, 24, 8;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return uint64(uint32(int32(uint32(a)) >> 24)) }},
		{"bfi.b32", "bfi.b32 %r3, %r2, %r1, 8, 12;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			m := uint64(0xfff << 8)
			return (a &^ m) | (b<<8)&m
		}},
		{"prmt.b32", "prmt.b32 %r3, %r1, %r2, 0x7351;", "r3", []uint64{0x44332211}, []uint64{0x88776655}, func(a, b uint64, l int) uint64 {
			if l == 0 {
				return 0x88446622
			}
			src := b<<32 | a
			bt := func(i uint) uint64 { return src >> (8 * i) & 0xff }
			return bt(1) | bt(5)<<8 | bt(3)<<16 | bt(7)<<24
		}},
		{"prmt sign", "prmt.b32 %r3, %r1, %r2, 0x8888;", "r3", []uint64{0x80, 0x7f}, nil, func(a, b uint64, l int) uint64 {
			if a&0x80 != 0 {
				return 0xffffffff
			}
			return 0
		}},
		{"shf.l.wrap", "shf.l.wrap.b32 %r3, %r1, %r2, 5;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			return uint64(uint32((b<<32 | a) << 5 >> 32))
		}},
		{"shf.r.clamp", "shf.r.clamp.b32 %r3, %r1, %r2, 40;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return b }},
		{"lop3", "lop3.b32 %r3, %r1, %r2, %r15, 0x96;", "r3", mixed32, mixed32b, func(a, b uint64, l int) uint64 { return uint64(uint32(a ^ b ^ uint64(l))) }},
		{"selp", "setp.lt.u32 %p1, %r1, %r2; selp.b32 %r3, 7, 9, %p1;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if a < b {
				return 7
			}
			return 9
		}},
		{"setp.and", "setp.lt.s32 %p1, %r1, 100; setp.gt.s32.and %p3, %r1, 5, %p1;", "p3", mixed32, nil, func(a, b uint64, _ int) uint64 {
			return b2u(s(a) < 100 && s(a) > 5)
		}},
		{"setp pair", "setp.lo.u32 %p1|%p3, %r1, %r2;", "p3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return b2u(!(a < b)) }},
		{"not.pred and !p", "setp.eq.s32 %p1, %r1, 3; and.pred %p3, %p1, !%p1; or.pred %p3, %p3, !%p1;", "p3", mixed32, nil, func(a, b uint64, _ int) uint64 { return b2u(a != 3) }},
		{"set.lt.u32.s32", "set.lt.u32.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if int32(uint32(a)) < int32(uint32(b)) {
				return 0xffffffff
			}
			return 0
		}},
		{"set.ge.f32.u32", "set.ge.f32.u32 %f3, %r1, %r2;", "f3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if a >= b {
				return fb(1)
			}
			return 0
		}},
		{"vector shared v4 round trip", `mul.wide.u32 %rd4, %r15, 16; mov.u64 %rd5, sm; add.s64 %rd6, %rd5, %rd4;
			add.s32 %r4, %r1, 1; add.s32 %r5, %r1, 2; add.s32 %r6, %r1, 3;
			st.shared.v4.u32 [%rd6], {%r1, %r4, %r5, %r6}; ld.shared.v4.u32 {%r7, %r8, %r9, %r10}, [%rd6];
			add.s32 %r11, %r7, %r8; add.s32 %r12, %r9, %r10; add.s32 %r3, %r11, %r12;`, "r3", nil, nil,
			func(a, b uint64, l int) uint64 { return uint64(4*l + 6) }},
		{"local v2 through generic", `.local .align 8 .b8 dep[16]; mov.u64 %rd4, dep; cvta.local.u64 %rd5, %rd4;
			st.v2.u32 [%rd5+8], {%r1, %r2}; ld.local.v2.u32 {%r7, %r8}, [%rd4+8]; sub.s32 %r3, %r7, %r8;`, "r3", mixed32, mixed32b,
			func(a, b uint64, _ int) uint64 { return uint64(uint32(a - b)) }},
		{"slct.s32", "slct.u32.s32 %r3, 1, 2, %r1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 {
			if s(a) >= 0 {
				return 1
			}
			return 2
		}},
		{"sad", "sad.u32 %r3, %r1, %r2, 3;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			if a > b {
				return uint64(uint32(a - b + 3))
			}
			return uint64(uint32(b - a + 3))
		}},
		{"dp4a", "dp4a.s32.s32 %r3, %r1, %r2, 10;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			acc := int32(10)
			for i := 0; i < 4; i++ {
				acc += int32(int8(a>>(8*i))) * int32(int8(b>>(8*i)))
			}
			return uint64(uint32(acc))
		}},
		{"mov pack/unpack", "mov.b64 {%r4, %r5}, %rd1; mov.b64 %rd3, {%r5, %r4};", "rd3", []uint64{0x1122334455667788}, nil, func(a, b uint64, _ int) uint64 {
			return a<<32 | a>>32
		}},
		{"mov b32 halves", "mov.b32 {%rs1, %rs2}, %r1; mov.b32 %r3, {%rs2, %rs1};", "r3", []uint64{0xaabbccdd}, nil, func(a, b uint64, _ int) uint64 {
			return uint64(uint32(a<<16 | a>>16&0xffff))
		}},
		{"cnot", "cnot.b32 %r3, %r1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return b2u(uint32(a) == 0) }},
		{"bmsk.clamp", "bmsk.clamp.b32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			p, n := min(uint32(a), 32), min(uint32(b), 32)
			return (uint64(1)<<n - 1) << p & 0xffffffff
		}},
		{"szext.wrap.s32", "szext.wrap.s32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 {
			n := uint32(b) & 31
			if n == 0 {
				return 0
			}
			return uint64(uint32(int32(uint32(a)<<(32-n)) >> (32 - n)))
		}},
		{"mul24", "mul24.lo.u32 %r3, %r1, %r2;", "r3", mixed32, mixed32b, func(a, b uint64, _ int) uint64 { return uint64(uint32((a & 0xffffff) * (b & 0xffffff))) }},
	})
}

func TestConversions(t *testing.T) {
	fs := []float32{0, 1.5, -1.5, 2.5, -2.5, 3.49, 1e10, -1e10, float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0.5, -0.5, 255.9, 256, -129, 4e9, 2147483520, -2147483648}
	fsBits := make([]uint64, len(fs))
	for i, f := range fs {
		fsBits[i] = fb(f)
	}
	conv := func(f float32, mode string, lo, hi float64) uint64 {
		x := float64(f)
		if x != x {
			return 0
		}
		switch mode {
		case "rzi":
			x = math.Trunc(x)
		case "rni":
			x = math.RoundToEven(x)
		case "rmi":
			x = math.Floor(x)
		case "rpi":
			x = math.Ceil(x)
		}
		return uint64(int64(max(min(x, hi), lo)))
	}
	f32at := func(a uint64) float32 { return math.Float32frombits(uint32(a)) }
	runInsnCases(t, []insnCase{
		{"cvt.rzi.s32.f32", "cvt.rzi.s32.f32 %r3, %f1;", "r3", fsBits, nil, func(a, b uint64, _ int) uint64 {
			return conv(f32at(a), "rzi", math.MinInt32, math.MaxInt32) & 0xffffffff
		}},
		{"cvt.rni.s32.f32", "cvt.rni.s32.f32 %r3, %f1;", "r3", fsBits, nil, func(a, b uint64, _ int) uint64 {
			return conv(f32at(a), "rni", math.MinInt32, math.MaxInt32) & 0xffffffff
		}},
		{"cvt.rmi.s32.f32", "cvt.rmi.s32.f32 %r3, %f1;", "r3", fsBits, nil, func(a, b uint64, _ int) uint64 {
			return conv(f32at(a), "rmi", math.MinInt32, math.MaxInt32) & 0xffffffff
		}},
		{"cvt.rpi.u32.f32", "cvt.rpi.u32.f32 %r3, %f1;", "r3", fsBits, nil, func(a, b uint64, _ int) uint64 {
			return conv(f32at(a), "rpi", 0, math.MaxUint32) & 0xffffffff
		}},
		{"cvt.rzi.u8.f32", "cvt.rzi.u8.f32 %rs3, %f1;", "rs3", fsBits, nil, func(a, b uint64, _ int) uint64 {
			return conv(f32at(a), "rzi", 0, 255)
		}},
		{"cvt.rn.f32.s32", "cvt.rn.f32.s32 %f3, %r1;", "f3", mixed32, nil, func(a, b uint64, _ int) uint64 { return fb(float32(int32(uint32(a)))) }},
		{"cvt.rz.f32.u32", "cvt.rz.f32.u32 %f3, %r1;", "f3", mixed32, nil, func(a, b uint64, _ int) uint64 {
			f := float32(uint32(a))
			if float64(f) > float64(uint32(a)) {
				f = math.Nextafter32(f, 0)
			}
			return fb(f)
		}},
		{"cvt.rn.f32.u64", "cvt.rn.f32.u64 %f3, %rd1;", "f3", []uint64{^uint64(0), 1<<63 + 1<<39 + 1, 12345}, nil, func(a, b uint64, _ int) uint64 { return fb(float32(a)) }},
		{"cvt.f64.f32", "cvt.f64.f32 %fd3, %f1;", "fd3", fsBits, nil, func(a, b uint64, _ int) uint64 {
			f := f32at(a)
			if f != f {
				return db(float64(f))
			}
			return db(float64(f))
		}},
		{"cvt.rn.f32.f64", "cvt.rn.f32.f64 %f3, %fd1;", "f3", []uint64{db(1.0000001), db(math.Pi), db(1e300), db(-1e-300), db(0.1)}, nil, func(a, b uint64, _ int) uint64 {
			return b32(float32(math.Float64frombits(a)))
		}},
		{"cvt.s64.s32", "cvt.s64.s32 %rd3, %r1;", "rd3", mixed32, nil, func(a, b uint64, _ int) uint64 { return uint64(int64(int32(uint32(a)))) }},
		{"cvt.u32.u64", "cvt.u32.u64 %r3, %rd1;", "r3", []uint64{1<<40 + 5}, nil, func(a, b uint64, _ int) uint64 { return a & 0xffffffff }},
		{"cvt.s8.s32 sext", "cvt.s8.s32 %rs1, %r1; cvt.s32.s8 %r3, %rs1;", "r3", mixed32, nil, func(a, b uint64, _ int) uint64 { return uint64(uint32(int32(int8(a)))) }},
		{"cvt.sat.u8.s32", "cvt.sat.u8.s32 %rs3, %r1;", "rs3", mixed32, nil, func(a, b uint64, _ int) uint64 {
			return uint64(max(min(int32(uint32(a)), 255), 0))
		}},
		{"cvt.rn.f16.f32 round trip", "cvt.rn.f16.f32 %rs1, %f1; cvt.f32.f16 %f3, %rs1;", "f3", []uint64{fb(1), fb(0.1), fb(65504), fb(1e6), fb(-2.5e-5), fb(6e-8)}, nil,
			func(a, b uint64, _ int) uint64 {
				return map[uint64]uint64{fb(1): fb(1), fb(0.1): fb(0.0999755859375), fb(65504): fb(65504), fb(1e6): fb(float32(math.Inf(1))),
					fb(-2.5e-5): fb(-419 * 0x1p-24), fb(6e-8): fb(5.960464477539063e-08), 0: 0}[a]
			}},
		{"cvt.rni.f32.f32", "cvt.rni.f32.f32 %f3, %f1;", "f3", fsBits, nil, func(a, b uint64, _ int) uint64 {
			return b32(float32(math.RoundToEven(float64(f32at(a)))))
		}},
		{"cvt.sat.f32.f32", "cvt.sat.f32.f32 %f3, %f1;", "f3", fsBits, nil, func(a, b uint64, _ int) uint64 {
			return fb(float32(sat01(float64(f32at(a)))))
		}},
		{"cvt.rpi.u64.f32 NaN", "cvt.rpi.u64.f32 %rd3, %f1;", "rd3", []uint64{fb(float32(math.NaN())), fb(3.5), fb(-2)}, nil, func(a, b uint64, _ int) uint64 {
			switch x := math.Float32frombits(uint32(a)); {
			case x != x:
				return 1 << 63 // as the hardware does for 64-bit results
			case x < 0:
				return 0
			default:
				return uint64(math.Ceil(float64(x)))
			}
		}},
		{"cvt.rzi.s64.f64", "cvt.rzi.s64.f64 %rd3, %fd1;", "rd3", []uint64{db(1e19), db(-1e19), db(-3.7), db(math.NaN())}, nil, func(a, b uint64, _ int) uint64 {
			x := math.Float64frombits(a)
			switch {
			case x != x:
				return 1 << 63
			case x >= 9.3e18:
				return math.MaxInt64
			case x <= -9.3e18:
				return 1 << 63
			}
			return uint64(int64(x))
		}},
		{"cvta shared round trip", "mul.wide.u32 %rd6, %r15, 4; mov.u64 %rd4, sm; cvta.shared.u64 %rd5, %rd4; add.s64 %rd7, %rd5, %rd6; st.u32 [%rd7], %r1; mov.u32 %r8, sm; shl.b32 %r9, %r15, 2; add.s32 %r10, %r8, %r9; ld.shared.u32 %r3, [%r10];", "r3", mixed32, nil,
			func(a, b uint64, _ int) uint64 { return a & 0xffffffff }},
	})
}

func TestFloatInstructions(t *testing.T) {
	vals := []float32{1, 3, -2.5, 0.1, 1e-40, -0, float32(math.Inf(1)), float32(math.NaN()), 1e38, 7, 0.333, 2, 100, -7.25, 1.0000001, 16}
	vb := make([]uint64, len(vals))
	for i, v := range vals {
		vb[i] = fb(v)
	}
	other := []float32{3, 0.1, 2, 0.7, 3, 1, float32(math.Inf(1)), 1, 1e38, -7, 3, 0.5, 1e-3, 2, 1, 4}
	ob := make([]uint64, len(other))
	for i, v := range other {
		ob[i] = fb(v)
	}
	f := func(a uint64) float32 { return math.Float32frombits(uint32(a)) }
	runInsnCases(t, []insnCase{
		{"add.f32", "add.f32 %f3, %f1, %f2;", "f3", vb, ob, func(a, b uint64, _ int) uint64 { return b32(f(a) + f(b)) }},
		{"sub.f32", "sub.rn.f32 %f3, %f1, %f2;", "f3", vb, ob, func(a, b uint64, _ int) uint64 { return b32(f(a) - f(b)) }},
		{"mul.f32", "mul.rn.f32 %f3, %f1, %f2;", "f3", vb, ob, func(a, b uint64, _ int) uint64 { return b32(f(a) * f(b)) }},
		{"div.rn.f32", "div.rn.f32 %f3, %f1, %f2;", "f3", vb, ob, func(a, b uint64, _ int) uint64 { return b32(f(a) / f(b)) }},
		{"fma.rn.f32", "fma.rn.f32 %f3, %f1, %f2, %f1;", "f3", vb, ob, func(a, b uint64, _ int) uint64 {
			return b32(float32(math.FMA(float64(f(a)), float64(f(b)), float64(f(a)))))
		}},
		{"add.rz.f32", "add.rz.f32 %f3, %f1, %f2;", "f3", []uint64{fb(1)}, []uint64{fb(1e-8)}, func(a, b uint64, l int) uint64 {
			if l == 0 {
				return fb(1)
			}
			return b32(f(a) + f(b))
		}},
		{"add.rp.f32", "add.rp.f32 %f3, %f1, %f2;", "f3", []uint64{fb(1)}, []uint64{fb(1e-8)}, func(a, b uint64, l int) uint64 {
			if l == 0 {
				return fb(math.Nextafter32(1, 2))
			}
			return b32(f(a) + f(b))
		}},
		{"mul.rm.f32", "mul.rm.f32 %f3, %f1, %f2;", "f3", []uint64{fb(1.0000001)}, []uint64{fb(-1.0000001)}, func(a, b uint64, l int) uint64 {
			if l == 0 {
				p := float64(f(a)) * float64(f(b))
				r := float32(p)
				if float64(r) > p {
					r = math.Nextafter32(r, float32(math.Inf(-1)))
				}
				return fb(r)
			}
			return b32(f(a) * f(b))
		}},
		{"min.f32 NaN", "min.f32 %f3, %f1, %f2;", "f3", vb, ob, func(a, b uint64, _ int) uint64 {
			return b32(float32(fminmax(float64(f(a)), float64(f(b)), true, false)))
		}},
		{"max.f32", "max.f32 %f3, %f1, %f2;", "f3", vb, ob, func(a, b uint64, _ int) uint64 {
			x, y := f(a), f(b)
			if x != x {
				return fb(y)
			}
			if y != y {
				return fb(x)
			}
			return fb(max(x, y))
		}},
		// An H200's neg and abs canonicalise a NaN where only a store
		// reads the result (see e2e/ptxgen; foldedSignNaN otherwise).
		{"abs.f32", "abs.f32 %f3, %f1;", "f3", vb, nil, func(a, b uint64, _ int) uint64 {
			if f(a) != f(a) {
				return canonNaN32
			}
			return a &^ 0x80000000
		}},
		{"sqrt.rn.f32", "sqrt.rn.f32 %f3, %f1;", "f3", vb, nil, func(a, b uint64, _ int) uint64 { return b32(float32(math.Sqrt(float64(f(a))))) }},
		{"rcp.rn.f32", "rcp.rn.f32 %f3, %f1;", "f3", vb, nil, func(a, b uint64, _ int) uint64 { return b32(1 / f(a)) }},
		{"rsqrt.approx.f32", "rsqrt.approx.f32 %f3, %f1;", "f3", vb, nil, func(a, b uint64, _ int) uint64 { return b32(float32(1 / math.Sqrt(float64(f(a))))) }},
		{"ex2.approx.ftz.f32", "ex2.approx.ftz.f32 %f3, %f1;", "f3", vb, nil, func(a, b uint64, _ int) uint64 {
			return b32(ftz32(float32(math.Exp2(float64(ftz32(f(a)))))))
		}},
		{"lg2.approx.f32", "lg2.approx.f32 %f3, %f1;", "f3", vb, nil, func(a, b uint64, _ int) uint64 { return b32(float32(math.Log2(float64(f(a))))) }},
		{"sin/cos.approx", "sin.approx.f32 %f4, %f1; cos.approx.f32 %f5, %f1; add.f32 %f3, %f4, %f5;", "f3", vb, nil, func(a, b uint64, _ int) uint64 {
			return b32(float32(math.Sin(float64(f(a)))) + float32(math.Cos(float64(f(a)))))
		}},
		{"tanh.approx", "tanh.approx.f32 %f3, %f1;", "f3", vb, nil, func(a, b uint64, _ int) uint64 { return b32(float32(math.Tanh(float64(f(a))))) }},
		{"setp.ltu.f32", "setp.ltu.f32 %p3, %f1, %f2;", "p3", vb, ob, func(a, b uint64, _ int) uint64 { return b2u(!(f(a) >= f(b))) }},
		{"setp.ge.f32", "setp.ge.f32 %p3, %f1, %f2;", "p3", vb, ob, func(a, b uint64, _ int) uint64 { return b2u(f(a) >= f(b)) }},
		{"setp.nan.f32", "setp.nan.f32 %p3, %f1, %f2;", "p3", vb, ob, func(a, b uint64, _ int) uint64 { return b2u(f(a) != f(a) || f(b) != f(b)) }},
		{"testp.finite", "testp.finite.f32 %p3, %f1;", "p3", vb, nil, func(a, b uint64, _ int) uint64 {
			return b2u(!math.IsInf(float64(f(a)), 0) && f(a) == f(a))
		}},
		{"copysign", "copysign.f32 %f3, %f2, %f1;", "f3", vb, ob, func(a, b uint64, _ int) uint64 { return a&0x7fffffff | b&0x80000000 }},
		{"add.f64", "add.f64 %fd3, %fd1, %fd2;", "fd3", []uint64{db(0.1), db(1e308)}, []uint64{db(0.2), db(1e308)}, func(a, b uint64, _ int) uint64 {
			return db(math.Float64frombits(a) + math.Float64frombits(b))
		}},
		{"fma.rn.f64", "fma.rn.f64 %fd3, %fd1, %fd2, %fd2;", "fd3", []uint64{db(0.1), db(3)}, []uint64{db(0.2), db(1e-17)}, func(a, b uint64, _ int) uint64 {
			return db(math.FMA(math.Float64frombits(a), math.Float64frombits(b), math.Float64frombits(b)))
		}},
		{"div.rn.f64", "div.rn.f64 %fd3, %fd1, %fd2;", "fd3", []uint64{db(1), db(2)}, []uint64{db(3), db(7)}, func(a, b uint64, _ int) uint64 {
			return db(math.Float64frombits(a) / math.Float64frombits(b))
		}},
		{"sqrt.rn.f64", "sqrt.rn.f64 %fd3, %fd1;", "fd3", []uint64{db(2), db(1e-300)}, nil, func(a, b uint64, _ int) uint64 {
			return db(math.Sqrt(math.Float64frombits(a)))
		}},
		{"f32 NaN is canonical", "sub.f32 %f3, %f1, %f1;", "f3", []uint64{fb(float32(math.Inf(1)))}, nil, func(a, b uint64, l int) uint64 {
			if l == 0 {
				return canonNaN32
			}
			return 0
		}},
	})
}

func TestFMAIsSingleRounding(t *testing.T) {
	// Cases where rounding the double result again to float would be
	// wrong: the emulator must round once.
	for i := 0; i < 20000; i++ {
		a := math.Float32frombits(uint32(0x3f800000 + i*7919%0x7fffff))
		b := math.Float32frombits(uint32(0x3f800000 + i*104729%0x7fffff))
		c := -a * b
		got := fma32(a, b, c, rmRN)
		x := bigFMA32(a, b, c)
		if got != x && !(got != got && x != x) {
			t.Fatalf("fma(%v,%v,%v) = %v, want %v", a, b, c, got, x)
		}
	}
}

func TestWarpInstructions(t *testing.T) {
	shflDown := func(a uint64, d, l int) uint64 {
		if l+d <= 31 {
			return uint64(l + d)
		}
		return uint64(l)
	}
	runInsnCases(t, []insnCase{
		{"shfl.down", "shfl.sync.down.b32 %r3, %r1, 3, 31, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return shflDown(a, 3, l) }},
		{"shfl.up", "shfl.sync.up.b32 %r3|%p1, %r1, 2, 0, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 {
			if l >= 2 {
				return uint64(l - 2)
			}
			return uint64(l)
		}},
		{"shfl.up pred", "shfl.sync.up.b32 %r4|%p3, %r1, 2, 0, -1;", "p3", nil, nil, func(a, b uint64, l int) uint64 { return b2u(l >= 2) }},
		{"shfl.bfly", "shfl.sync.bfly.b32 %r3, %r1, 5, 31, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return uint64(l ^ 5) }},
		{"shfl.idx", "shfl.sync.idx.b32 %r3, %r1, 7, 31, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 7 }},
		{"shfl.idx width 8", "shfl.sync.idx.b32 %r3, %r1, 3, 6175, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return uint64(l&^7 | 3) }},
		{"shfl.down width 16", "shfl.sync.down.b32 %r3, %r1, 4, 4127, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 {
			if l%16+4 < 16 {
				return uint64(l + 4)
			}
			return uint64(l)
		}},
		{"vote.ballot", "setp.lt.u32 %p1, %r1, 10; vote.sync.ballot.b32 %r3, %p1, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 0x3ff }},
		{"vote.all/any", "setp.lt.u32 %p1, %r1, 40; vote.sync.all.pred %p2, %p1, -1; setp.eq.u32 %p4, %r1, 3; vote.sync.any.pred %p5, %p4, -1; and.pred %p3, %p2, %p5;", "p3", nil, nil,
			func(a, b uint64, l int) uint64 { return 1 }},
		{"vote.uni", "setp.lt.u32 %p1, %r1, 10; vote.sync.uni.pred %p3, %p1, -1;", "p3", nil, nil, func(a, b uint64, l int) uint64 { return 0 }},
		{"activemask divergent", "setp.lt.u32 %p1, %r1, 12; @%p1 bra L1; activemask.b32 %r3; bra L2; L1: activemask.b32 %r3; L2:", "r3", nil, nil,
			func(a, b uint64, l int) uint64 {
				if l < 12 {
					return 0xfff
				}
				return 0xfffff000
			}},
		{"match.any", "and.b32 %r4, %r1, 3; match.any.sync.b32 %r3, %r4, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 0x11111111 << (l & 3) }},
		{"match.all", "and.b32 %r4, %r1, 0; match.all.sync.b32 %r3|%p1, %r4, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 0xffffffff }},
		{"redux.add", "redux.sync.add.u32 %r3, %r1, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 496 }},
		{"redux.max", "redux.sync.max.s32 %r3, %r1, -1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 31 }},
		{"laneid/lanemask", "mov.u32 %r4, %laneid; mov.u32 %r5, %lanemask_lt; popc.b32 %r6, %r5; sub.s32 %r3, %r4, %r6;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 0 }},
		{"shared atomics", "atom.shared.add.u32 %r4, [sm], 1; bar.sync 0; ld.shared.u32 %r3, [sm];", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 32 }},
		{"shared atom.cas", "add.s32 %r5, %r15, 100; atom.shared.cas.b32 %r4, [sm+4], 0, %r5; bar.sync 0; ld.shared.u32 %r3, [sm+4];", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 100 }},
		{"shared atom.max/min", "atom.shared.max.s32 %r4, [sm+8], %r1; atom.shared.min.s32 %r5, [sm+12], %r1; bar.sync 0; ld.shared.u32 %r6, [sm+8]; ld.shared.u32 %r7, [sm+12]; sub.s32 %r3, %r6, %r7;", "r3", nil, nil,
			func(a, b uint64, l int) uint64 { return 31 }},
		{"shared atom.add.f32", "mov.f32 %f4, 0f3F000000; atom.shared.add.f32 %f5, [sm+16], %f4; bar.sync 0; ld.shared.f32 %f3, [sm+16];", "f3", nil, nil, func(a, b uint64, l int) uint64 { return fb(16) }},
		{"atom.inc", "atom.shared.inc.u32 %r4, [sm+20], 9; bar.sync 0; ld.shared.u32 %r3, [sm+20];", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 32 % 10 }},
		{"atom.add.f16x2", "mov.b32 %r4, 0x3c004000; atom.shared.add.noftz.f16x2 %r5, [sm+24], %r4; bar.sync 0; ld.shared.u32 %r3, [sm+24];", "r3", nil, nil,
			func(a, b uint64, l int) uint64 { return 0x5400 | 0x5000<<16 }}, // 32 x (2.0, 1.0) = (64, 32)
		{"atom.add.bf16", "mov.b16 %rs4, 0x3f80; atom.shared.add.noftz.bf16 %rs5, [sm+30], %rs4; bar.sync 0; ld.shared.u16 %rs3, [sm+30];", "rs3", nil, nil,
			func(a, b uint64, l int) uint64 { return 0x4200 }}, // 32 x 1.0
		{"bar.red.popc", "setp.lt.u32 %p1, %r1, 5; bar.red.popc.u32 %r3, 0, %p1;", "r3", nil, nil, func(a, b uint64, l int) uint64 { return 5 }},
		{"bar.red.or", "setp.eq.u32 %p1, %r1, 5; bar.red.or.pred %p3, 0, %p1;", "p3", nil, nil, func(a, b uint64, l int) uint64 { return 1 }},
		{"elect", "elect.sync %r4|%p3, -1;", "p3", nil, nil, func(a, b uint64, l int) uint64 { return b2u(l == 0) }},
	})
}

func TestSnippetErrors(t *testing.T) {
	cases := []struct {
		name, body string
		code       string
	}{
		{"unsupported instruction", "tex.2d.v4.f32.f32 {%f3, %f4, %f5, %f6}, [%rd1, {%f1, %f2}];", "CUDA_ERROR_NOT_SUPPORTED"},
		{"out of bounds", "ld.global.u32 %r3, [%rd10+1024];", "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"null pointer", "mov.u64 %rd4, 0; st.global.u32 [%rd4], %r1;", "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"misaligned", "ld.global.u32 %r3, [%rd10+2];", "CUDA_ERROR_MISALIGNED_ADDRESS"},
		{"shared out of bounds", "ld.shared.u32 %r3, [sm+512];", "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{"trap", "setp.eq.u32 %p1, %r1, 7; @%p1 trap;", "CUDA_ERROR_LAUNCH_FAILED"},
		{"barrier count too large", "setp.eq.u32 %p1, %r1, 7; @%p1 bra L; bar.sync 0, 64; L:", "CUDA_ERROR_ILLEGAL_INSTRUCTION"},
		{"deadlock", "setp.eq.u32 %p1, %r1, 7; @%p1 bra L; bar.sync 0; bra M; L: bar.sync 1; M:", "deadlock"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := snippet(t, tc.body, "r3", lanes32(func(l int) uint64 { return uint64(l) }), nil)
			if err == nil || !strings.Contains(err.Error(), tc.code) {
				t.Fatalf("got %v, want %s", err, tc.code)
			}
			if !strings.Contains(err.Error(), "kernel k") {
				t.Fatalf("error does not name the kernel: %v", err)
			}
		})
	}
}

func TestCarryArithmetic(t *testing.T) {
	a := []uint64{0xffffffffffffffff, 0x00000001ffffffff, 0x123456789abcdef0, 0x8000000000000000, 5}
	b := []uint64{1, 0x00000000ffffffff, 0xfedcba9876543210, 0x8000000000000000, 7}
	runInsnCases(t, []insnCase{
		{"add.cc/addc 64 from 32", `mov.b64 {%r4, %r5}, %rd1; mov.b64 {%r6, %r7}, %rd2;
			add.cc.u32 %r8, %r4, %r6; addc.u32 %r9, %r5, %r7; mov.b64 %rd3, {%r8, %r9};`, "rd3", a, b,
			func(a, b uint64, _ int) uint64 { return a + b }},
		{"sub.cc/subc 64 from 32", `mov.b64 {%r4, %r5}, %rd1; mov.b64 {%r6, %r7}, %rd2;
			sub.cc.u32 %r8, %r4, %r6; subc.u32 %r9, %r5, %r7; mov.b64 %rd3, {%r8, %r9};`, "rd3", a, b,
			func(a, b uint64, _ int) uint64 { return a - b }},
		{"add.cc.u64/addc.u64 carry out", `add.cc.u64 %rd4, %rd1, %rd2; addc.u64 %rd3, 0, 0;`, "rd3", a, b,
			func(a, b uint64, _ int) uint64 {
				_, c := bits.Add64(a, b, 0)
				return c
			}},
		{"mad.lo.cc/madc.hi 32x64", `mov.b64 {%r4, %r5}, %rd1;
			mul.lo.u32 %r8, %r4, %r2; mul.hi.u32 %r9, %r4, %r2;
			mad.lo.cc.u32 %r9, %r5, %r2, %r9; madc.hi.u32 %r10, %r5, %r2, 0;
			mov.b64 %rd3, {%r8, %r9};`, "rd3", a, b,
			func(a, b uint64, _ int) uint64 { return a * (b & 0xffffffff) }},
	})
}

func b2f(v bool) int {
	if v {
		return 1
	}
	return 0
}

// TestGuardedLowering: instructions an H200 computes differently under a
// guard, as ptxas lowers them (measured by the generated corpus,
// e2e/ptxgen). Lane l's guard %p3 is a < b; %f1 holds a's bits.
func TestGuardedLowering(t *testing.T) {
	nans := []uint64{0x7fa00001, 0xff812345, 0x7fffffff, 0xfffffffe, 0x7fc00000, fb(-2.5), fb(3), 0x80000000,
		0xffffffed, 0xc, 0xba48ce09, 0x7f800000, 0, 1, 0x80000001, 0x7fffffff}
	b := lanes32(func(l int) uint64 { return uint64(l % 2 * 0x100000000) }) // lane parity decides the guard
	guard := func(a, b uint64) bool { return int64(a) < int64(b) }
	f := func(a uint64) float32 { return math.Float32frombits(uint32(a)) }
	canon := func(x uint64) uint64 {
		if f(x) != f(x) {
			return 0x7fffffff
		}
		return x
	}
	runInsnCases(t, []insnCase{
		// A guarded set.f32 converts |int32(d)| to float in the lanes
		// whose guard is false (INT_MIN stays INT_MIN).
		{"guarded set.f32", "setp.lt.s64 %p3, %rd1, %rd2;\n\tmov.b32 %f3, %r1;\n\t@%p3 set.gt.f32.s32 %f3, %r1, %r2;", "f3", nans, b,
			func(a, b uint64, _ int) uint64 {
				if guard(a, b) {
					return b32(float32(b2f(int32(a) > int32(b))))
				}
				v := int32(a)
				if v < 0 {
					v = -v
				}
				return b32(float32(v))
			}},
		{"unguarded set.f32", "set.gt.f32.s32 %f3, %r1, %r2;", "f3", nans, b, func(a, b uint64, _ int) uint64 {
			if int32(a) > int32(b) {
				return b32(1)
			}
			return b32(0)
		}},
		{"guarded set.u32", "setp.lt.s64 %p3, %rd1, %rd2;\n\tmov.b32 %r3, %r1;\n\t@%p3 set.gt.u32.s32 %r3, %r1, %r2;", "r3", nans, b,
			func(a, b uint64, _ int) uint64 {
				if guard(a, b) {
					return uint64(uint32(-int32(b2f(int32(a) > int32(b)))))
				}
				return a & 0xffffffff
			}},
		// Guarded neg and abs of .f32 change the sign bit alone; without
		// a guard, or with .ftz, a NaN comes out canonical.
		{"guarded neg.f32", "setp.lt.s64 %p3, %rd1, %rd2;\n\tmov.f32 %f3, 0f3F800000;\n\t@!%p3 neg.f32 %f3, %f1;", "f3", nans, b,
			func(a, b uint64, _ int) uint64 {
				if guard(a, b) {
					return b32(1)
				}
				return (a ^ 0x80000000) & 0xffffffff
			}},
		{"guarded abs.f32", "setp.lt.s64 %p3, %rd1, %rd2;\n\tmov.f32 %f3, 0f3F800000;\n\t@!%p3 abs.f32 %f3, %f1;", "f3", nans, b,
			func(a, b uint64, _ int) uint64 {
				if guard(a, b) {
					return b32(1)
				}
				return a &^ 0x80000000 & 0xffffffff
			}},
		{"neg.f32", "neg.f32 %f3, %f1;", "f3", nans, b, func(a, b uint64, _ int) uint64 { return canon((a ^ 0x80000000) & 0xffffffff) }},
		{"guarded abs.ftz.f32", "setp.lt.s64 %p3, %rd1, %rd2;\n\tmov.f32 %f3, 0f3F800000;\n\t@!%p3 abs.ftz.f32 %f3, %f1;", "f3", nans, b,
			func(a, b uint64, _ int) uint64 {
				if guard(a, b) {
					return b32(1)
				}
				x := f(a)
				if x != x {
					return 0x7fffffff
				}
				if math.Abs(float64(x)) < 0x1p-126 {
					return 0
				}
				return a &^ 0x80000000 & 0xffffffff
			}},
	})
}
