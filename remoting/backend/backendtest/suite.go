// Package backendtest is the conformance suite of backend.Device: one set
// of test functions that every device backend runs, so that the emulated
// device and the real driver are held to the same behaviour (results and
// CUDA error codes) through the interface the worker uses.
//
// A backend's tests call Run with a function that makes a fresh device:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) backend.Device { return emulated.New(emulated.Config{}) })
//	}
//
// The emulated backend runs it in every `go test`; the cuda backend runs
// it where a GPU is present (the GPU suite, e2e/gpu/run.sh) and skips
// elsewhere. The suite needs nothing from either backend beyond the
// interface, and one device ordinal, 0.
package backendtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Factory makes a fresh device for one test; the suite closes it.
type Factory func(t *testing.T) backend.Device

// Run runs every conformance test against devices from newDevice.
func Run(t *testing.T, newDevice Factory) {
	tests := []struct {
		name string
		fn   func(*testing.T, backend.Device)
	}{
		{"Info", testInfo},
		{"PrimaryContext", testPrimaryContext},
		{"CreatedContext", testCreatedContext},
		{"MemoryRoundTrip", testMemoryRoundTrip},
		{"MemoryErrors", testMemoryErrors},
		{"Memset", testMemset},
		{"ModuleAndLaunch", testModuleAndLaunch},
		{"ModuleErrors", testModuleErrors},
		{"LaunchErrors", testLaunchErrors},
		{"Streams", testStreams},
		{"Events", testEvents},
		{"ForeignHandles", testForeignHandles},
		{"FreeWhileRunning", testFreeWhileRunning},
		// Last: on a real GPU a faulting kernel leaves the process's
		// device state unusable, for every context.
		{"StickyFault", testStickyFault},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newDevice(t)
			t.Cleanup(func() {
				if err := d.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
			tc.fn(t, d)
		})
	}
}

var bg = context.Background()

// wantCode fails unless err carries CUDA result want.
func wantCode(t *testing.T, what string, err error, want cu.Result) {
	t.Helper()
	if got := cu.Code(err); got != want {
		t.Fatalf("%s: got %v (%v), want %v", what, got, err, want)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func primary(t *testing.T, d backend.Device) backend.Ctx {
	t.Helper()
	c, err := d.PrimaryCtxRetain(bg, 0)
	must(t, "PrimaryCtxRetain", err)
	t.Cleanup(func() { _ = d.PrimaryCtxRelease(bg, 0) })
	return c
}

// Device attributes the suite reads (CUdevice_attribute values).
const (
	attrMaxThreadsPerBlock = 1
	attrWarpSize           = 10
	attrCCMajor            = 75
	funcAttrMaxThreads     = 0
	eventDisableTiming     = 2
)

func testInfo(t *testing.T, d backend.Device) {
	v, err := d.DriverVersion(bg)
	must(t, "DriverVersion", err)
	if v < 12000 {
		t.Errorf("driver version %d, want CUDA 12 or later", v)
	}
	n, err := d.DeviceCount(bg)
	must(t, "DeviceCount", err)
	if n < 1 {
		t.Fatalf("DeviceCount = %d", n)
	}
	name, err := d.DeviceName(bg, 0)
	must(t, "DeviceName", err)
	if strings.TrimSpace(name) == "" {
		t.Error("empty device name")
	}
	uuid, err := d.DeviceUUID(bg, 0)
	must(t, "DeviceUUID", err)
	if uuid == ([16]byte{}) {
		t.Error("zero UUID")
	}
	mem, err := d.DeviceTotalMem(bg, 0)
	must(t, "DeviceTotalMem", err)
	if mem < 1<<30 {
		t.Errorf("total memory %d bytes, want at least 1 GiB", mem)
	}
	for _, a := range []struct {
		attr, min, max int32
	}{{attrWarpSize, 32, 32}, {attrMaxThreadsPerBlock, 1024, 1024}, {attrCCMajor, 7, 100}} {
		got, err := d.DeviceAttribute(bg, a.attr, 0)
		must(t, "DeviceAttribute", err)
		if got < a.min || got > a.max {
			t.Errorf("attribute %d = %d, want %d..%d", a.attr, got, a.min, a.max)
		}
	}
	bus, err := d.DevicePCIBusID(bg, 0)
	must(t, "DevicePCIBusID", err)
	if !strings.Contains(bus, ":") {
		t.Errorf("PCI bus id %q", bus)
	}
	_, err = d.DeviceName(bg, n+7)
	wantCode(t, "DeviceName of a device that does not exist", err, cu.ErrorInvalidDevice)
	_, err = d.DeviceAttribute(bg, attrWarpSize, -1)
	wantCode(t, "DeviceAttribute of device -1", err, cu.ErrorInvalidDevice)
}

func testPrimaryContext(t *testing.T, d backend.Device) {
	c1, err := d.PrimaryCtxRetain(bg, 0)
	must(t, "PrimaryCtxRetain", err)
	c2, err := d.PrimaryCtxRetain(bg, 0)
	must(t, "PrimaryCtxRetain again", err)
	if c1 != c2 {
		t.Errorf("two retains gave contexts %#x and %#x; the primary context is one", c1, c2)
	}
	_, active, err := d.PrimaryCtxState(bg, 0)
	must(t, "PrimaryCtxState", err)
	if !active {
		t.Error("primary context not active while retained")
	}
	dev, err := d.CtxDevice(bg, c1)
	must(t, "CtxDevice", err)
	if dev != 0 {
		t.Errorf("CtxDevice = %d", dev)
	}
	must(t, "CtxSynchronize", d.CtxSynchronize(bg, c1))
	must(t, "PrimaryCtxRelease", d.PrimaryCtxRelease(bg, 0))
	must(t, "PrimaryCtxRelease", d.PrimaryCtxRelease(bg, 0))
}

func testCreatedContext(t *testing.T, d backend.Device) {
	c, err := d.CtxCreate(bg, 0, 0)
	must(t, "CtxCreate", err)
	p, err := d.MemAlloc(bg, c, 4096)
	must(t, "MemAlloc", err)
	must(t, "CtxSynchronize", d.CtxSynchronize(bg, c))
	must(t, "CtxDestroy", d.CtxDestroy(bg, c))
	// Everything the context owned went with it.
	wantCode(t, "CtxSynchronize of a destroyed context", d.CtxSynchronize(bg, c), cu.ErrorInvalidContext)
	wantCode(t, "MemFree in a destroyed context", d.MemFree(bg, c, p), cu.ErrorInvalidContext)
	wantCode(t, "CtxDestroy twice", d.CtxDestroy(bg, c), cu.ErrorInvalidContext)
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed) | 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func readBack(t *testing.T, d backend.Device, c backend.Ctx, p backend.DevPtr, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	must(t, "MemcpyDtoH", d.MemcpyDtoH(bg, c, &buf, p, uint64(n), 0))
	if buf.Len() != n {
		t.Fatalf("MemcpyDtoH wrote %d bytes, want %d", buf.Len(), n)
	}
	return buf.Bytes()
}

func testMemoryRoundTrip(t *testing.T, d backend.Device) {
	c := primary(t, d)
	const n = 1<<20 + 12345
	a, err := d.MemAlloc(bg, c, n)
	must(t, "MemAlloc", err)
	b, err := d.MemAlloc(bg, c, n)
	must(t, "MemAlloc", err)
	if a == 0 || b == 0 || a == b {
		t.Fatalf("allocations at %#x and %#x", a, b)
	}
	src := pattern(n, 3)
	must(t, "MemcpyHtoD", d.MemcpyHtoD(bg, c, a, bytes.NewReader(src), n, 0))
	if got := readBack(t, d, c, a, n); !bytes.Equal(got, src) {
		t.Fatal("device memory does not hold what was copied in")
	}
	must(t, "MemcpyDtoD", d.MemcpyDtoD(bg, c, b+100, a+7, n-100, 0))
	got := readBack(t, d, c, b+100, n-100)
	if !bytes.Equal(got, src[7:n-93]) {
		t.Fatal("MemcpyDtoD copied the wrong bytes")
	}
	base, size, err := d.MemGetAddressRange(bg, c, a+5000)
	must(t, "MemGetAddressRange", err)
	if base != a || size < n {
		t.Errorf("MemGetAddressRange(a+5000) = %#x, %d; want %#x, >= %d", base, size, a, n)
	}
	free, total, err := d.MemGetInfo(bg, c)
	must(t, "MemGetInfo", err)
	if free > total || total == 0 {
		t.Errorf("MemGetInfo = %d free of %d", free, total)
	}
	must(t, "MemFree", d.MemFree(bg, c, a))
	must(t, "MemFree", d.MemFree(bg, c, b))
}

// countingReader counts what a copy consumed.
type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func testMemoryErrors(t *testing.T, d backend.Device) {
	c := primary(t, d)
	_, err := d.MemAlloc(bg, c, 0)
	wantCode(t, "MemAlloc of 0 bytes", err, cu.ErrorInvalidValue)
	_, err = d.MemAlloc(bg, c, 1<<60)
	wantCode(t, "MemAlloc of 1 EiB", err, cu.ErrorOutOfMemory)
	p, err := d.MemAlloc(bg, c, 4096)
	must(t, "MemAlloc", err)
	var sink bytes.Buffer
	wantCode(t, "MemcpyDtoH past the end", d.MemcpyDtoH(bg, c, &sink, p+4000, 200, 0), cu.ErrorInvalidValue)
	if sink.Len() != 0 {
		t.Errorf("a failed MemcpyDtoH wrote %d bytes", sink.Len())
	}
	// A failed host-to-device copy still consumes its bytes, so that the
	// connection stays framed.
	cr := &countingReader{r: bytes.NewReader(make([]byte, 200))}
	wantCode(t, "MemcpyHtoD past the end", d.MemcpyHtoD(bg, c, p+4000, cr, 200, 0), cu.ErrorInvalidValue)
	if cr.n != 200 {
		t.Errorf("a failed MemcpyHtoD consumed %d of 200 bytes", cr.n)
	}
	must(t, "MemFree", d.MemFree(bg, c, p))
	wantCode(t, "MemFree twice", d.MemFree(bg, c, p), cu.ErrorInvalidValue)
	wantCode(t, "MemcpyDtoH from freed memory", d.MemcpyDtoH(bg, c, &sink, p, 16, 0), cu.ErrorInvalidValue)
}

func testMemset(t *testing.T, d backend.Device) {
	c := primary(t, d)
	const n = 4096
	p, err := d.MemAlloc(bg, c, n)
	must(t, "MemAlloc", err)
	must(t, "Memset 8", d.Memset(bg, c, p, 0x1234_56ab, 1, n, 0))
	must(t, "Memset 16", d.Memset(bg, c, p+2, 0xbeef, 2, 10, 0))
	must(t, "Memset 32", d.Memset(bg, c, p+64, 0xdeadc0de, 4, 5, 0))
	want := bytes.Repeat([]byte{0xab}, n)
	for i := 0; i < 10; i++ {
		binary.LittleEndian.PutUint16(want[2+2*i:], 0xbeef)
	}
	for i := 0; i < 5; i++ {
		binary.LittleEndian.PutUint32(want[64+4*i:], 0xdeadc0de)
	}
	if got := readBack(t, d, c, p, n); !bytes.Equal(got, want) {
		t.Fatal("memsets wrote the wrong bytes")
	}
	wantCode(t, "Memset 32 at an unaligned address", d.Memset(bg, c, p+2, 1, 4, 4, 0), cu.ErrorInvalidValue)
	wantCode(t, "Memset past the end", d.Memset(bg, c, p, 1, 4, n, 0), cu.ErrorInvalidValue)
}

// suitePTX is the suite's module: a kernel that reads, writes and counts
// into a module variable, one that spins for a given time before it
// writes, and one that faults.
const suitePTX = `.version 7.0
.target sm_70
.address_size 64

.visible .global .align 4 .u32 launched = 7;

.visible .entry scale(.param .u64 in, .param .u64 out, .param .u32 n)
{
	.reg .pred %p;
	.reg .b32 %r<8>;
	.reg .b64 %rd<8>;
	ld.param.u64 %rd1, [in];
	ld.param.u64 %rd2, [out];
	ld.param.u32 %r1, [n];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.s32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %p, %r5, %r1;
	@%p bra DONE;
	mul.wide.u32 %rd3, %r5, 4;
	add.s64 %rd4, %rd1, %rd3;
	add.s64 %rd5, %rd2, %rd3;
	ld.global.u32 %r6, [%rd4];
	mad.lo.s32 %r7, %r6, 3, %r5;
	st.global.u32 [%rd5], %r7;
	atom.global.add.u32 %r6, [launched], 1;
DONE:
	ret;
}

.visible .entry spin(.param .u64 out, .param .u64 ns)
{
	.reg .pred %p;
	.reg .b64 %rd<6>;
	.reg .b32 %r1;
	ld.param.u64 %rd1, [out];
	ld.param.u64 %rd2, [ns];
	mov.u64 %rd3, %globaltimer;
WAIT:
	mov.u64 %rd4, %globaltimer;
	sub.u64 %rd5, %rd4, %rd3;
	setp.lt.u64 %p, %rd5, %rd2;
	@%p bra WAIT;
	mov.u32 %r1, 1;
	st.global.u32 [%rd1], %r1;
	ret;
}

.visible .entry fault(.param .u64 p)
{
	.reg .b64 %rd<2>;
	.reg .b32 %r1;
	ld.param.u64 %rd1, [p];
	mov.u32 %r1, 1;
	st.global.u32 [%rd1], %r1;
	ret;
}
`

func loadSuite(t *testing.T, d backend.Device, c backend.Ctx) backend.Module {
	t.Helper()
	m, err := d.ModuleLoad(bg, c, append([]byte(suitePTX), 0))
	must(t, "ModuleLoad", err)
	return m
}

func params(ps []backend.Param, vals ...uint64) []byte {
	end := 0
	for _, p := range ps {
		end = max(end, int(p.Offset+p.Size))
	}
	buf := make([]byte, end)
	for i, p := range ps {
		var tmp [8]byte
		binary.LittleEndian.PutUint64(tmp[:], vals[i])
		copy(buf[p.Offset:p.Offset+p.Size], tmp[:p.Size])
	}
	return buf
}

func testModuleAndLaunch(t *testing.T, d backend.Device) {
	c := primary(t, d)
	m := loadSuite(t, d, c)
	f, ps, err := d.ModuleGetFunction(bg, c, m, "scale")
	must(t, "ModuleGetFunction", err)
	want := []backend.Param{{Offset: 0, Size: 8}, {Offset: 8, Size: 8}, {Offset: 16, Size: 4}}
	if len(ps) != len(want) {
		t.Fatalf("parameters %v, want %v", ps, want)
	}
	for i := range ps {
		if ps[i] != want[i] {
			t.Fatalf("parameters %v, want %v", ps, want)
		}
	}
	g, size, err := d.ModuleGetGlobal(bg, c, m, "launched")
	must(t, "ModuleGetGlobal", err)
	if size != 4 {
		t.Errorf("global size %d, want 4", size)
	}
	if v := binary.LittleEndian.Uint32(readBack(t, d, c, g, 4)); v != 7 {
		t.Errorf("global starts at %d, want its initializer 7", v)
	}
	maxThreads, err := d.FuncGetAttribute(bg, c, f, funcAttrMaxThreads)
	must(t, "FuncGetAttribute", err)
	if maxThreads < 256 {
		t.Errorf("max threads per block %d", maxThreads)
	}
	const n = 1000
	in := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(i*i))
	}
	a, err := d.MemAlloc(bg, c, 4*n)
	must(t, "MemAlloc", err)
	b, err := d.MemAlloc(bg, c, 4*n)
	must(t, "MemAlloc", err)
	must(t, "MemcpyHtoD", d.MemcpyHtoD(bg, c, a, bytes.NewReader(in), 4*n, 0))
	cfg := backend.LaunchConfig{Grid: [3]uint32{(n + 127) / 128, 1, 1}, Block: [3]uint32{128, 1, 1}, Params: params(ps, uint64(a), uint64(b), n)}
	must(t, "Launch", d.Launch(bg, c, f, cfg))
	must(t, "Launch again", d.Launch(bg, c, f, cfg))
	must(t, "CtxSynchronize", d.CtxSynchronize(bg, c))
	out := readBack(t, d, c, b, 4*n)
	for i := range n {
		if got, want := binary.LittleEndian.Uint32(out[4*i:]), uint32(i*i*3+i); got != want {
			t.Fatalf("out[%d] = %d, want %d", i, got, want)
		}
	}
	if v := binary.LittleEndian.Uint32(readBack(t, d, c, g, 4)); v != 7+2*n {
		t.Errorf("global after two launches = %d, want %d", v, 7+2*n)
	}
	must(t, "ModuleUnload", d.ModuleUnload(bg, c, m))
	_, _, err = d.ModuleGetFunction(bg, c, m, "scale")
	wantCode(t, "ModuleGetFunction of an unloaded module", err, cu.ErrorInvalidHandle)
}

func testModuleErrors(t *testing.T, d backend.Device) {
	c := primary(t, d)
	bad := strings.Replace(suitePTX, "mad.lo.s32 %r7, %r6, 3, %r5;", "mad.lo.s32 %r7, %r6, 3;", 1)
	_, err := d.ModuleLoad(bg, c, append([]byte(bad), 0))
	wantCode(t, "ModuleLoad of PTX with a malformed instruction", err, cu.ErrorInvalidPTX)
	m := loadSuite(t, d, c)
	_, _, err = d.ModuleGetFunction(bg, c, m, "no_such_kernel")
	wantCode(t, "ModuleGetFunction of a missing kernel", err, cu.ErrorNotFound)
	_, _, err = d.ModuleGetGlobal(bg, c, m, "no_such_global")
	wantCode(t, "ModuleGetGlobal of a missing variable", err, cu.ErrorNotFound)
}

func testLaunchErrors(t *testing.T, d backend.Device) {
	c := primary(t, d)
	m := loadSuite(t, d, c)
	f, ps, err := d.ModuleGetFunction(bg, c, m, "scale")
	must(t, "ModuleGetFunction", err)
	p := params(ps, 0, 0, 0)
	for _, tc := range []struct {
		name        string
		grid, block [3]uint32
	}{
		{"a block of 2048 threads", [3]uint32{1, 1, 1}, [3]uint32{2048, 1, 1}},
		{"a zero grid", [3]uint32{0, 1, 1}, [3]uint32{32, 1, 1}},
		{"a zero block", [3]uint32{1, 1, 1}, [3]uint32{0, 1, 1}},
		{"a block too deep", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 128}},
	} {
		err := d.Launch(bg, c, f, backend.LaunchConfig{Grid: tc.grid, Block: tc.block, Params: p})
		wantCode(t, "Launch with "+tc.name, err, cu.ErrorInvalidValue)
	}
	// n = 0: every thread returns at once.
	must(t, "Launch of nothing to do", d.Launch(bg, c, f, backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}, Params: p}))
	must(t, "CtxSynchronize", d.CtxSynchronize(bg, c))
}

func testStickyFault(t *testing.T, d backend.Device) {
	c, err := d.CtxCreate(bg, 0, 0)
	must(t, "CtxCreate", err)
	m := loadSuite(t, d, c)
	f, ps, err := d.ModuleGetFunction(bg, c, m, "fault")
	must(t, "ModuleGetFunction", err)
	// A launch is asynchronous: the fault shows at the next
	// synchronisation, and at every call on the context after it.
	err = d.Launch(bg, c, f, backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Params: params(ps, 16)})
	if err != nil && cu.Code(err) != cu.ErrorIllegalAddress {
		t.Fatalf("Launch: %v", err)
	}
	wantCode(t, "CtxSynchronize after a faulting kernel", d.CtxSynchronize(bg, c), cu.ErrorIllegalAddress)
	_, err = d.MemAlloc(bg, c, 16)
	wantCode(t, "MemAlloc after the fault (sticky)", err, cu.ErrorIllegalAddress)
	must(t, "CtxDestroy of the faulted context", d.CtxDestroy(bg, c))
	// What other contexts see differs: the real driver poisons the whole
	// process (cuCtxCreate then fails with the same error), the emulated
	// device only the faulted context. gpuctl runs one session per worker
	// process, so either way the session ends.
}

func testStreams(t *testing.T, d backend.Device) {
	c := primary(t, d)
	s, err := d.StreamCreate(bg, c, 1, 0) // CU_STREAM_NON_BLOCKING
	must(t, "StreamCreate", err)
	m := loadSuite(t, d, c)
	f, ps, err := d.ModuleGetFunction(bg, c, m, "scale")
	must(t, "ModuleGetFunction", err)
	const n = 256
	a, err := d.MemAlloc(bg, c, 4*n)
	must(t, "MemAlloc", err)
	b, err := d.MemAlloc(bg, c, 4*n)
	must(t, "MemAlloc", err)
	in := make([]byte, 4*n)
	for i := range n {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(i+1))
	}
	must(t, "MemcpyHtoD on a stream", d.MemcpyHtoD(bg, c, a, bytes.NewReader(in), 4*n, s))
	must(t, "Memset on a stream", d.Memset(bg, c, b, 0, 4, n, s))
	must(t, "Launch on a stream", d.Launch(bg, c, f, backend.LaunchConfig{Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{128, 1, 1},
		Stream: s, Params: params(ps, uint64(a), uint64(b), n)}))
	must(t, "StreamSynchronize", d.StreamSynchronize(bg, c, s))
	must(t, "StreamQuery after synchronising", d.StreamQuery(bg, c, s))
	var out bytes.Buffer
	must(t, "MemcpyDtoH on the stream", d.MemcpyDtoH(bg, c, &out, b, 4*n, s))
	for i := range n {
		if got, want := binary.LittleEndian.Uint32(out.Bytes()[4*i:]), uint32((i+1)*3+i); got != want {
			t.Fatalf("out[%d] = %d, want %d", i, got, want)
		}
	}
	must(t, "StreamDestroy", d.StreamDestroy(bg, c, s))
	wantCode(t, "StreamSynchronize of a destroyed stream", d.StreamSynchronize(bg, c, s), cu.ErrorInvalidHandle)
	must(t, "StreamSynchronize of the default stream", d.StreamSynchronize(bg, c, 0))
}

func testEvents(t *testing.T, d backend.Device) {
	c := primary(t, d)
	s, err := d.StreamCreate(bg, c, 0, 0)
	must(t, "StreamCreate", err)
	e1, err := d.EventCreate(bg, c, 0)
	must(t, "EventCreate", err)
	e2, err := d.EventCreate(bg, c, 0)
	must(t, "EventCreate", err)
	_, err = d.EventElapsedTime(bg, c, e1, e2)
	if cu.Code(err) != cu.ErrorInvalidHandle && cu.Code(err) != cu.ErrorNotReady {
		t.Errorf("EventElapsedTime of events never recorded: %v, want CUDA_ERROR_INVALID_HANDLE", err)
	}
	must(t, "EventRecord", d.EventRecord(bg, c, e1, s))
	p, err := d.MemAlloc(bg, c, 1<<20)
	must(t, "MemAlloc", err)
	must(t, "Memset", d.Memset(bg, c, p, 7, 1, 1<<20, s))
	must(t, "EventRecord", d.EventRecord(bg, c, e2, s))
	must(t, "StreamWaitEvent", d.StreamWaitEvent(bg, c, 0, e2, 0))
	must(t, "EventSynchronize", d.EventSynchronize(bg, c, e2))
	must(t, "EventQuery after synchronising", d.EventQuery(bg, c, e2))
	ms, err := d.EventElapsedTime(bg, c, e1, e2)
	must(t, "EventElapsedTime", err)
	if ms < 0 {
		t.Errorf("elapsed time %g ms", ms)
	}
	nt, err := d.EventCreate(bg, c, eventDisableTiming)
	must(t, "EventCreate without timing", err)
	must(t, "EventRecord", d.EventRecord(bg, c, nt, s))
	must(t, "EventSynchronize", d.EventSynchronize(bg, c, nt))
	_, err = d.EventElapsedTime(bg, c, e1, nt)
	wantCode(t, "EventElapsedTime with an event that does not time", err, cu.ErrorInvalidHandle)
	for _, e := range []backend.Event{e1, e2, nt} {
		must(t, "EventDestroy", d.EventDestroy(bg, c, e))
	}
	wantCode(t, "EventQuery of a destroyed event", d.EventQuery(bg, c, e1), cu.ErrorInvalidHandle)
	must(t, "StreamDestroy", d.StreamDestroy(bg, c, s))
}

// testForeignHandles: handles the backend never issued are refused with
// CUDA_ERROR_INVALID_HANDLE (or INVALID_CONTEXT for contexts), never a
// crash: they come from an untrusted client.
func testForeignHandles(t *testing.T, d backend.Device) {
	c := primary(t, d)
	const bogus = 0x5eed_0000_1234
	wantCode(t, "CtxSynchronize of a foreign context", d.CtxSynchronize(bg, backend.Ctx(bogus)), cu.ErrorInvalidContext)
	wantCode(t, "StreamQuery of a foreign stream", d.StreamQuery(bg, c, backend.Stream(bogus)), cu.ErrorInvalidHandle)
	wantCode(t, "EventRecord of a foreign event", d.EventRecord(bg, c, backend.Event(bogus), 0), cu.ErrorInvalidHandle)
	_, _, err := d.ModuleGetFunction(bg, c, backend.Module(bogus), "scale")
	wantCode(t, "ModuleGetFunction of a foreign module", err, cu.ErrorInvalidHandle)
	err = d.Launch(bg, c, backend.Function(bogus), backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}})
	wantCode(t, "Launch of a foreign function", err, cu.ErrorInvalidHandle)
	_, err = d.FuncGetAttribute(bg, c, backend.Function(bogus), funcAttrMaxThreads)
	wantCode(t, "FuncGetAttribute of a foreign function", err, cu.ErrorInvalidHandle)
	var ce *cu.Error
	if !errors.As(d.StreamQuery(bg, c, backend.Stream(bogus)), &ce) {
		t.Error("errors do not unwrap to *cu.Error")
	}
}

// testFreeWhileRunning frees memory a running kernel is about to write, as
// Thrust frees a sort's temporary storage right after launching the sort:
// cuMemFree waits for the device's outstanding work, so the kernel must
// finish without a fault, and memory allocated next may reuse the bytes.
func testFreeWhileRunning(t *testing.T, d backend.Device) {
	c := primary(t, d)
	s, err := d.StreamCreate(bg, c, 1, 0) // CU_STREAM_NON_BLOCKING
	must(t, "StreamCreate", err)
	m := loadSuite(t, d, c)
	f, ps, err := d.ModuleGetFunction(bg, c, m, "spin")
	must(t, "ModuleGetFunction", err)
	for _, size := range []uint64{4 << 20, 4096} { // a mapping of its own, a shared one
		p, err := d.MemAlloc(bg, c, size)
		must(t, "MemAlloc", err)
		cfg := backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Stream: s,
			Params: params(ps, uint64(p), uint64(20*time.Millisecond))}
		must(t, "Launch", d.Launch(bg, c, f, cfg))
		must(t, fmt.Sprintf("MemFree of %d bytes a running kernel writes", size), d.MemFree(bg, c, p))
		q, err := d.MemAlloc(bg, c, size)
		must(t, "MemAlloc after the free", err)
		must(t, "Memset", d.Memset(bg, c, q, 0xab, 1, size, 0))
		must(t, "CtxSynchronize", d.CtxSynchronize(bg, c))
		if got := readBack(t, d, c, q, 4); !bytes.Equal(got, []byte{0xab, 0xab, 0xab, 0xab}) {
			t.Errorf("%d bytes allocated after the free read %x, want the memset's abababab", size, got)
		}
		must(t, "MemFree", d.MemFree(bg, c, q))
	}
	must(t, "StreamDestroy", d.StreamDestroy(bg, c, s))
}
