package emulated

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

func newTestDevice(t *testing.T, mem uint64) (*Device, backend.Ctx) {
	t.Helper()
	d := New(Config{MemBytes: mem, Cores: 2, Seed: "test"})
	t.Cleanup(func() { _ = d.Close() })
	c, err := d.PrimaryCtxRetain(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return d, c
}

func wantCode(t *testing.T, err error, want cu.Result) {
	t.Helper()
	if got := cu.Code(err); got != want {
		t.Fatalf("got %v (%v), want %v", got, err, want)
	}
}

func TestAttributes(t *testing.T) {
	d := New(Config{Cores: 7})
	ctx := context.Background()
	for _, tc := range []struct {
		attr int32
		want int32
		code cu.Result
	}{
		{attrWarpSize, 32, cu.Success},
		{attrMaxThreadsPerBlock, 1024, cu.Success},
		{attrMaxSharedMemoryPerBlock, 48 << 10, cu.Success},
		{attrMaxSharedMemPerBlockOptin, 99 << 10, cu.Success},
		{attrMultiprocessorCount, 7, cu.Success},
		{attrComputeCapabilityMajor, 9, cu.Success},
		{attrComputeCapabilityMinor, 0, cu.Success},
		{attrMaxBlockDimZ, 64, cu.Success},
		{attrMaxGridDimX, 1<<31 - 1, cu.Success},
		{21, 0, cu.Success}, // texture width: no texture units
		{0, 0, cu.ErrorInvalidValue},
		{attrMax, 0, cu.ErrorInvalidValue},
	} {
		got, err := d.DeviceAttribute(ctx, tc.attr, 0)
		if cu.Code(err) != tc.code || got != tc.want {
			t.Errorf("attribute %d = %d, %v; want %d, %v", tc.attr, got, err, tc.want, tc.code)
		}
	}
	if _, err := d.DeviceAttribute(ctx, attrWarpSize, 1); cu.Code(err) != cu.ErrorInvalidDevice {
		t.Errorf("device 1: %v, want INVALID_DEVICE", err)
	}
}

func TestIdentity(t *testing.T) {
	ctx := context.Background()
	a, b, c := New(Config{Seed: "h1"}), New(Config{Seed: "h1"}), New(Config{Seed: "h2"})
	ua, _ := a.DeviceUUID(ctx, 0)
	ub, _ := b.DeviceUUID(ctx, 0)
	uc, _ := c.DeviceUUID(ctx, 0)
	if ua != ub || ua == uc {
		t.Fatalf("UUIDs not stable per seed: %x %x %x", ua, ub, uc)
	}
	name, _ := a.DeviceName(ctx, 0)
	total, _ := a.DeviceTotalMem(ctx, 0)
	if name != "gpuctl emulated device" || total != 16<<30 {
		t.Fatalf("name %q total %d", name, total)
	}
}

func TestAllocLimits(t *testing.T) {
	d, c := newTestDevice(t, 1<<20)
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		size uint64
		code cu.Result
	}{
		{"zero", 0, cu.ErrorInvalidValue},
		{"one PiB", 1 << 50, cu.ErrorOutOfMemory},
		{"max uint64", ^uint64(0), cu.ErrorOutOfMemory},
		{"whole device plus one", 1<<20 + 1, cu.ErrorOutOfMemory},
		{"small", 100, cu.Success},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := d.MemAlloc(ctx, c, tc.size)
			wantCode(t, err, tc.code)
			if err == nil && uint64(p)%allocAlign != 0 {
				t.Fatalf("pointer %#x not %d-aligned", p, allocAlign)
			}
		})
	}
	free, total, err := d.MemGetInfo(ctx, c)
	if err != nil || total != 1<<20 || free != 1<<20-256 {
		t.Fatalf("info free=%d total=%d err=%v", free, total, err)
	}
	// Fill the rest exactly, then one more byte fails.
	if _, err := d.MemAlloc(ctx, c, free); err != nil {
		t.Fatalf("allocating the remaining %d bytes: %v", free, err)
	}
	_, err = d.MemAlloc(ctx, c, 1)
	wantCode(t, err, cu.ErrorOutOfMemory)
}

func TestSpanLookup(t *testing.T) {
	d, c := newTestDevice(t, 1<<30)
	ctx := context.Background()
	var ptrs []backend.DevPtr
	sizes := []uint64{1, 255, 256, 4096, 1 << 20, 3}
	for _, s := range sizes {
		p, err := d.MemAlloc(ctx, c, s)
		if err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, p)
	}
	if err := d.MemFree(ctx, c, ptrs[2]); err != nil {
		t.Fatal(err)
	}
	for i, p := range ptrs {
		for _, off := range []uint64{0, sizes[i] - 1, sizes[i]} {
			base, data, ok := d.mem.Span(uint64(p) + off)
			want := off < sizes[i] && i != 2
			if ok != want {
				t.Fatalf("Span(ptr %d + %d) ok=%v want %v", i, off, ok, want)
			}
			if ok && (base != uint64(p) || uint64(len(data)) != sizes[i]) {
				t.Fatalf("Span(ptr %d + %d) = %#x/%d", i, off, base, len(data))
			}
		}
	}
	if _, _, ok := d.mem.Span(arenaBase - 1); ok {
		t.Fatal("address below the arena resolved")
	}
	base, size, err := d.MemGetAddressRange(ctx, c, ptrs[4]+100)
	if err != nil || base != ptrs[4] || size != 1<<20 {
		t.Fatalf("address range %#x %d %v", base, size, err)
	}
	wantCode(t, d.MemFree(ctx, c, ptrs[4]+1), cu.ErrorInvalidValue)
	wantCode(t, d.MemFree(ctx, c, ptrs[2]), cu.ErrorInvalidValue) // double free
	if err := d.MemFree(ctx, c, 0); err != nil {
		t.Errorf("freeing 0 (cudaFree(0)): %v, want success", err)
	}
}

func TestCopiesAndMemset(t *testing.T) {
	d, c := newTestDevice(t, 1<<30)
	ctx := context.Background()
	p, _ := d.MemAlloc(ctx, c, 64)
	q, _ := d.MemAlloc(ctx, c, 64)
	src := make([]byte, 64)
	for i := range src {
		src[i] = byte(i)
	}
	if err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(src), 64, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyDtoD(ctx, c, q, p, 64, 0); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := d.MemcpyDtoH(ctx, c, &out, q, 64, 0); err != nil || !bytes.Equal(out.Bytes(), src) {
		t.Fatalf("round trip: %v %x", err, out.Bytes())
	}

	for _, tc := range []struct {
		elem  int
		value uint32
		off   uint64
		count uint64
		want  []byte
		code  cu.Result
	}{
		{1, 0xab, 0, 3, []byte{0xab, 0xab, 0xab, 3}, cu.Success},
		{2, 0x1234, 0, 2, []byte{0x34, 0x12, 0x34, 0x12, 4}, cu.Success},
		{4, 0xdeadbeef, 4, 1, []byte{0xef, 0xbe, 0xad, 0xde, 8}, cu.Success},
		{4, 1, 2, 1, nil, cu.ErrorInvalidValue},  // misaligned
		{3, 1, 0, 1, nil, cu.ErrorInvalidValue},  // bad element size
		{4, 1, 0, 17, nil, cu.ErrorInvalidValue}, // past the end
	} {
		_ = d.MemcpyHtoD(ctx, c, p, bytes.NewReader(src), 64, 0)
		err := d.Memset(ctx, c, p+backend.DevPtr(tc.off), tc.value, tc.elem, tc.count, 0)
		wantCode(t, err, tc.code)
		if err != nil {
			continue
		}
		out.Reset()
		_ = d.MemcpyDtoH(ctx, c, &out, p+backend.DevPtr(tc.off), uint64(len(tc.want)), 0)
		if !bytes.Equal(out.Bytes(), tc.want) {
			t.Errorf("memset%d(%#x) = %x, want %x", tc.elem*8, tc.value, out.Bytes(), tc.want)
		}
	}
}

// A failed HtoD must still consume its bytes, or the session's stream
// would lose framing.
func TestFailedHtoDConsumesInput(t *testing.T) {
	d, c := newTestDevice(t, 1<<20)
	ctx := context.Background()
	p, _ := d.MemAlloc(ctx, c, 16)
	for _, tc := range []struct {
		name string
		dst  backend.DevPtr
		s    backend.Stream
		ctx  backend.Ctx
		code cu.Result
	}{
		{"past end", p, 0, c, cu.ErrorInvalidValue},
		{"bad stream", p, 0x999, c, cu.ErrorInvalidHandle},
		{"bad context", p, 0, 0x77, cu.ErrorInvalidContext},
		{"unmapped", 0x1000, 0, c, cu.ErrorInvalidValue},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bytes.NewReader(make([]byte, 32+5))
			wantCode(t, d.MemcpyHtoD(ctx, tc.ctx, tc.dst, r, 32, tc.s), tc.code)
			if r.Len() != 5 {
				t.Fatalf("%d bytes left, want 5", r.Len())
			}
		})
	}
	// A client that hangs up mid-copy is a transport error, not a CUDA one.
	err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(make([]byte, 4)), 16, 0)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("short read: %v", err)
	}
}

func TestContexts(t *testing.T) {
	d := New(Config{MemBytes: 1 << 20})
	ctx := context.Background()
	p1, _ := d.PrimaryCtxRetain(ctx, 0)
	p2, _ := d.PrimaryCtxRetain(ctx, 0)
	if p1 != p2 {
		t.Fatal("primary context handle changed while retained")
	}
	if _, active, _ := d.PrimaryCtxState(ctx, 0); !active {
		t.Fatal("primary not active")
	}
	wantCode(t, d.CtxDestroy(ctx, p1), cu.ErrorInvalidContext)
	ptr, _ := d.MemAlloc(ctx, p1, 1000)
	_ = d.PrimaryCtxRelease(ctx, 0)
	if d.MemInUse() == 0 {
		t.Fatal("memory freed while the primary context is still retained")
	}
	_ = d.PrimaryCtxRelease(ctx, 0)
	if _, active, _ := d.PrimaryCtxState(ctx, 0); active || d.MemInUse() != 0 {
		t.Fatalf("after last release: active=%v inUse=%d", active, d.MemInUse())
	}
	wantCode(t, d.PrimaryCtxRelease(ctx, 0), cu.ErrorInvalidContext)
	_, _, err := d.MemGetAddressRange(ctx, p1, ptr)
	wantCode(t, err, cu.ErrorInvalidContext)

	c, err := d.CtxCreate(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.StreamCreate(ctx, c, 1, 0); err != nil {
		t.Fatal(err)
	}
	_, _ = d.MemAlloc(ctx, c, 4096)
	if err := d.CtxDestroy(ctx, c); err != nil {
		t.Fatal(err)
	}
	if d.MemInUse() != 0 || len(d.streams) != 0 {
		t.Fatalf("destroyed context leaked: inUse=%d streams=%d", d.MemInUse(), len(d.streams))
	}
	_, err = d.CtxCreate(ctx, 0, 0x100)
	wantCode(t, err, cu.ErrorInvalidValue)
	_, err = d.CtxCreate(ctx, 1, 0)
	wantCode(t, err, cu.ErrorInvalidDevice)
	if err := d.PrimaryCtxSetFlags(ctx, 0, 0x4); err != nil {
		t.Fatal(err)
	}
	if f, _, _ := d.PrimaryCtxState(ctx, 0); f != 0x4 {
		t.Fatalf("flags %#x", f)
	}
}

func TestStreamsAndEvents(t *testing.T) {
	d, c := newTestDevice(t, 1<<20)
	ctx := context.Background()
	s, err := d.StreamCreate(ctx, c, 1, -1)
	if err != nil {
		t.Fatal(err)
	}
	start, _ := d.EventCreate(ctx, c, 0)
	end, _ := d.EventCreate(ctx, c, 0)
	notime, _ := d.EventCreate(ctx, c, eventDisableTiming)
	_, err = d.EventElapsedTime(ctx, c, start, end)
	wantCode(t, err, cu.ErrorInvalidHandle) // not recorded yet
	if err := d.EventRecord(ctx, c, start, s); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if err := d.EventRecord(ctx, c, end, 0); err != nil {
		t.Fatal(err)
	}
	ms, err := d.EventElapsedTime(ctx, c, start, end)
	if err != nil || ms < 4 || ms > 1000 {
		t.Fatalf("elapsed %v ms, %v", ms, err)
	}
	_ = d.EventRecord(ctx, c, notime, s)
	_, err = d.EventElapsedTime(ctx, c, start, notime)
	wantCode(t, err, cu.ErrorInvalidHandle)
	for _, tc := range []struct {
		name string
		err  error
		code cu.Result
	}{
		{"query stream", d.StreamQuery(ctx, c, s), cu.Success},
		{"sync stream", d.StreamSynchronize(ctx, c, s), cu.Success},
		{"wait event", d.StreamWaitEvent(ctx, c, s, end, 0), cu.Success},
		{"query event", d.EventQuery(ctx, c, end), cu.Success},
		{"sync event", d.EventSynchronize(ctx, c, end), cu.Success},
		{"unknown stream", d.StreamSynchronize(ctx, c, 0xdead0), cu.ErrorInvalidHandle},
		{"event as stream", d.StreamQuery(ctx, c, backend.Stream(start)), cu.ErrorInvalidHandle},
		{"unknown event", d.EventQuery(ctx, c, 0xdead0), cu.ErrorInvalidHandle},
		{"bad wait flags", d.StreamWaitEvent(ctx, c, s, end, 8), cu.ErrorInvalidValue},
		{"legacy stream", d.StreamSynchronize(ctx, c, streamLegacy), cu.Success},
	} {
		if cu.Code(tc.err) != tc.code {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.code)
		}
	}
	if err := d.StreamDestroy(ctx, c, s); err != nil {
		t.Fatal(err)
	}
	wantCode(t, d.StreamDestroy(ctx, c, s), cu.ErrorInvalidHandle)
	if err := d.EventDestroy(ctx, c, start); err != nil {
		t.Fatal(err)
	}
	wantCode(t, d.EventRecord(ctx, c, start, 0), cu.ErrorInvalidHandle)
}

func TestStickyAndPendingErrors(t *testing.T) {
	d, c := newTestDevice(t, 1<<20)
	ctx := context.Background()
	cc, _ := d.ctx(c)
	cc.fail(cu.Errorf(cu.ErrorNotSupported, "instruction foo"))
	wantCode(t, d.CtxSynchronize(ctx, c), cu.ErrorNotSupported)
	wantCode(t, d.CtxSynchronize(ctx, c), cu.Success) // reported once
	cc.fail(cu.Errorf(cu.ErrorIllegalAddress, "ld.global at 0x10"))
	for i := 0; i < 2; i++ {
		wantCode(t, d.CtxSynchronize(ctx, c), cu.ErrorIllegalAddress)
		_, err := d.MemAlloc(ctx, c, 16)
		wantCode(t, err, cu.ErrorIllegalAddress)
	}
	// Another context is unaffected.
	other, _ := d.CtxCreate(ctx, 0, 0)
	wantCode(t, d.CtxSynchronize(ctx, other), cu.Success)
	// Resetting the primary context clears the sticky error.
	_ = d.PrimaryCtxReset(ctx, 0)
	c2, _ := d.PrimaryCtxRetain(ctx, 0)
	wantCode(t, d.CtxSynchronize(ctx, c2), cu.Success)
}

func TestSuspendBlocksCalls(t *testing.T) {
	d, c := newTestDevice(t, 1<<20)
	ctx := context.Background()
	_ = d.Suspend(ctx)
	_, err := d.MemAlloc(ctx, c, 16)
	wantCode(t, err, cu.ErrorIllegalState)
	_ = d.Resume(ctx)
	if _, err := d.MemAlloc(ctx, c, 16); err != nil {
		t.Fatal(err)
	}
}

func TestLaunchChecks(t *testing.T) {
	f := &function{maxDynShared: sharedPerBlock}
	for _, tc := range []struct {
		name string
		cfg  backend.LaunchConfig
		ok   bool
	}{
		{"ok", backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1024, 1, 1}}, true},
		{"zero grid", backend.LaunchConfig{Grid: [3]uint32{0, 1, 1}, Block: [3]uint32{1, 1, 1}}, false},
		{"too many threads", backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 33, 1}}, false},
		{"block z", backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 65}}, false},
		{"grid y", backend.LaunchConfig{Grid: [3]uint32{1, 65536, 1}, Block: [3]uint32{1, 1, 1}}, false},
		{"shared", backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, SharedBytes: sharedPerBlock + 1}, false},
		{"params padded past the kernel's", backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Params: make([]byte, f.paramBytes+4)}, false},
	} {
		if err := checkLaunch(tc.cfg, f); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestFill(t *testing.T) {
	buf := make([]byte, 1000)
	fill(buf, 0x01020304, 4)
	for i := 0; i < len(buf); i += 4 {
		if binary.LittleEndian.Uint32(buf[i:]) != 0x01020304 {
			t.Fatalf("word %d = %x", i/4, buf[i:i+4])
		}
	}
}
