package ptx

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzLoad feeds hostile images to Load and runs whatever loads. Any
// outcome but a Go panic (or an internal fault converted from one) is
// acceptable: errors must be *cu.Error values.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.ptx")
	nvcc, _ := filepath.Glob("testdata/nvcc/*.ptx")
	for _, name := range append(files, nvcc...) {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(fatbin(fatbinEntry(fatbinKindPTX, 80, lz4Literals([]byte(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(){ret;}")), fatbinFlagLZ4, 62)))
	f.Fuzz(func(t *testing.T, image []byte) {
		m, err := Load(image)
		if err != nil {
			if codeOf(err) == "CUDA_ERROR_UNKNOWN" || strings.Contains(err.Error(), "emulator fault") {
				t.Fatalf("error without a CUDA result: %v", err)
			}
			return
		}
		for _, name := range m.Kernels() {
			fn, err := m.Function(name)
			if err != nil {
				t.Fatal(err)
			}
			mem := newTestMem()
			for _, g := range m.Globals() {
				if g.Size > 1<<20 {
					return
				}
				addr := mem.alloc(int(g.Size))
				copy(mem.bytes(addr), g.Init)
				if err := m.BindGlobal(g.Name, addr); err != nil {
					t.Fatal(err)
				}
			}
			// Every pointer parameter points at a small buffer.
			params := make([]byte, fn.paramBytes())
			buf := mem.alloc(4096)
			for _, p := range fn.Params() {
				if p.Size == 8 {
					for i := 0; i < 8; i++ {
						params[p.Offset+uint32(i)] = byte(buf >> (8 * i))
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			err = fn.Run(ctx, Launch{Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{min(uint32(fn.maxThreads()), 64), 1, 1}, Params: params, SharedBytes: 256}, mem, 2)
			cancel()
			if err != nil && strings.Contains(err.Error(), "emulator fault") {
				t.Fatalf("kernel %s: %v", name, err)
			}
		}
	})
}

// FuzzInstruction puts arbitrary text where one instruction goes in a
// kernel with every register class declared, then loads and runs it: the
// compiler and the interpreter must turn anything into a result or a CUDA
// error, never a panic.
func FuzzInstruction(f *testing.F) {
	for _, s := range []string{
		"add.s32 %r3, %r1, %r2;", "mad.wide.u32 %rd3, %r1, %r2, %rd1;", "div.rn.f32 %f3, %f1, %f2;",
		"cvt.rzi.s32.f32 %r3, %f1;", "cvt.rn.f16.f32 %rs3, %f1;", "shfl.sync.bfly.b32 %r3|%p1, %r1, 5, 31, -1;",
		"vote.sync.ballot.b32 %r3, %p1, -1;", "atom.shared.cas.b32 %r3, [sm+4], %r1, %r2;", "ld.global.v4.u32 {%r3, %r4, %r5, %r6}, [%rd10];",
		"st.shared.v2.f32 [sm+8], {%f1, %f2};", "bfe.s64 %rd3, %rd1, %r1, %r2;", "prmt.b32.f4e %r3, %r1, %r2, %r1;",
		"bar.red.popc.u32 %r3, 0, %p1;", "setp.gtu.and.f64 %p3, %fd1, %fd2, %p1;", "fma.rn.ftz.sat.f32 %f3, %f1, %f2, %f1;",
		"madc.hi.cc.u32 %r3, %r1, %r2, %r1;", "redux.sync.min.s32 %r3, %r1, -1;", "cp.async.ca.shared.global [sm], [%rd10], 16;",
		"@%p1 bra L; L:", "mov.b64 {%r3, %r4}, %rd1;", "ld.local.u32 %r3, [%rd1];", "testp.subnormal.f64 %p3, %fd1;",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, insn string) {
		if strings.ContainsAny(insn, "{}") && strings.Count(insn, "{") != strings.Count(insn, "}") {
			return // would unbalance the kernel's own braces
		}
		src := `.version 8.0
.target sm_90
.address_size 64
.visible .entry k(.param .u64 k_in)
{
	.reg .pred %p<8>;
	.reg .b16 %rs<8>;
	.reg .b32 %r<16>;
	.reg .f32 %f<16>;
	.reg .b64 %rd<16>;
	.reg .f64 %fd<16>;
	.shared .align 8 .b8 sm[64];
	ld.param.u64 %rd10, [k_in];
	mov.u32 %r1, %tid.x;
	mov.u32 %r2, 3;
	` + insn + `
	ret;
}
`
		m, err := Load([]byte(src))
		if err != nil {
			if codeOf(err) == "CUDA_ERROR_UNKNOWN" || strings.Contains(err.Error(), "emulator fault") {
				t.Fatalf("error without a CUDA result: %v", err)
			}
			return
		}
		fn, err := m.Function("k")
		if err != nil {
			return
		}
		mem := newTestMem()
		buf := mem.alloc(256)
		p := make([]byte, 8)
		for i := range p {
			p[i] = byte(buf >> (8 * i))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err = fn.Run(ctx, Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{40, 1, 1}, Params: p}, mem, 1)
		if err != nil && strings.Contains(err.Error(), "emulator fault") {
			t.Fatalf("%q: %v", insn, err)
		}
	})
}

// FuzzPrintf formats arbitrary format strings over a small argument
// buffer: never a panic, whatever the format asks for.
func FuzzPrintf(f *testing.F) {
	for _, s := range []string{"%d %s\n", "%5.2f|%-8x|%lld|%hhd|%c|%p|%%|%q|%", "%s%s%s%s", "%.300f %0100d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, format string) {
		mem := newTestMem()
		args := mem.alloc(64)
		b := mem.bytes(args)
		for i := range b {
			b[i] = byte(i * 7)
		}
		l := &launch{mem: mem}
		blk := &block{l: l}
		w := &warp{b: blk}
		s, n := w.formatPrintf(0, format, args)
		if n < 0 || len(s) > 1<<20 {
			t.Fatalf("%q gave %d arguments and %d bytes", format, n, len(s))
		}
	})
}
