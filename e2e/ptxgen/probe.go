package ptxgen

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
)

// Probes are hand-written kernels that sweep the corners the random
// programs reach only by chance: bit-field positions and lengths past the
// width, NaN payloads, signs and signalling NaNs through every float
// instruction, and float atomics on NaNs and subnormals. They run through
// the same gpurun as generated kernels (their seeds start at ProbeSeed),
// and their outputs on a device are kept beside the corpus.
const ProbeSeed = 1 << 40

// Probe is one probe kernel: a Program plus the name of each output
// column (Cols, Stride bytes per thread, each column 8 bytes).
type Probe struct {
	*Program
	Name string
	Cols []string
	// Inputs describes thread t's inputs, for reports.
	Inputs func(t int) string
	// Emu, when set, is the kernel the emulator runs in place of this
	// one: the same without the columns whose device results the
	// emulator refuses to guess (double operations on two different
	// NaNs), which would fail its whole launch. Its columns are compared
	// with the device's columns of the same name.
	Emu *Probe
}

type probeBuilder struct {
	name   string
	body   strings.Builder
	cols   []string
	inSize int
	n      int
	in     []byte
	decls  string
	inputs func(t int) string
	// emu leaves out what the emulator refuses (see Probe.Emu).
	emu bool
}

func (b *probeBuilder) emit(format string, args ...any) {
	b.body.WriteString("\t")
	fmt.Fprintf(&b.body, format, args...)
	b.body.WriteString(";\n")
}

// out stores reg (of the given bits) as column name; the column's other
// bytes stay zero, as the output buffer starts.
func (b *probeBuilder) out(name, reg string, bits int) {
	off := 8 * len(b.cols)
	b.cols = append(b.cols, name)
	switch bits {
	case 64:
		b.emit("st.global.b64 [%%o+%d], %s", off, reg)
	case 32:
		b.emit("st.global.b32 [%%o+%d], %s", off, reg)
	case 16:
		b.emit("st.global.b16 [%%o+%d], %s", off, reg)
	}
}

func (b *probeBuilder) build(id int) *Probe {
	const block = 128
	threads := (b.n + block - 1) / block * block
	in := make([]byte, threads*b.inSize)
	copy(in, b.in)
	stride := 8 * len(b.cols)
	src := fmt.Sprintf(`// gpuctl ptxgen probe %s
.version 8.0
.target sm_90
.address_size 64

.visible .entry k(.param .u64 pin, .param .u64 pout, .param .u64 paout, .param .u32 pscalar)
{
	.reg .b64 %%i, %%o, %%t;
	.reg .b32 %%g, %%u, %%v;
	.reg .pred %%q;
%s
	.shared .align 8 .b8 sh[%d];
	ld.param.u64 %%i, [pin];
	ld.param.u64 %%o, [pout];
	mov.u32 %%u, %%ctaid.x;
	mov.u32 %%v, %%ntid.x;
	mov.u32 %%g, %%tid.x;
	mad.lo.s32 %%g, %%u, %%v, %%g;
	mul.wide.u32 %%t, %%g, %d;
	add.s64 %%i, %%i, %%t;
	mul.wide.u32 %%t, %%g, %d;
	add.s64 %%o, %%o, %%t;
%s	ret;
}
`, b.name, b.decls, block*16, b.inSize, stride, b.body.String())
	p := &Program{
		Seed:      ProbeSeed + uint64(id),
		PTX:       src,
		Grid:      uint32(threads / block),
		Block:     block,
		In:        in,
		OutInit:   make([]byte, threads*stride),
		OutStride: stride,
	}
	return &Probe{Program: p, Name: b.name, Cols: b.cols, Inputs: b.inputs}
}

func put64(b []byte, off int, v uint64) { binary.LittleEndian.PutUint64(b[off:], v) }

var (
	probeInts = []uint64{0x0123456789abcdef, 0xfedcba9876543210, 0x17, 0x8000000000000001, 0xffffffff7fffffff, 0x00000000f0f0f0f0}
	probeBits = []uint32{0, 1, 5, 16, 31, 32, 33, 38, 42, 63, 64, 65, 100, 127, 128, 200, 255, 256, 257, 0x1000, 0x80000000, 0xffffffff}
	probeF64  = []uint64{0x7ff8000000000123, 0xfff8000000000456, 0x7ff0000000000789, 0xfff0000000000abc, math.Float64bits(1.5),
		math.Float64bits(-2), 0x7ff0000000000000, 0xfff0000000000000, 0, 1 << 63, 1, 0x7fefffffffffffff}
	probeF32 = []uint32{0x7fc00123, 0xffc00456, 0x7f800789, 0xff800abc, math.Float32bits(1.5), math.Float32bits(-2),
		0x7f800000, 0xff800000, 0, 1 << 31, 1, 0x7f7fffff}
	probeF16  = []uint16{0x7e12, 0xfe34, 0x7c56, 0xfc78, 0x3e00, 0xc000, 0x7c00, 0xfc00, 0, 0x8000, 1, 0x7bff}
	probeBF16 = []uint16{0x7fc1, 0xffc2, 0x7f83, 0xff84, 0x3fc0, 0xc000, 0x7f80, 0xff80, 0, 0x8000, 1, 0x7f7f}
)

// Probes returns every probe kernel.
func Probes() []*Probe {
	floats := probeFloats(false)
	floats.Emu = probeFloats(true)
	return []*Probe{probeBitfields(), probeBitfieldImm(), floats, probeAtomics()}
}

// nanPairOp reports whether a probe's double instruction may meet two
// different NaNs, which the emulator refuses (see Probe.Emu).
func nanPairOp(op string) bool {
	f := strings.Fields(op)
	if len(f) == 0 || !strings.HasSuffix(f[0], ".f64") {
		return false
	}
	switch strings.SplitN(f[0], ".", 2)[0] {
	case "add", "sub", "mul", "fma", "mad", "min", "max":
		return true
	}
	return false
}

// probeBitfields: bfe and bfi with register positions and lengths.
func probeBitfields() *Probe {
	b := &probeBuilder{name: "bitfields", inSize: 24}
	b.decls = "\t.reg .b64 %a, %f, %d<6>;\n\t.reg .b32 %p, %l, %a32, %f32, %e<4>;"
	for _, a := range probeInts {
		for _, p := range probeBits {
			for _, l := range probeBits {
				rec := make([]byte, 24)
				put64(rec, 0, a)
				put64(rec, 8, ^a*0x9e3779b97f4a7c15)
				binary.LittleEndian.PutUint32(rec[16:], p)
				binary.LittleEndian.PutUint32(rec[20:], l)
				b.in = append(b.in, rec...)
				b.n++
			}
		}
	}
	b.inputs = func(t int) string {
		if t >= b.n {
			return "padding"
		}
		r := b.in[24*t:]
		return fmt.Sprintf("a=%#x f=%#x pos=%#x len=%#x", binary.LittleEndian.Uint64(r), binary.LittleEndian.Uint64(r[8:]),
			binary.LittleEndian.Uint32(r[16:]), binary.LittleEndian.Uint32(r[20:]))
	}
	b.emit("ld.global.u64 %%a, [%%i]")
	b.emit("ld.global.u64 %%f, [%%i+8]")
	b.emit("ld.global.u32 %%p, [%%i+16]")
	b.emit("ld.global.u32 %%l, [%%i+20]")
	b.emit("cvt.u32.u64 %%a32, %%a")
	b.emit("cvt.u32.u64 %%f32, %%f")
	for i, op := range []string{"bfe.u32", "bfe.s32"} {
		b.emit("%s %%e%d, %%a32, %%p, %%l", op, i)
		b.out(op, fmt.Sprintf("%%e%d", i), 32)
	}
	b.emit("bfi.b32 %%e2, %%f32, %%a32, %%p, %%l")
	b.out("bfi.b32", "%e2", 32)
	for i, op := range []string{"bfe.u64", "bfe.s64"} {
		b.emit("%s %%d%d, %%a, %%p, %%l", op, i)
		b.out(op, fmt.Sprintf("%%d%d", i), 64)
	}
	b.emit("bfi.b64 %%d2, %%f, %%a, %%p, %%l")
	b.out("bfi.b64", "%d2", 64)
	return b.build(0)
}

// probeBitfieldImm: the same with immediate positions and lengths, which
// the compiler may fold.
func probeBitfieldImm() *Probe {
	b := &probeBuilder{name: "bitfields-immediate", inSize: 16}
	b.decls = "\t.reg .b64 %a, %f, %d;\n\t.reg .b32 %a32, %f32, %e;"
	for _, a := range probeInts {
		rec := make([]byte, 16)
		put64(rec, 0, a)
		put64(rec, 8, ^a*0x9e3779b97f4a7c15)
		b.in = append(b.in, rec...)
		b.n++
	}
	b.inputs = func(t int) string {
		if t >= b.n {
			return "padding"
		}
		return fmt.Sprintf("a=%#x f=%#x", binary.LittleEndian.Uint64(b.in[16*t:]), binary.LittleEndian.Uint64(b.in[16*t+8:]))
	}
	b.emit("ld.global.u64 %%a, [%%i]")
	b.emit("ld.global.u64 %%f, [%%i+8]")
	b.emit("cvt.u32.u64 %%a32, %%a")
	b.emit("cvt.u32.u64 %%f32, %%f")
	pairs := [][2]int{{0, 0}, {0, 8}, {4, 28}, {20, 42}, {1, 33}, {6, 48}, {31, 2}, {32, 0}, {32, 4}, {38, 11}, {42, 29}, {43, 6},
		{40, 40}, {60, 10}, {63, 1}, {64, 3}, {70, 3}, {100, 100}, {255, 255}, {0, 255}, {0, 32}, {0, 64}, {16, 64}}
	for _, pl := range pairs {
		for _, op := range []string{"bfe.u32", "bfe.s32"} {
			b.emit("%s %%e, %%a32, %d, %d", op, pl[0], pl[1])
			b.out(fmt.Sprintf("%s %d,%d", op, pl[0], pl[1]), "%e", 32)
		}
		b.emit("bfi.b32 %%e, %%f32, %%a32, %d, %d", pl[0], pl[1])
		b.out(fmt.Sprintf("bfi.b32 %d,%d", pl[0], pl[1]), "%e", 32)
		for _, op := range []string{"bfe.u64", "bfe.s64"} {
			b.emit("%s %%d, %%a, %d, %d", op, pl[0], pl[1])
			b.out(fmt.Sprintf("%s %d,%d", op, pl[0], pl[1]), "%d", 64)
		}
		b.emit("bfi.b64 %%d, %%f, %%a, %d, %d", pl[0], pl[1])
		b.out(fmt.Sprintf("bfi.b64 %d,%d", pl[0], pl[1]), "%d", 64)
	}
	return b.build(1)
}

// probeFloats: every float format's arithmetic, min/max, neg/abs and
// conversions over triples of special values: NaNs of both signs, quiet
// and signalling, with payloads; infinities; zeros; subnormals; finite
// numbers.
func probeFloats(emu bool) *Probe {
	b := &probeBuilder{name: "floats", inSize: 48, emu: emu}
	b.decls = "\t.reg .f64 %da, %db, %dc, %dd;\n\t.reg .f32 %fa, %fb, %fc, %fd;\n\t.reg .b16 %ha, %hb, %hc, %hd, %ba, %bb, %bc, %bd;\n\t.reg .b32 %r;\n\t.reg .b64 %x;"
	n := len(probeF64)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			for k := 0; k < n; k++ {
				rec := make([]byte, 48)
				put64(rec, 0, probeF64[i])
				put64(rec, 8, probeF64[j])
				put64(rec, 16, probeF64[k])
				binary.LittleEndian.PutUint32(rec[24:], probeF32[i])
				binary.LittleEndian.PutUint32(rec[28:], probeF32[j])
				binary.LittleEndian.PutUint32(rec[32:], probeF32[k])
				binary.LittleEndian.PutUint16(rec[36:], probeF16[i])
				binary.LittleEndian.PutUint16(rec[38:], probeF16[j])
				binary.LittleEndian.PutUint16(rec[40:], probeF16[k])
				binary.LittleEndian.PutUint16(rec[42:], probeBF16[i])
				binary.LittleEndian.PutUint16(rec[44:], probeBF16[j])
				binary.LittleEndian.PutUint16(rec[46:], probeBF16[k])
				b.in = append(b.in, rec...)
				b.n++
			}
		}
	}
	b.inputs = func(t int) string {
		if t >= b.n {
			return "padding"
		}
		i, j, k := t/(n*n), t/n%n, t%n
		return fmt.Sprintf("f64 %#x %#x %#x, f32 %#x %#x %#x, f16 %#x %#x %#x, bf16 %#x %#x %#x",
			probeF64[i], probeF64[j], probeF64[k], probeF32[i], probeF32[j], probeF32[k],
			probeF16[i], probeF16[j], probeF16[k], probeBF16[i], probeBF16[j], probeBF16[k])
	}
	for _, l := range []string{"ld.global.f64 %da, [%i]", "ld.global.f64 %db, [%i+8]", "ld.global.f64 %dc, [%i+16]",
		"ld.global.f32 %fa, [%i+24]", "ld.global.f32 %fb, [%i+28]", "ld.global.f32 %fc, [%i+32]",
		"ld.global.b16 %ha, [%i+36]", "ld.global.b16 %hb, [%i+38]", "ld.global.b16 %hc, [%i+40]",
		"ld.global.b16 %ba, [%i+42]", "ld.global.b16 %bb, [%i+44]", "ld.global.b16 %bc, [%i+46]"} {
		b.emit("%s", l)
	}
	f64 := []string{"add.rn.f64 %dd, %da, %db", "sub.rn.f64 %dd, %da, %db", "mul.rn.f64 %dd, %da, %db", "div.rn.f64 %dd, %da, %db",
		"fma.rn.f64 %dd, %da, %db, %dc", "add.rz.f64 %dd, %da, %db", "sub.rm.f64 %dd, %da, %db", "mul.rp.f64 %dd, %da, %db",
		"div.rz.f64 %dd, %da, %db", "fma.rz.f64 %dd, %da, %db, %dc", "fma.rp.f64 %dd, %da, %db, %dc", "min.f64 %dd, %da, %db",
		"max.f64 %dd, %da, %db", "sqrt.rn.f64 %dd, %da", "sqrt.rz.f64 %dd, %da", "rcp.rn.f64 %dd, %da", "rcp.rm.f64 %dd, %da",
		"neg.f64 %dd, %da", "abs.f64 %dd, %da", "cvt.rni.f64.f64 %dd, %da", "cvt.rzi.f64.f64 %dd, %da",
		"cvt.f64.f32 %dd, %fa", "cvt.ftz.f64.f32 %dd, %fa", "cvt.f64.f16 %dd, %ha", "copysign.f64 %dd, %da, %db"}
	for _, op := range f64 {
		if b.emu && nanPairOp(op) {
			continue
		}
		b.emit("%s", op)
		b.out(strings.Fields(op)[0], "%dd", 64)
	}
	f32 := []string{"add.rn.f32 %fd, %fa, %fb", "add.rn.ftz.f32 %fd, %fa, %fb", "sub.rz.f32 %fd, %fa, %fb", "mul.rm.f32 %fd, %fa, %fb",
		"div.rn.f32 %fd, %fa, %fb", "fma.rn.f32 %fd, %fa, %fb, %fc", "fma.rp.f32 %fd, %fa, %fb, %fc", "min.f32 %fd, %fa, %fb",
		"max.f32 %fd, %fa, %fb", "min.NaN.f32 %fd, %fa, %fb", "sqrt.rn.f32 %fd, %fa", "rcp.rn.f32 %fd, %fa", "neg.f32 %fd, %fa",
		"abs.f32 %fd, %fa", "cvt.rni.f32.f32 %fd, %fa", "cvt.rn.f32.f64 %fd, %da", "cvt.rz.ftz.f32.f64 %fd, %da",
		"cvt.f32.f16 %fd, %ha", "cvt.f32.bf16 %fd, %ba", "add.rn.sat.f32 %fd, %fa, %fb", "copysign.f32 %fd, %fa, %fb"}
	for _, op := range f32 {
		b.emit("%s", op)
		b.out(strings.Fields(op)[0], "%fd", 32)
	}
	f16 := []string{"add.rn.f16 %hd, %ha, %hb", "mul.rn.f16 %hd, %ha, %hb", "fma.rn.f16 %hd, %ha, %hb, %hc", "min.f16 %hd, %ha, %hb",
		"max.f16 %hd, %ha, %hb", "min.NaN.f16 %hd, %ha, %hb", "neg.f16 %hd, %ha", "abs.f16 %hd, %ha", "fma.rn.relu.f16 %hd, %ha, %hb, %hc",
		"cvt.rn.f16.f32 %hd, %fa", "cvt.rn.f16.f64 %hd, %da", "cvt.rz.f16.f64 %hd, %da",
		"add.rn.bf16 %bd, %ba, %bb", "fma.rn.bf16 %bd, %ba, %bb, %bc", "min.bf16 %bd, %ba, %bb", "max.bf16 %bd, %ba, %bb",
		"neg.bf16 %bd, %ba", "cvt.rn.bf16.f32 %bd, %fa", "cvt.rn.relu.bf16.f32 %bd, %fa"}
	for _, op := range f16 {
		b.emit("%s", op)
		b.out(strings.Fields(op)[0], strings.Fields(op)[1][:3], 16)
	}
	for _, op := range []string{"cvt.rzi.s32.f64 %r, %da", "cvt.rzi.u8.f64 %r, %da", "cvt.rzi.s32.f32 %r, %fa", "cvt.rzi.u16.f32 %r, %fa",
		"cvt.rni.s32.f16 %r, %ha"} {
		b.emit("%s", op)
		b.out(strings.Fields(op)[0], "%r", 32)
	}
	for _, op := range []string{"cvt.rzi.s64.f64 %x, %da", "cvt.rzi.u64.f32 %x, %fa"} {
		b.emit("%s", op)
		b.out(strings.Fields(op)[0], "%x", 64)
	}
	return b.build(2)
}

// probeAtomics: float atomic adds on NaNs, subnormals and infinities, in
// global and shared memory, returning the old value.
func probeAtomics() *Probe {
	b := &probeBuilder{name: "atomics", inSize: 24}
	b.decls = "\t.reg .f32 %fo, %fx, %fr;\n\t.reg .f64 %do, %dx, %dr;\n\t.reg .b32 %sa;"
	vals32 := append(append([]uint32(nil), probeF32...), 0x00400000, 0x807fffff, 0x00800001, 0x3f800000)
	vals64 := append(append([]uint64(nil), probeF64...), 0x0008000000000000, 0x800fffffffffffff, 0x0010000000000001, 0x3ff0000000000000)
	n := len(vals32)
	for i := 0; i < n; i++ {
		for j := 0; j < n; j++ {
			rec := make([]byte, 24)
			binary.LittleEndian.PutUint32(rec[0:], vals32[i])
			binary.LittleEndian.PutUint32(rec[4:], vals32[j])
			put64(rec, 8, vals64[i])
			put64(rec, 16, vals64[j])
			b.in = append(b.in, rec...)
			b.n++
		}
	}
	b.inputs = func(t int) string {
		if t >= b.n {
			return "padding"
		}
		i, j := t/n, t%n
		return fmt.Sprintf("f32 old %#x x %#x, f64 old %#x x %#x", vals32[i], vals32[j], vals64[i], vals64[j])
	}
	b.emit("ld.global.f32 %%fo, [%%i]")
	b.emit("ld.global.f32 %%fx, [%%i+4]")
	b.emit("ld.global.f64 %%do, [%%i+8]")
	b.emit("ld.global.f64 %%dx, [%%i+16]")
	// global: the first two output words hold the memory
	b.emit("st.global.f32 [%%o], %%fo")
	b.emit("st.global.f64 [%%o+8], %%do")
	b.cols = append(b.cols, "atom.global.add.f32 memory", "atom.global.add.f64 memory")
	b.emit("atom.global.add.f32 %%fr, [%%o], %%fx")
	b.out("atom.global.add.f32 old", "%fr", 32)
	b.emit("atom.global.add.f64 %%dr, [%%o+8], %%dx")
	b.out("atom.global.add.f64 old", "%dr", 64)
	// shared: this thread's own 16 bytes
	b.emit("mov.u32 %%sa, sh")
	b.emit("mov.u32 %%r, %%tid.x")
	b.decls += "\n\t.reg .b32 %r;"
	b.emit("mad.lo.s32 %%sa, %%r, 16, %%sa")
	b.emit("st.shared.f32 [%%sa], %%fo")
	b.emit("st.shared.f64 [%%sa+8], %%do")
	b.emit("atom.shared.add.f32 %%fr, [%%sa], %%fx")
	b.out("atom.shared.add.f32 old", "%fr", 32)
	b.emit("atom.shared.add.f64 %%dr, [%%sa+8], %%dx")
	b.out("atom.shared.add.f64 old", "%dr", 64)
	b.emit("ld.shared.f32 %%fr, [%%sa]")
	b.out("atom.shared.add.f32 memory", "%fr", 32)
	b.emit("ld.shared.f64 %%dr, [%%sa+8]")
	b.out("atom.shared.add.f64 memory", "%dr", 64)
	b.emit("red.global.add.f32 [%%o+%d], %%fx", 8*len(b.cols))
	b.cols = append(b.cols, "red.global.add.f32 of 0")
	return b.build(3)
}

// ProbeDiff is one probe output on which the emulator and a device
// differ.
type ProbeDiff struct {
	Probe, Col, Inputs string
	Thread             int
	Emu, Dev           uint64
}

// CheckProbe runs probe p on the emulator and compares it with the
// device's output dev.
func CheckProbe(p *Probe, dev []byte) ([]ProbeDiff, error) {
	ep := p
	if p.Emu != nil {
		ep = p.Emu
	}
	emu, _, err := RunEmulator(context.Background(), ep.Program, 0)
	if err != nil {
		return nil, err
	}
	if n := p.Threads() * p.OutStride; len(dev) < n {
		return nil, fmt.Errorf("probe %s: the device's output has %d bytes, want %d", p.Name, len(dev), n)
	}
	devCol := map[string]int{}
	for c, name := range p.Cols {
		devCol[name] = c
	}
	var out []ProbeDiff
	for t := 0; t < p.Threads(); t++ {
		for c, name := range ep.Cols {
			dc, ok := devCol[name]
			if !ok {
				return nil, fmt.Errorf("probe %s: the emulator's column %q is not the device's", p.Name, name)
			}
			e := binary.LittleEndian.Uint64(emu[t*ep.OutStride+8*c:])
			d := binary.LittleEndian.Uint64(dev[t*p.OutStride+8*dc:])
			if e != d {
				out = append(out, ProbeDiff{Probe: p.Name, Col: name, Inputs: p.Inputs(t), Thread: t, Emu: e, Dev: d})
			}
		}
	}
	return out, nil
}
