package emulated

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// testPTX is a small module in the shape nvcc emits: a vector add, a
// kernel that writes through a pointer it is given (to provoke faults),
// and a module variable.
const testPTX = `
.version 8.0
.target sm_90
.address_size 64

.global .align 4 .u32 counter = 7;

.visible .entry vadd(
	.param .u64 vadd_param_0,
	.param .u64 vadd_param_1,
	.param .u64 vadd_param_2,
	.param .u32 vadd_param_3
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<6>;
	.reg .f32 %f<4>;
	.reg .b64 %rd<11>;

	ld.param.u64 %rd1, [vadd_param_0];
	ld.param.u64 %rd2, [vadd_param_1];
	ld.param.u64 %rd3, [vadd_param_2];
	ld.param.u32 %r2, [vadd_param_3];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r1, %r3, %r4, %r5;
	setp.ge.s32 %p1, %r1, %r2;
	@%p1 bra $L__BB0_2;
	cvta.to.global.u64 %rd4, %rd1;
	mul.wide.s32 %rd5, %r1, 4;
	add.s64 %rd6, %rd4, %rd5;
	cvta.to.global.u64 %rd7, %rd2;
	add.s64 %rd8, %rd7, %rd5;
	ld.global.f32 %f1, [%rd8];
	ld.global.f32 %f2, [%rd6];
	add.f32 %f3, %f2, %f1;
	cvta.to.global.u64 %rd9, %rd3;
	add.s64 %rd10, %rd9, %rd5;
	st.global.f32 [%rd10], %f3;
$L__BB0_2:
	ret;
}

.visible .entry poke(
	.param .u64 poke_param_0
)
{
	.reg .b32 %r<2>;
	.reg .b64 %rd<3>;

	ld.param.u64 %rd1, [poke_param_0];
	cvta.to.global.u64 %rd2, %rd1;
	mov.u32 %r1, 42;
	st.global.u32 [%rd2], %r1;
	ret;
}
`

// loadTestModule loads testPTX, skipping while the interpreter cannot
// parse PTX yet.
func loadTestModule(t *testing.T, d *Device, c backend.Ctx) backend.Module {
	t.Helper()
	m, err := d.ModuleLoad(context.Background(), c, []byte(testPTX))
	if cu.Code(err) == cu.ErrorNotSupported {
		t.Skipf("PTX interpreter not available: %v", err)
	}
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return m
}

func TestKernelVectorAdd(t *testing.T) {
	d, c := newTestDevice(t, 1<<30)
	ctx := context.Background()
	m := loadTestModule(t, d, c)
	f, params, err := d.ModuleGetFunction(ctx, c, m, "vadd")
	if err != nil {
		t.Fatal(err)
	}
	wantLayout := []backend.Param{{Offset: 0, Size: 8}, {Offset: 8, Size: 8}, {Offset: 16, Size: 8}, {Offset: 24, Size: 4}}
	if len(params) != len(wantLayout) {
		t.Fatalf("params %v", params)
	}
	for i := range params {
		if params[i] != wantLayout[i] {
			t.Fatalf("params %v, want %v", params, wantLayout)
		}
	}
	const n = 1000
	a, b := make([]byte, 4*n), make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(a[4*i:], math.Float32bits(float32(i)))
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(2*i)+0.5))
	}
	pa, _ := d.MemAlloc(ctx, c, 4*n)
	pb, _ := d.MemAlloc(ctx, c, 4*n)
	pc, _ := d.MemAlloc(ctx, c, 4*n)
	_ = d.MemcpyHtoD(ctx, c, pa, bytes.NewReader(a), 4*n, 0)
	_ = d.MemcpyHtoD(ctx, c, pb, bytes.NewReader(b), 4*n, 0)
	pbuf := make([]byte, 28)
	binary.LittleEndian.PutUint64(pbuf[0:], uint64(pa))
	binary.LittleEndian.PutUint64(pbuf[8:], uint64(pb))
	binary.LittleEndian.PutUint64(pbuf[16:], uint64(pc))
	binary.LittleEndian.PutUint32(pbuf[24:], n)
	cfg := backend.LaunchConfig{Grid: [3]uint32{(n + 127) / 128, 1, 1}, Block: [3]uint32{128, 1, 1}, Params: pbuf}
	if err := d.Launch(ctx, c, f, cfg); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := d.MemcpyDtoH(ctx, c, &out, pc, 4*n, 0); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		got := math.Float32frombits(binary.LittleEndian.Uint32(out.Bytes()[4*i:]))
		if want := float32(3*i) + 0.5; got != want {
			t.Fatalf("c[%d] = %v, want %v", i, got, want)
		}
	}
}

func TestKernelGlobalsAndFaults(t *testing.T) {
	d, c := newTestDevice(t, 1<<30)
	ctx := context.Background()
	m := loadTestModule(t, d, c)
	g, size, err := d.ModuleGetGlobal(ctx, c, m, "counter")
	if err != nil || size != 4 {
		t.Fatalf("global: %v size %d", err, size)
	}
	var out bytes.Buffer
	_ = d.MemcpyDtoH(ctx, c, &out, g, 4, 0)
	if v := binary.LittleEndian.Uint32(out.Bytes()); v != 7 {
		t.Fatalf("counter initialised to %d, want 7", v)
	}
	wantCode(t, d.MemFree(ctx, c, g), cu.ErrorInvalidValue)
	_, _, err = d.ModuleGetFunction(ctx, c, m, "nope")
	wantCode(t, err, cu.ErrorNotFound)

	poke, _, err := d.ModuleGetFunction(ctx, c, m, "poke")
	if err != nil {
		t.Fatal(err)
	}
	params := make([]byte, 8)
	binary.LittleEndian.PutUint64(params, uint64(g))
	one := backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Params: params}
	if err := d.Launch(ctx, c, poke, one); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	_ = d.MemcpyDtoH(ctx, c, &out, g, 4, 0)
	if v := binary.LittleEndian.Uint32(out.Bytes()); v != 42 {
		t.Fatalf("kernel wrote %d to the global, want 42", v)
	}

	// A wild store is not reported by the launch but by the next call, and
	// from then on by every call on the context.
	binary.LittleEndian.PutUint64(params, 0x10)
	if err := d.Launch(ctx, c, poke, one); err != nil {
		t.Fatalf("launch reported the kernel's fault itself: %v", err)
	}
	wantCode(t, d.CtxSynchronize(ctx, c), cu.ErrorIllegalAddress)
	_, err = d.MemAlloc(ctx, c, 16)
	wantCode(t, err, cu.ErrorIllegalAddress)

	if err := d.ModuleUnload(ctx, c, m); cu.Code(err) != cu.ErrorIllegalAddress {
		t.Fatalf("unload on a poisoned context: %v", err)
	}
}

func TestModuleUnloadFreesGlobals(t *testing.T) {
	d, c := newTestDevice(t, 1<<30)
	ctx := context.Background()
	m := loadTestModule(t, d, c)
	if d.MemInUse() == 0 {
		t.Fatal("module variable not allocated")
	}
	f, _, _ := d.ModuleGetFunction(ctx, c, m, "vadd")
	if err := d.ModuleUnload(ctx, c, m); err != nil {
		t.Fatal(err)
	}
	if d.MemInUse() != 0 {
		t.Fatalf("%d bytes still in use after unload", d.MemInUse())
	}
	_, err := d.FuncGetAttribute(ctx, c, f, 0)
	wantCode(t, err, cu.ErrorInvalidHandle)
	_, err = d.ModuleLoad(ctx, c, []byte("not ptx"))
	if err == nil {
		t.Fatal("garbage image loaded")
	}
}

const emptyPTX = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry empty()\n{\n  ret;\n}\n"

// BenchmarkEmptyLaunch is the backend's share of an asynchronous launch.
func BenchmarkEmptyLaunch(b *testing.B) {
	d := New(Config{MemBytes: 1 << 20, Seed: "bench"})
	defer d.Close()
	ctx := context.Background()
	c, _ := d.PrimaryCtxRetain(ctx, 0)
	m, err := d.ModuleLoad(ctx, c, []byte(emptyPTX))
	if err != nil {
		b.Skipf("PTX interpreter not available: %v", err)
	}
	f, _, err := d.ModuleGetFunction(ctx, c, m, "empty")
	if err != nil {
		b.Fatal(err)
	}
	cfg := backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}}
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Launch(ctx, c, f, cfg); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFuncSetAttributes: the attributes CUDA lets a program set are kept
// and reported back; fixed ones and bad values are refused.
func TestFuncSetAttributes(t *testing.T) {
	d, c := newTestDevice(t, 1<<30)
	ctx := context.Background()
	m := loadTestModule(t, d, c)
	f, _, err := d.ModuleGetFunction(ctx, c, m, "vadd")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		attr, value int32
		ok          bool
	}{
		{"max dynamic shared", funcAttrMaxDynamicShared, 64 << 10, true},
		{"max dynamic shared past the opt-in limit", funcAttrMaxDynamicShared, sharedPerBlockOptin + 1, false},
		{"carveout", funcAttrPreferredCarveout, 50, true},
		{"carveout out of range", funcAttrPreferredCarveout, 101, false},
		{"required cluster width", funcAttrClusterWidth, 2, true},
		{"required cluster depth", funcAttrClusterWidth + 2, 1, true},
		{"cluster width too large", funcAttrClusterWidth, maxClusterSize + 1, false},
		{"non-portable cluster size allowed", funcAttrNonPortableCluster, 1, true},
		{"non-portable cluster size not a flag", funcAttrNonPortableCluster, 2, false},
		{"cluster scheduling policy", funcAttrClusterScheduling, 2, true},
		{"cluster scheduling policy unknown", funcAttrClusterScheduling, 3, false},
		{"registers are fixed", 4, 32, false},
	} {
		err := d.FuncSetAttribute(ctx, c, f, tc.attr, tc.value)
		if (err == nil) != tc.ok {
			t.Errorf("%s: set attribute %d to %d: %v", tc.name, tc.attr, tc.value, err)
			continue
		}
		if !tc.ok {
			wantCode(t, err, cu.ErrorInvalidValue)
			continue
		}
		if got, err := d.FuncGetAttribute(ctx, c, f, tc.attr); err != nil || got != tc.value {
			t.Errorf("%s: attribute %d reads %d (%v) after setting %d", tc.name, tc.attr, got, err, tc.value)
		}
	}
}
