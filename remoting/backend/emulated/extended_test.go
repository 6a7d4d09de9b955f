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

func mustGet(t *testing.T, d *Device, c backend.Ctx, p backend.DevPtr, n uint64) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := d.MemcpyDtoH(context.Background(), c, &out, p, n, 0); err != nil {
		t.Fatalf("read %d bytes at %#x: %v", n, uint64(p), err)
	}
	return out.Bytes()
}

func mustPut(t *testing.T, d *Device, c backend.Ctx, p backend.DevPtr, b []byte) {
	t.Helper()
	if err := d.MemcpyHtoD(context.Background(), c, p, bytes.NewReader(b), uint64(len(b)), 0); err != nil {
		t.Fatalf("write %d bytes at %#x: %v", len(b), uint64(p), err)
	}
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
	return b
}

func TestPoolsAllocateReuseAndRelease(t *testing.T) {
	d, c := newTestDevice(t, 64<<20)
	ctx := context.Background()
	def, err := d.DeviceGetDefaultMemPool(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if cur, _ := d.DeviceGetMemPool(ctx, 0); cur != def {
		t.Fatalf("current pool %#x, want the default %#x", cur, def)
	}
	// The default pool releases freed memory at once (threshold 0).
	p, err := d.MemAllocAsync(ctx, c, 1<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, d, c, p, pattern(1<<20, 1))
	if !bytes.Equal(mustGet(t, d, c, p, 1<<20), pattern(1<<20, 1)) {
		t.Fatal("pool memory does not keep what was written")
	}
	used, _ := d.MemPoolGetAttribute(ctx, def, poolAttrUsedCurrent)
	if used != 1<<20 {
		t.Fatalf("used %d, want %d", used, 1<<20)
	}
	if err := d.MemFreeAsync(ctx, c, p, 0); err != nil {
		t.Fatal(err)
	}
	res, _ := d.MemPoolGetAttribute(ctx, def, poolAttrReservedCurrent)
	high, _ := d.MemPoolGetAttribute(ctx, def, poolAttrUsedHigh)
	if res != 0 || high != 1<<20 || d.MemInUse() != 0 {
		t.Fatalf("after free: reserved %d, used high %d, device in use %d; want 0, %d, 0", res, high, d.MemInUse(), 1<<20)
	}

	// A pool with a threshold keeps freed blocks and hands them out again.
	pool, err := d.MemPoolCreate(ctx, allocTypePinned, 0, locTypeDevice, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.MemPoolSetAttribute(ctx, pool, poolAttrReleaseThreshold, 8<<20); err != nil {
		t.Fatal(err)
	}
	a, _ := d.MemAllocAsync(ctx, c, 4<<20, pool, 0)
	if err := d.MemFreeAsync(ctx, c, a, 0); err != nil {
		t.Fatal(err)
	}
	b, _ := d.MemAllocAsync(ctx, c, 4<<20, pool, 0)
	if a != b {
		t.Fatalf("a freed block of the same size was not reused: %#x then %#x", a, b)
	}
	// cuMemFree works on pool memory too.
	if err := d.MemFree(ctx, c, b); err != nil {
		t.Fatal(err)
	}
	if res, _ := d.MemPoolGetAttribute(ctx, pool, poolAttrReservedCurrent); res != 4<<20 {
		t.Fatalf("reserved %d after a free below the threshold, want %d", res, 4<<20)
	}
	if err := d.MemPoolTrimTo(ctx, pool, 0); err != nil {
		t.Fatal(err)
	}
	if res, _ := d.MemPoolGetAttribute(ctx, pool, poolAttrReservedCurrent); res != 0 || d.MemInUse() != 0 {
		t.Fatalf("after trimming: reserved %d, device in use %d", res, d.MemInUse())
	}

	// A pool with a maximum size refuses more.
	small, _ := d.MemPoolCreate(ctx, allocTypePinned, 0, locTypeDevice, 0, 2<<20)
	if _, err := d.MemAllocAsync(ctx, c, 4<<20, small, 0); cu.Code(err) != cu.ErrorOutOfMemory {
		t.Fatalf("past the pool's maximum: %v, want OUT_OF_MEMORY", err)
	}
	for _, tc := range []struct {
		name string
		err  error
		want cu.Result
	}{
		{"free of non-pool memory", d.MemFreeAsync(ctx, c, 0x1234, 0), cu.ErrorInvalidValue},
		{"destroy the default pool", d.MemPoolDestroy(ctx, def), cu.ErrorInvalidValue},
		{"set a read-only attribute", d.MemPoolSetAttribute(ctx, pool, poolAttrUsedCurrent, 1), cu.ErrorInvalidValue},
		{"reset a high-water mark to non-zero", d.MemPoolSetAttribute(ctx, pool, poolAttrUsedHigh, 5), cu.ErrorInvalidValue},
		{"set an unknown pool", d.DeviceSetMemPool(ctx, 0, 0x999), cu.ErrorInvalidValue},
	} {
		if cu.Code(tc.err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if err := d.DeviceSetMemPool(ctx, 0, pool); err != nil {
		t.Fatal(err)
	}
	if q, _ := d.MemAllocAsync(ctx, c, 512, 0, 0); d.poolOf[uint64(q)].handle != pool {
		t.Fatal("a pool of 0 did not mean the device's current pool")
	}
	if err := d.MemPoolDestroy(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if cur, _ := d.DeviceGetMemPool(ctx, 0); cur != def {
		t.Fatal("destroying the current pool did not fall back to the default")
	}
}

func TestVirtualMemoryMappingsAliasAndSpan(t *testing.T) {
	d, c := newTestDevice(t, 64<<20)
	ctx := context.Background()
	const g = vmmGranularity
	if gr, err := d.MemGetAllocationGranularity(ctx, allocTypePinned, 0, locTypeDevice, 0, 0); err != nil || gr != g {
		t.Fatalf("granularity %d, %v", gr, err)
	}
	va, err := d.MemAddressReserve(ctx, 8*g, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h1, err := d.MemCreate(ctx, 2*g, allocTypePinned, 0, locTypeDevice, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h2, _ := d.MemCreate(ctx, g, allocTypePinned, 0, locTypeDevice, 0, 0, 0)
	if d.MemInUse() != 3*g {
		t.Fatalf("in use %d after creating %d bytes", d.MemInUse(), 3*g)
	}
	// Expandable-segment style: chunks mapped back to back.
	if err := d.MemMap(ctx, va, 2*g, 0, h1, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.MemMap(ctx, va+2*g, g, 0, h2, 0); err != nil {
		t.Fatal(err)
	}
	// Not accessible before cuMemSetAccess.
	if _, err := d.mem.slice(uint64(va), 16); err == nil {
		t.Fatal("a mapping without access rights is reachable")
	}
	rw := []backend.AccessDesc{{LocType: locTypeDevice, LocID: 0, Flags: accessReadWrite}}
	if err := d.MemSetAccess(ctx, va, 3*g, rw); err != nil {
		t.Fatal(err)
	}
	if fl, _ := d.MemGetAccess(ctx, locTypeDevice, 0, va+g); fl != accessReadWrite {
		t.Fatalf("access %d", fl)
	}
	// One copy across both mappings.
	data := pattern(2*g, 3)
	mustPut(t, d, c, va+g, data)
	if !bytes.Equal(mustGet(t, d, c, va+g, 2*g), data) {
		t.Fatal("a copy across two mappings did not read back")
	}
	// The same physical memory mapped a second time aliases the first.
	va2, _ := d.MemAddressReserve(ctx, 2*g, 0, 0, 0)
	if err := d.MemMap(ctx, va2, g, g, h1, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.MemSetAccess(ctx, va2, g, rw); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustGet(t, d, c, va2, g), data[:g]) {
		t.Fatal("a second mapping of the same memory does not show its bytes")
	}
	mustPut(t, d, c, va2, pattern(64, 9))
	if !bytes.Equal(mustGet(t, d, c, va+g, 64), pattern(64, 9)) {
		t.Fatal("a write through one mapping is not seen through the other")
	}
	// A retained handle is the same allocation.
	rh, err := d.MemRetainAllocationHandle(ctx, va+g+100)
	if err != nil || rh != h1 {
		t.Fatalf("retained %#x, %v; want %#x", rh, err, h1)
	}
	// Released handles stay alive while mapped or retained.
	if err := d.MemRelease(ctx, h1); err != nil {
		t.Fatal(err)
	}
	if err := d.MemRelease(ctx, rh); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustGet(t, d, c, va2, 64), pattern(64, 9)) {
		t.Fatal("memory released while still mapped was lost")
	}
	for _, tc := range []struct {
		name string
		err  error
		want cu.Result
	}{
		{"unmap part of a mapping", d.MemUnmap(ctx, va, g), cu.ErrorInvalidValue},
		{"map over a mapping", d.MemMap(ctx, va, g, 0, h2, 0), cu.ErrorInvalidValue},
		{"map outside a reservation", d.MemMap(ctx, va+8*g, g, 0, h2, 0), cu.ErrorInvalidValue},
		{"unaligned size", func() error { _, err := d.MemCreate(ctx, g+1, allocTypePinned, 0, locTypeDevice, 0, 0, 0); return err }(), cu.ErrorInvalidValue},
		{"another device", func() error { _, err := d.MemCreate(ctx, g, allocTypePinned, 0, locTypeDevice, 1, 0, 0); return err }(), cu.ErrorInvalidDevice},
		{"free a reservation still mapped", d.MemAddressFree(ctx, va, 8*g), cu.ErrorInvalidValue},
	} {
		if cu.Code(tc.err) != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.err, tc.want)
		}
	}
	if err := d.MemUnmap(ctx, va, 3*g); err != nil {
		t.Fatal(err)
	}
	if err := d.MemUnmap(ctx, va2, g); err != nil {
		t.Fatal(err)
	}
	if _, err := d.mem.slice(uint64(va), 16); err == nil {
		t.Fatal("unmapped memory is still reachable")
	}
	if err := d.MemRelease(ctx, h2); err != nil {
		t.Fatal(err)
	}
	if d.MemInUse() != 0 {
		t.Fatalf("%d bytes in use after every mapping and handle is gone", d.MemInUse())
	}
	if err := d.MemAddressFree(ctx, va, 8*g); err != nil {
		t.Fatal(err)
	}
}

func TestKernelOnMappedMemory(t *testing.T) {
	d, c := newTestDevice(t, 64<<20)
	ctx := context.Background()
	const g = vmmGranularity
	va, _ := d.MemAddressReserve(ctx, 2*g, 0, 0, 0)
	for i := uint64(0); i < 2; i++ {
		h, err := d.MemCreate(ctx, g, allocTypePinned, 0, locTypeDevice, 0, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.MemMap(ctx, va+backend.DevPtr(i*g), g, 0, h, 0); err != nil {
			t.Fatal(err)
		}
		_ = d.MemRelease(ctx, h) // the mapping keeps it
	}
	if err := d.MemSetAccess(ctx, va, 2*g, []backend.AccessDesc{{LocType: locTypeDevice, Flags: accessReadWrite}}); err != nil {
		t.Fatal(err)
	}
	m := loadTestModule(t, d, c)
	f, _, err := d.ModuleGetFunction(ctx, c, m, "vadd")
	if err != nil {
		t.Fatal(err)
	}
	// Three float vectors that straddle the boundary between the chunks.
	const n = 4096
	a, b, out := va+g-8192, va+g, va+g+8192
	mustPut(t, d, c, a, floats(n, 1))
	mustPut(t, d, c, b, floats(n, 2))
	params := make([]byte, 28)
	binary.LittleEndian.PutUint64(params, uint64(a))
	binary.LittleEndian.PutUint64(params[8:], uint64(b))
	binary.LittleEndian.PutUint64(params[16:], uint64(out))
	binary.LittleEndian.PutUint32(params[24:], n/2)
	if err := d.Launch(ctx, c, f, backend.LaunchConfig{Grid: [3]uint32{16, 1, 1}, Block: [3]uint32{128, 1, 1}, Params: params}); err != nil {
		t.Fatal(err)
	}
	if err := d.CtxSynchronize(ctx, c); err != nil {
		t.Fatal(err)
	}
	got := mustGet(t, d, c, out, 4*n/2)
	want := floats(n, 3)[:4*n/2]
	if !bytes.Equal(got, want) {
		t.Fatal("a kernel over mapped memory computed something else")
	}
}

// floats is n little-endian float32 values i*k.
func floats(n int, k float32) []byte {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(float32(i)*k))
	}
	return b
}

func TestStreamWaitValueBlocksAndReleases(t *testing.T) {
	d, c := newTestDevice(t, 16<<20)
	ctx := context.Background()
	s1, _ := d.StreamCreate(ctx, c, 1, 0)
	s2, _ := d.StreamCreate(ctx, c, 1, 0)
	flag, _ := d.MemAlloc(ctx, c, 8)
	buf, _ := d.MemAlloc(ctx, c, 64)
	mustPut(t, d, c, flag, make([]byte, 8))
	ev, _ := d.EventCreate(ctx, c, 0)

	// s1 waits for flag >= 5, then fills buf and records ev; nothing
	// happens until s2 writes the flag.
	if err := d.StreamWaitValue(ctx, c, s1, flag, 5, waitGEQ, 32); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(ctx, c, buf, 0xab, 1, 64, s1); err != nil {
		t.Fatal(err)
	}
	if err := d.EventRecord(ctx, c, ev, s1); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamQuery(ctx, c, s1); cu.Code(err) != cu.ErrorNotReady {
		t.Fatalf("a blocked stream queried %v, want NOT_READY", err)
	}
	if err := d.EventQuery(ctx, c, ev); cu.Code(err) != cu.ErrorNotReady {
		t.Fatalf("an event behind a wait queried %v, want NOT_READY", err)
	}
	if err := d.StreamSynchronize(ctx, c, s1); cu.Code(err) != cu.ErrorIllegalState {
		t.Fatalf("synchronising a stream nothing can release: %v, want ILLEGAL_STATE", err)
	}
	if got := mustGet(t, d, c, buf, 1); got[0] != 0 {
		t.Fatalf("work behind the wait ran early")
	}
	// s2 waits on the event: it blocks too.
	if err := d.StreamWaitEvent(ctx, c, s2, ev, 0); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamWriteValue(ctx, c, s2, buf+8, 7, 0, 32); err != nil {
		t.Fatal(err)
	}
	// Writing 4 releases nothing; 5 releases s1, then s2.
	if err := d.StreamWriteValue(ctx, c, 0, flag, 4, 0, 32); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamQuery(ctx, c, s1); cu.Code(err) != cu.ErrorNotReady {
		t.Fatalf("after 4: %v, want NOT_READY", err)
	}
	ops := []backend.MemOp{{Type: memOpWrite64, Addr: flag, Value: 5}, {Type: memOpBarrier}}
	if err := d.StreamBatchMemOp(ctx, c, 0, 0, ops); err != nil {
		t.Fatal(err)
	}
	for _, s := range []backend.Stream{s1, s2} {
		if err := d.StreamSynchronize(ctx, c, s); err != nil {
			t.Fatalf("stream %#x after the release: %v", s, err)
		}
	}
	got := mustGet(t, d, c, buf, 12)
	if got[0] != 0xab || binary.LittleEndian.Uint32(got[8:]) != 7 {
		t.Fatalf("after the release: %x", got)
	}
	for _, tc := range []struct {
		flags, width uint32
		cur, value   uint64
		want         bool
	}{
		{waitGEQ, 32, 0xffffffff, 1, false}, // cyclic: -1 is before 1
		{waitGEQ, 32, 2, 1, true},
		{waitEQ, 64, 9, 9, true},
		{waitAND, 32, 6, 1, false},
		{waitAND, 32, 6, 2, true},
		{waitNOR, 32, 0xfffffffe, 1, false},
		{waitNOR, 32, 0xfffffffe, 0, true},
	} {
		b := make([]byte, 8)
		binary.LittleEndian.PutUint64(b, tc.cur)
		mustPut(t, d, c, flag, b)
		if got := d.condition(d.ctxs[c], flag, tc.value, tc.flags, tc.width)(); got != tc.want {
			t.Errorf("wait flags %d width %d: %#x against %#x: %v, want %v", tc.flags, tc.width, tc.cur, tc.value, got, tc.want)
		}
	}
	if err := d.StreamWaitValue(ctx, c, 0, flag+2, 0, 0, 32); cu.Code(err) != cu.ErrorInvalidValue {
		t.Errorf("misaligned wait: %v", err)
	}
}

func TestPitchedCopies(t *testing.T) {
	d, c := newTestDevice(t, 16<<20)
	ctx := context.Background()
	p, _ := d.MemAlloc(ctx, c, 64*1024)
	q, _ := d.MemAlloc(ctx, c, 64*1024)
	mustPut(t, d, c, p, make([]byte, 64*1024))
	e := backend.Extent{Width: 10, Height: 3, Depth: 2}
	src := pattern(60, 5)
	to := backend.Pitched{Ptr: p + 4, Pitch: 32, Height: 4}
	if err := d.MemcpyHtoD3D(ctx, c, to, bytes.NewReader(src), e, 0); err != nil {
		t.Fatal(err)
	}
	whole := mustGet(t, d, c, p, 256)
	for z := 0; z < 2; z++ {
		for y := 0; y < 3; y++ {
			off := 4 + (z*4+y)*32
			if !bytes.Equal(whole[off:off+10], src[(z*3+y)*10:][:10]) {
				t.Fatalf("row %d of slice %d landed wrong", y, z)
			}
		}
	}
	if whole[0] != 0 || whole[14] != 0 {
		t.Fatal("bytes outside the rows were written")
	}
	if err := d.MemcpyDtoD3D(ctx, c, backend.Pitched{Ptr: q, Pitch: 10, Height: 3}, to, e, 0); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := d.MemcpyDtoH3D(ctx, c, &out, backend.Pitched{Ptr: q, Pitch: 10, Height: 3}, e, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), src) {
		t.Fatal("the pitched round trip changed the data")
	}
	if err := d.MemcpyDtoD3D(ctx, c, backend.Pitched{Ptr: q + 64*1024 - 8, Pitch: 10, Height: 3}, to, e, 0); cu.Code(err) != cu.ErrorInvalidValue {
		t.Fatalf("a copy past the end: %v", err)
	}
}

func TestTensorMapEncodeChecks(t *testing.T) {
	d, _ := newTestDevice(t, 1<<20)
	ctx := context.Background()
	ok := backend.TensorMapParams{DataType: 7, Rank: 2, Address: 0x7f0000001000, GlobalDim: []uint64{64, 32},
		GlobalStrides: []uint64{256}, BoxDim: []uint32{32, 8}, ElemStrides: []uint32{1, 1}, Swizzle: 3}
	tm, err := d.TensorMapEncode(ctx, ok)
	if err != nil {
		t.Fatal(err)
	}
	if binary.LittleEndian.Uint32(tm[:]) != tensorMapMagic || binary.LittleEndian.Uint64(tm[16:]) != uint64(ok.Address) {
		t.Fatalf("descriptor %x", tm[:24])
	}
	again, _ := d.TensorMapEncode(ctx, ok)
	if again != tm {
		t.Fatal("encoding is not deterministic")
	}
	for _, tc := range []struct {
		name string
		mod  func(p *backend.TensorMapParams)
	}{
		{"misaligned address", func(p *backend.TensorMapParams) { p.Address += 8 }},
		{"stride not a multiple of 16", func(p *backend.TensorMapParams) { p.GlobalStrides = []uint64{264} }},
		{"stride shorter than a row", func(p *backend.TensorMapParams) { p.GlobalStrides = []uint64{128} }},
		{"box over 256", func(p *backend.TensorMapParams) { p.BoxDim = []uint32{32, 257} }},
		{"inner box past the swizzle span", func(p *backend.TensorMapParams) { p.BoxDim = []uint32{64, 8} }},
		{"element stride 9", func(p *backend.TensorMapParams) { p.ElemStrides = []uint32{1, 9} }},
		{"unknown data type", func(p *backend.TensorMapParams) { p.DataType = 99 }},
		{"NaN fill of integers", func(p *backend.TensorMapParams) { p.DataType, p.OOBFill = 2, 1 }},
	} {
		p := ok
		p.GlobalStrides = append([]uint64(nil), ok.GlobalStrides...)
		tc.mod(&p)
		if _, err := d.TensorMapEncode(ctx, p); cu.Code(err) != cu.ErrorInvalidValue {
			t.Errorf("%s: %v, want INVALID_VALUE", tc.name, err)
		}
	}
}

// TestQueuedWorkOnFreedMemoryFaults frees memory that work queued behind a
// stream wait still targets: when the wait is released the work faults
// (a sticky error on the context, as on a GPU) instead of touching memory
// that is gone.
func TestQueuedWorkOnFreedMemoryFaults(t *testing.T) {
	d, c := newTestDevice(t, 16<<20)
	ctx := context.Background()
	s, _ := d.StreamCreate(ctx, c, 1, 0)
	flag, _ := d.MemAlloc(ctx, c, 8)
	mustPut(t, d, c, flag, make([]byte, 8))
	p, _ := d.MemAlloc(ctx, c, 1<<20)
	q, _ := d.MemAllocAsync(ctx, c, 1<<20, 0, 0)
	if err := d.StreamWaitValue(ctx, c, s, flag, 1, waitEQ, 32); err != nil {
		t.Fatal(err)
	}
	if err := d.Memset(ctx, c, p, 7, 1, 1<<20, s); err != nil {
		t.Fatal(err)
	}
	if err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(make([]byte, 64)), 64, s); err != nil {
		t.Fatal(err)
	}
	// A stream-ordered free behind the wait waits too.
	if err := d.MemFreeAsync(ctx, c, q, s); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.poolOf[uint64(q)]; !ok {
		t.Fatal("a free queued behind a wait happened at once")
	}
	if err := d.MemFree(ctx, c, p); err != nil {
		t.Fatal(err)
	}
	if err := d.StreamWriteValue(ctx, c, 0, flag, 1, 0, 32); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.poolOf[uint64(q)]; ok {
		t.Fatal("the queued free did not run after the release")
	}
	if err := d.CtxSynchronize(ctx, c); cu.Code(err) != cu.ErrorIllegalAddress {
		t.Fatalf("queued work on freed memory: %v, want ILLEGAL_ADDRESS", err)
	}
}
