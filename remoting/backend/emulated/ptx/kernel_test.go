package ptx

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSaxpy(t *testing.T) {
	m := mustLoad(t, readTestdata(t, "saxpy.ptx"))
	f := mustFunc(t, m, "saxpy")
	for _, n := range []int{1, 31, 32, 33, 1000, 4096} {
		mem := newTestMem()
		x, y := mem.alloc(4*n), mem.alloc(4*n)
		xs, ys := make([]float32, n), make([]float32, n)
		for i := range xs {
			xs[i] = float32(i) * 0.5
			ys[i] = float32(n-i) * 0.25
		}
		mem.putF32(x, xs)
		mem.putF32(y, ys)
		a := float32(1.75)
		err := f.Run(context.Background(), Launch{Grid: [3]uint32{uint32((n + 127) / 128), 1, 1}, Block: [3]uint32{128, 1, 1},
			Params: params(t, f, int32(n), a, x, y)}, mem, 2)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		got := mem.f32s(y, n)
		for i := range got {
			want := float32(math.FMA(float64(xs[i]), float64(a), float64(ys[i])))
			if got[i] != want {
				t.Fatalf("n=%d: y[%d] = %v, want %v", n, i, got[i], want)
			}
		}
	}
}

// loadKernels loads testdata/kernels.ptx and binds its globals.
func loadKernels(t *testing.T, mem *testMem) *Module {
	t.Helper()
	m := mustLoad(t, readTestdata(t, "kernels.ptx"))
	for _, g := range m.Globals() {
		addr := mem.alloc(int(g.Size))
		copy(mem.bytes(addr), g.Init)
		if err := m.BindGlobal(g.Name, addr); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func TestReduceKernel(t *testing.T) {
	for _, tc := range []struct{ blocks, threads int }{{1, 32}, {4, 256}, {3, 64}, {2, 1}} {
		mem := newTestMem()
		m := loadKernels(t, mem)
		f := mustFunc(t, m, "reduce")
		n := tc.blocks * tc.threads
		in, out := mem.alloc(4*n), mem.alloc(4*tc.blocks)
		vals := make([]uint32, n)
		for i := range vals {
			vals[i] = uint32(i*i + 7)
		}
		mem.putU32(in, vals)
		err := f.Run(context.Background(), Launch{Grid: [3]uint32{uint32(tc.blocks), 1, 1}, Block: [3]uint32{uint32(tc.threads), 1, 1},
			Params: params(t, f, in, out)}, mem, 2)
		if err != nil {
			t.Fatal(err)
		}
		got := mem.u32s(out, tc.blocks)
		for b := 0; b < tc.blocks; b++ {
			var want uint32
			for i := 0; i < tc.threads; i++ {
				want += vals[b*tc.threads+i]
			}
			if got[b] != want {
				t.Errorf("%+v: block %d sum %d, want %d", tc, b, got[b], want)
			}
		}
	}
}

func TestDeviceCalls(t *testing.T) {
	mem := newTestMem()
	m := loadKernels(t, mem)
	f := mustFunc(t, m, "calls")
	in, out := mem.alloc(4*64), mem.alloc(4*64)
	xs := make([]float32, 64)
	for i := range xs {
		xs[i] = float32(i)*0.25 - 4
	}
	mem.putF32(in, xs)
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{64, 1, 1}, Params: params(t, f, in, out)}, mem, 1); err != nil {
		t.Fatal(err)
	}
	fact := func(n int) float32 {
		r := 1
		for i := 2; i <= n; i++ {
			r *= i
		}
		return float32(r)
	}
	got := mem.f32s(out, 64)
	for i, x := range xs {
		want := min(max(x, -2), 2)
		if i&7 != 3 {
			want += fact(i & 7)
		}
		if got[i] != want {
			t.Errorf("out[%d] = %v, want %v", i, got[i], want)
		}
	}
}

func TestDynamicSharedAndGlobals(t *testing.T) {
	mem := newTestMem()
	m := loadKernels(t, mem)
	f := mustFunc(t, m, "dynsh")
	const n = 96
	out := mem.alloc(4 * n)
	err := f.Run(context.Background(), Launch{Grid: [3]uint32{3, 1, 1}, Block: [3]uint32{n, 1, 1}, SharedBytes: 4 * n,
		Params: params(t, f, out, uint32(n))}, mem, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range mem.u32s(out, n) {
		if want := uint32(n-1-i) + 2; v != want {
			t.Fatalf("out[%d] = %d, want %d", i, v, want)
		}
	}
	addr, size, err := m.GlobalAddr("counter")
	if err != nil || size != 4 {
		t.Fatalf("GlobalAddr(counter) = %#x, %d, %v", addr, size, err)
	}
	if got := mem.u32s(addr, 1)[0]; got != 3*n {
		t.Fatalf("counter = %d, want %d", got, 3*n)
	}
	// Too little dynamic shared memory: the reads run past the end.
	err = f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{n, 1, 1}, SharedBytes: 16,
		Params: params(t, f, out, uint32(n))}, mem, 1)
	if cu := codeOf(err); cu != "CUDA_ERROR_ILLEGAL_ADDRESS" {
		t.Fatalf("short dynamic shared memory: got %v", err)
	}
}

func TestLocalMemoryAndConst(t *testing.T) {
	mem := newTestMem()
	m := loadKernels(t, mem)
	f := mustFunc(t, m, "localarr")
	out := mem.alloc(4 * 40)
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{40, 1, 1}, Params: params(t, f, out)}, mem, 1); err != nil {
		t.Fatal(err)
	}
	for i, v := range mem.f32s(out, 40) {
		if want := float32((i%16)*i) * 2; v != want {
			t.Fatalf("out[%d] = %v, want %v", i, v, want)
		}
	}
	if got, _ := f.Attribute(attrLocalSizeBytes); got != 64 {
		t.Fatalf("local size attribute = %d, want 64", got)
	}
}

func TestPrintfIsHarmless(t *testing.T) {
	mem := newTestMem()
	m := loadKernels(t, mem)
	f := mustFunc(t, m, "printer")
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{8, 1, 1}, Params: params(t, f, uint32(1))}, mem, 1); err != nil {
		t.Fatal(err)
	}
}

func TestModuleSurface(t *testing.T) {
	mem := newTestMem()
	m := loadKernels(t, mem)
	if _, err := m.Function("nope"); codeOf(err) != "CUDA_ERROR_NOT_FOUND" {
		t.Fatalf("Function(nope) = %v", err)
	}
	if _, err := m.Function("_Z4facti"); codeOf(err) != "CUDA_ERROR_NOT_FOUND" {
		t.Fatalf("a .func is not a kernel: %v", err)
	}
	if _, _, err := m.GlobalAddr("nope"); codeOf(err) != "CUDA_ERROR_NOT_FOUND" {
		t.Fatalf("GlobalAddr(nope) = %v", err)
	}
	names := map[string]Global{}
	for _, g := range m.Globals() {
		names[g.Name] = g
	}
	if g := names["table"]; g.Size != 16 || len(g.Init) != 16 || g.Init[4] != 2 {
		t.Fatalf("table = %+v", g)
	}
	if g := names["scale"]; g.Size != 4 || math.Float32frombits(uint32(g.Init[0])|uint32(g.Init[1])<<8|uint32(g.Init[2])<<16|uint32(g.Init[3])<<24) != 2 {
		t.Fatalf("scale = %+v", g)
	}
	f := mustFunc(t, m, "reduce")
	attrs := []struct {
		attr int32
		want int32
	}{
		{attrMaxThreadsPerBlock, 256},
		{attrSharedSizeBytes, 1024},
		{attrPTXVersion, 84},
		{attrBinaryVersion, 90},
	}
	for _, a := range attrs {
		if got, err := f.Attribute(a.attr); err != nil || got != a.want {
			t.Errorf("attribute %d = %d, %v; want %d", a.attr, got, err, a.want)
		}
	}
	// Static shared memory is per kernel: dynsh declares none of its own.
	if got, _ := mustFunc(t, m, "dynsh").Attribute(attrSharedSizeBytes); got != 0 {
		t.Errorf("dynsh static shared = %d, want 0", got)
	}
	if got, _ := mustFunc(t, m, "dynsh").Attribute(attrMaxDynamicSharedSize); got != DefaultSharedLimit {
		t.Errorf("dynsh max dynamic shared = %d, want %d", got, DefaultSharedLimit)
	}
	if _, err := f.Attribute(99); codeOf(err) != "CUDA_ERROR_INVALID_VALUE" {
		t.Errorf("attribute 99: %v", err)
	}
	if ps := f.Params(); len(ps) != 2 || ps[1].Offset != 8 || ps[1].Size != 8 {
		t.Errorf("params = %+v", ps)
	}
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{512, 1, 1}, Params: make([]byte, 16)}, mem, 1); codeOf(err) != "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" {
		t.Errorf("block above .maxntid: %v", err)
	}
	bad := []Launch{
		{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{2048, 1, 1}, Params: make([]byte, 16)},
		{Grid: [3]uint32{0, 1, 1}, Block: [3]uint32{32, 1, 1}, Params: make([]byte, 16)},
		{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Params: make([]byte, 8)},
		{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Params: make([]byte, 16), SharedBytes: 1 << 20},
	}
	for i, l := range bad {
		if err := f.Run(context.Background(), l, mem, 1); codeOf(err) != "CUDA_ERROR_INVALID_VALUE" {
			t.Errorf("bad launch %d: %v", i, err)
		}
		if err := f.Validate(l); codeOf(err) != "CUDA_ERROR_INVALID_VALUE" {
			t.Errorf("Validate of bad launch %d: %v", i, err)
		}
	}
	if err := f.Validate(Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{512, 1, 1}, Params: make([]byte, 16)}); codeOf(err) != "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" {
		t.Errorf("Validate above .maxntid: %v", err)
	}
	if err := f.Validate(Launch{Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: make([]byte, 16)}); err != nil {
		t.Errorf("Validate of a good launch: %v", err)
	}
}

func codeOf(err error) string {
	if err == nil {
		return "CUDA_SUCCESS"
	}
	return cu.Code(err).Name()
}

const hostilePTX = `
.version 8.0
.target sm_90
.address_size 64
.visible .func (.param .b32 r) rec(.param .b32 x)
{
	.reg .b32 %r<3>;
	ld.param.u32 %r1, [x];
	add.s32 %r2, %r1, 1;
	{
	.param .b32 p0;
	st.param.b32 [p0+0], %r2;
	.param .b32 r0;
	call.uni (r0), rec, (p0);
	ld.param.b32 %r2, [r0+0];
	}
	st.param.b32 [r+0], %r2;
	ret;
}
.visible .func deep(.param .b32 x)
{
	.local .align 8 .b8 depot[100000];
	.reg .b32 %r<3>;
	.reg .b64 %rd<3>;
	mov.u64 %rd1, depot;
	ld.param.u32 %r1, [x];
	st.local.u32 [%rd1+99996], %r1;
	add.s32 %r2, %r1, 1;
	{
	.param .b32 p0;
	st.param.b32 [p0+0], %r2;
	call.uni deep, (p0);
	}
	ret;
}
.visible .entry deep_stack()
{
	.reg .b32 %r<2>;
	mov.u32 %r1, 0;
	{
	.param .b32 p0;
	st.param.b32 [p0+0], %r1;
	call.uni deep, (p0);
	}
	ret;
}
.visible .entry spin()
{
	.reg .pred %p<2>;
	.reg .b32 %r<3>;
	mov.u32 %r1, 0;
L1:
	add.s32 %r1, %r1, 1;
	setp.ne.s32 %p1, %r1, -1;
	@%p1 bra L1;
	bra L1;
}
.visible .entry recurse()
{
	.reg .b32 %r<3>;
	mov.u32 %r1, 0;
	{
	.param .b32 p0;
	st.param.b32 [p0+0], %r1;
	.param .b32 r0;
	call.uni (r0), rec, (p0);
	}
	ret;
}
.visible .entry fault_one()
{
	.reg .pred %p<3>;
	.reg .b32 %r<4>;
	.reg .b64 %rd<3>;
	mov.u32 %r1, %ctaid.x;
	setp.eq.u32 %p1, %r1, 1;
	@%p1 bra FAULT;
	mov.u32 %r2, 0;
LOOP:
	add.s32 %r2, %r2, 1;
	setp.lt.u32 %p2, %r2, 200000;
	@%p2 bra LOOP;
	ret;
FAULT:
	mov.u64 %rd1, 0;
	st.global.u32 [%rd1], %r1;
	ret;
}
.visible .entry divergent_bar()
{
	.reg .pred %p<2>;
	.reg .b32 %r<3>;
	mov.u32 %r1, %tid.x;
	setp.lt.u32 %p1, %r1, 40;
	@%p1 bra L1;
	exit;
L1:
	bar.sync 0;
	ret;
}
.visible .entry early_return()
{
	.reg .pred %p<3>;
	.reg .b32 %r<3>;
	mov.u32 %r1, %tid.x;
	setp.ge.u32 %p1, %r1, 40;
	@%p1 ret;
	bar.sync 0;
	setp.ge.u32 %p2, %r1, 20;
	@%p2 bra L2;
	bar.sync 0;
L2:
	ret;
}
`

func TestHostileKernels(t *testing.T) {
	m := mustLoad(t, hostilePTX)
	cases := []struct {
		kernel  string
		block   uint32
		timeout time.Duration
		code    string
		detail  string
	}{
		{"spin", 64, 200 * time.Millisecond, "CUDA_ERROR_LAUNCH_FAILED", "deadline"},
		{"recurse", 32, 10 * time.Second, "CUDA_ERROR_LAUNCH_FAILED", "call depth"},
		{"deep_stack", 1, 10 * time.Second, "CUDA_ERROR_LAUNCH_FAILED", "local memory"},
		// Block 1 faults while block 0 is still running: the fault is
		// reported, not the interruption of block 0.
		{"fault_one", 32, 30 * time.Second, "CUDA_ERROR_ILLEGAL_ADDRESS", "block"},
		// Threads that exit no longer count at a barrier, as on the device.
		{"divergent_bar", 64, 10 * time.Second, "CUDA_SUCCESS", ""},
		// An early return from the kernel (nvcc's `if (i >= n) return;`)
		// ends the thread just as exit does.
		{"early_return", 64, 10 * time.Second, "CUDA_SUCCESS", ""},
	}
	for _, tc := range cases {
		t.Run(tc.kernel, func(t *testing.T) {
			f := mustFunc(t, m, tc.kernel)
			ctx, cancel := context.WithTimeout(context.Background(), tc.timeout)
			defer cancel()
			start := time.Now()
			err := f.Run(ctx, Launch{Grid: [3]uint32{4, 1, 1}, Block: [3]uint32{tc.block, 1, 1}}, newTestMem(), 2)
			if codeOf(err) != tc.code || tc.detail != "" && !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("got %v, want %s (%s)", err, tc.code, tc.detail)
			}
			if tc.kernel == "spin" && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("a cancelled launch must match its context's error: %v", err)
			}
			if d := time.Since(start); d > tc.timeout+2*time.Second {
				t.Fatalf("took %v", d)
			}
		})
	}
}

// TestSinfLargeArguments drives nvcc's sinf/cosf down the slow argument
// reduction path (a multi-word multiplication with carry chains).
func TestSinfLargeArguments(t *testing.T) {
	m := mustLoad(t, readTestdata(t, "nvcc/floatmath.sm_90.ptx"))
	f := mustFunc(t, m, "float_math")
	xs := []float32{1e30, -3e20, 123456.7, 1e9, 0.5, -7}
	n := len(xs)
	mem := newTestMem()
	for _, g := range m.Globals() {
		addr := mem.alloc(int(g.Size))
		copy(mem.bytes(addr), g.Init)
		if err := m.BindGlobal(g.Name, addr); err != nil {
			t.Fatal(err)
		}
	}
	x, y := mem.alloc(4*n), mem.alloc(4*n)
	exact, approx := mem.alloc(4*22*n), mem.alloc(4*16*n)
	mem.putF32(x, xs)
	ys := make([]float32, n)
	for i := range ys {
		ys[i] = 1
	}
	mem.putF32(y, ys)
	err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
		Params: params(t, f, x, y, exact, approx, int32(n))}, mem, 1)
	if err != nil {
		t.Fatal(err)
	}
	a := mem.f32s(approx, 16*n)
	for i, v := range xs {
		s, c := a[16*i+11], a[16*i+12]
		ws, wc := math.Sin(float64(v)), math.Cos(float64(v))
		if math.Abs(float64(s)-ws) > 1e-6 || math.Abs(float64(c)-wc) > 1e-6 {
			t.Errorf("x=%v: sinf=%v cosf=%v, want %v %v", v, s, c, ws, wc)
		}
	}
}

// TestDebugPTX loads PTX with debug directives and sections (nvcc -G /
// -lineinfo), a by-value struct parameter and a call prototype.
func TestDebugPTX(t *testing.T) {
	m := mustLoad(t, readTestdata(t, "debug.ptx"))
	f := mustFunc(t, m, "twice")
	ps := f.Params()
	if len(ps) != 2 || ps[1].Offset != 8 || ps[1].Size != 16 {
		t.Fatalf("params = %+v", ps)
	}
	mem := newTestMem()
	buf := mem.alloc(4 * 8)
	mem.putU32(buf, []uint32{1, 2, 3, 4, 5, 6, 7, 8})
	p := make([]byte, 24)
	binary.LittleEndian.PutUint64(p[0:], buf)
	binary.LittleEndian.PutUint32(p[8:], 6)
	binary.LittleEndian.PutUint64(p[16:], 100)
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{8, 1, 1}, Params: p}, mem, 1); err != nil {
		t.Fatal(err)
	}
	want := []uint32{102, 104, 106, 108, 110, 112, 7, 8}
	if got := mem.u32s(buf, 8); !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestParamAddresses covers kernel parameters reached through an address
// (nvcc's __grid_constant__ and by-value structs indexed at run time).
func TestParamAddresses(t *testing.T) {
	m := mustLoad(t, `.version 8.0
.target sm_90
.address_size 64
.visible .entry pk(.param .align 8 .b8 pk_param_0[16], .param .u64 pk_param_1)
{
	.reg .b32 %r<4>;
	.reg .b64 %rd<6>;
	mov.b64 %rd1, pk_param_0;
	cvta.param.u64 %rd2, %rd1;
	ld.u32 %r1, [%rd2+4];
	ld.param.u32 %r2, [%rd1+8];
	add.s32 %r3, %r1, %r2;
	ld.param.u64 %rd3, [pk_param_1];
	cvta.to.global.u64 %rd4, %rd3;
	st.global.u32 [%rd4], %r3;
	ret;
}
`)
	f := mustFunc(t, m, "pk")
	mem := newTestMem()
	out := mem.alloc(4)
	p := make([]byte, 24)
	binary.LittleEndian.PutUint32(p[4:], 40)
	binary.LittleEndian.PutUint32(p[8:], 2)
	binary.LittleEndian.PutUint64(p[16:], out)
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Params: p}, mem, 1); err != nil {
		t.Fatal(err)
	}
	if got := mem.u32s(out, 1)[0]; got != 42 {
		t.Fatalf("got %d, want 42", got)
	}
}

func TestRegisterLimits(t *testing.T) {
	kernel := func(n int) string {
		return fmt.Sprintf(".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n\t.reg .b32 %%r<%d>;\n\tmov.u32 %%r1, 1;\n\tret;\n}\n", n)
	}
	if _, err := Load([]byte(kernel(100000))); codeOf(err) != "CUDA_ERROR_INVALID_PTX" {
		t.Fatalf("100000 registers: %v", err)
	}
	m := mustLoad(t, kernel(60000))
	f := mustFunc(t, m, "k")
	err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1024, 1, 1}}, newTestMem(), 1)
	if codeOf(err) != "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" {
		t.Fatalf("60000 registers x 1024 threads: %v", err)
	}
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}, newTestMem(), 1); err != nil {
		t.Fatalf("60000 registers x 32 threads: %v", err)
	}
	// The attribute tells the program how many threads fit.
	maxT, err := f.Attribute(attrMaxThreadsPerBlock)
	if err != nil || maxT < 32 || maxT >= 1024 || maxT%32 != 0 {
		t.Fatalf("max threads per block = %d, %v", maxT, err)
	}
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{uint32(maxT), 1, 1}}, newTestMem(), 1); err != nil {
		t.Fatalf("a block of the reported maximum (%d) must launch: %v", maxT, err)
	}
}

func cBytes(s string) string {
	var parts []string
	for _, b := range []byte(s + "\x00") {
		parts = append(parts, strconv.Itoa(int(b)))
	}
	return strings.Join(parts, ", ")
}

// TestPrintf runs nvcc's printf calling sequence: the arguments packed in
// local memory, each aligned to its size, passed to vprintf.
func TestPrintf(t *testing.T) {
	format := "t=%d v=%.1f s=%s c=%c n=%lld x=%04x p=%% bad=%q\n"
	src := fmt.Sprintf(`.version 8.4
.target sm_90
.address_size 64
.extern .func (.param .b32 func_retval0) vprintf(.param .b64 vprintf_param_0, .param .b64 vprintf_param_1);
.global .align 1 .b8 $str[%d] = {%s};
.global .align 1 .b8 $str2[3] = {%s};
.visible .entry pr()
{
	.local .align 8 .b8 __local_depot0[48];
	.reg .b64 %%SP;
	.reg .b64 %%SPL;
	.reg .b32 %%r<5>;
	.reg .f64 %%fd<2>;
	.reg .b64 %%rd<10>;
	mov.u64 %%SPL, __local_depot0;
	cvta.local.u64 %%SP, %%SPL;
	mov.u32 %%r1, %%tid.x;
	add.u64 %%rd1, %%SP, 0;
	add.u64 %%rd2, %%SPL, 0;
	st.local.u32 [%%rd2], %%r1;
	cvt.rn.f64.u32 %%fd1, %%r1;
	st.local.f64 [%%rd2+8], %%fd1;
	mov.u64 %%rd3, $str2;
	cvta.global.u64 %%rd4, %%rd3;
	st.local.u64 [%%rd2+16], %%rd4;
	mov.u32 %%r2, 65;
	st.local.u32 [%%rd2+24], %%r2;
	mov.u64 %%rd5, -5;
	st.local.u64 [%%rd2+32], %%rd5;
	add.s32 %%r4, %%r1, 171;
	st.local.u32 [%%rd2+40], %%r4;
	mov.u64 %%rd6, $str;
	cvta.global.u64 %%rd7, %%rd6;
	{
	.reg .b32 temp_param_reg;
	.param .b64 param0;
	st.param.b64 [param0+0], %%rd7;
	.param .b64 param1;
	st.param.b64 [param1+0], %%rd1;
	.param .b32 retval0;
	call.uni (retval0), vprintf, (param0, param1);
	ld.param.b32 %%r3, [retval0+0];
	}
	ret;
}
`, len(format)+1, cBytes(format), cBytes("hi"))
	mem := newTestMem()
	m := mustLoad(t, src)
	for _, g := range m.Globals() {
		addr := mem.alloc(int(g.Size))
		copy(mem.bytes(addr), g.Init)
		if err := m.BindGlobal(g.Name, addr); err != nil {
			t.Fatal(err)
		}
	}
	f := mustFunc(t, m, "pr")
	var out strings.Builder
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{2, 1, 1}, Output: &out}, mem, 1); err != nil {
		t.Fatal(err)
	}
	want := "t=0 v=0.0 s=hi c=A n=-5 x=00ab p=% bad=%q\nt=1 v=1.0 s=hi c=A n=-5 x=00ac p=% bad=%q\n"
	if out.String() != want {
		t.Fatalf("printf output\n%q\nwant\n%q", out.String(), want)
	}
	// Without an Output the same launch runs and prints nothing.
	if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{2, 1, 1}}, mem, 1); err != nil {
		t.Fatal(err)
	}
}
