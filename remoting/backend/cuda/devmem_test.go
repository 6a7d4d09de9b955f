package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// These tests need a GPU; they skip elsewhere. The GPU suite runs them
// (e2e/gpu/ckpt-bench.sh, and `go test -run 'VMM|DeviceMemory|HashKernel'
// ./remoting/backend/cuda` on a GPU host).

func gpuDevice(t *testing.T, opts Options) (*Device, backend.Ctx) {
	t.Helper()
	if !Available() {
		t.Skip("no usable NVIDIA GPU and driver here")
	}
	d, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	c, err := d.PrimaryCtxRetain(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return d, c
}

func randomBytes(rng *rand.Rand, n uint64) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// allocFilled allocates sizes and fills each with random bytes, except
// allocation zero (-1: none), which it fills with zeros.
func allocFilled(t *testing.T, d *Device, c backend.Ctx, rng *rand.Rand, sizes []uint64, zero int) ([]backend.DevPtr, [][]byte) {
	t.Helper()
	ctx := context.Background()
	ptrs := make([]backend.DevPtr, len(sizes))
	data := make([][]byte, len(sizes))
	for i, n := range sizes {
		p, err := d.MemAlloc(ctx, c, n)
		if err != nil {
			t.Fatal(err)
		}
		ptrs[i], data[i] = p, randomBytes(rng, n)
		if i == zero {
			data[i] = make([]byte, n)
		}
		if err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(data[i]), n, 0); err != nil {
			t.Fatal(err)
		}
	}
	return ptrs, data
}

func readBack(t *testing.T, d *Device, c backend.Ctx, p backend.DevPtr, n uint64) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := d.MemcpyDtoH(context.Background(), c, &out, p, n, 0); err != nil {
		t.Fatalf("read back %#x+%d: %v", uint64(p), n, err)
	}
	return out.Bytes()
}

// TestVMMAllocations checks that cuMemAlloc is served from the worker's
// own mappings and behaves as cuMemAlloc: alignment, ranges, copies,
// frees, bad frees.
func TestVMMAllocations(t *testing.T) {
	ctx := context.Background()
	d, c := gpuDevice(t, Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []uint64{1, 255, 256, 4097, 1 << 20, 3<<20 + 1, 64 << 20}
	ptrs := make([]backend.DevPtr, len(sizes))
	data := make([][]byte, len(sizes))
	for i, n := range sizes {
		p, err := d.MemAlloc(ctx, c, n)
		if err != nil {
			t.Fatalf("MemAlloc(%d): %v", n, err)
		}
		if p%allocAlign != 0 {
			t.Errorf("MemAlloc(%d) = %#x, not %d-byte aligned", n, uint64(p), allocAlign)
		}
		base, size, err := d.MemGetAddressRange(ctx, c, p+backend.DevPtr(n/2))
		if err != nil || base != p || size != n {
			t.Errorf("MemGetAddressRange(%#x+%d) = %#x, %d, %v; want %#x, %d", uint64(p), n/2, uint64(base), size, err, uint64(p), n)
		}
		ptrs[i], data[i] = p, randomBytes(rng, n)
		if err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(data[i]), n, 0); err != nil {
			t.Fatalf("MemcpyHtoD(%d): %v", n, err)
		}
	}
	if d.vmm == nil || d.vmm.off || len(d.vmm.chunks) == 0 {
		t.Fatalf("allocations did not come from the worker's own mappings (vmm %+v)", d.vmm)
	}
	for i, n := range sizes {
		if got := readBack(t, d, c, ptrs[i], n); !bytes.Equal(got, data[i]) {
			t.Errorf("allocation of %d bytes read back different bytes", n)
		}
	}
	// A device-to-device copy and a memset across chunk kinds.
	if err := d.MemcpyDtoD(ctx, c, ptrs[5], ptrs[6], sizes[5], 0); err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, d, c, ptrs[5], sizes[5]); !bytes.Equal(got, data[6][:sizes[5]]) {
		t.Error("device-to-device copy between a shared and a dedicated chunk differs")
	}
	if err := d.Memset(ctx, c, ptrs[3], 0xab, 1, sizes[3], 0); err != nil {
		t.Fatal(err)
	}
	if got := readBack(t, d, c, ptrs[3], sizes[3]); !bytes.Equal(got, bytes.Repeat([]byte{0xab}, int(sizes[3]))) {
		t.Error("memset did not fill the allocation")
	}
	// Inside an allocation, not at its start: ptrs[2]+256 would be the
	// next allocation's start, since small ones are placed first fit.
	for _, bad := range []backend.DevPtr{ptrs[3] + 256, 0xdead0000} {
		var ce *cu.Error
		if err := d.MemFree(ctx, c, bad); !errors.As(err, &ce) || ce.Code != cu.ErrorInvalidValue {
			t.Errorf("MemFree(%#x) = %v, want CUDA_ERROR_INVALID_VALUE", uint64(bad), err)
		}
	}
	if _, err := d.MemAlloc(ctx, c, 0); err == nil {
		t.Error("MemAlloc(0) succeeded")
	}
	for i, p := range ptrs {
		if err := d.MemFree(ctx, c, p); err != nil {
			t.Errorf("MemFree(%d bytes): %v", sizes[i], err)
		}
	}
	if err := d.MemFree(ctx, c, ptrs[6]); err == nil {
		t.Error("a second free of the same allocation succeeded")
	}
	// Freed memory stays mapped until the context has drained.
	if err := d.CtxSynchronize(ctx, c); err != nil {
		t.Fatal(err)
	}
	if n := len(d.vmm.chunks); n > 1 {
		t.Errorf("%d chunks still mapped after every allocation was freed, want at most the spare", n)
	}
}

// spinPTX: each thread of spin(p, n) stores 0..n-1 into p[tid], volatile,
// so the kernel runs for a while after its launch has returned.
const spinPTX = ".version 7.0\n.target sm_52\n.address_size 64\n" +
	".visible .entry spin(.param .u64 p, .param .u32 n)\n{\n" +
	"  .reg .pred %p<2>;\n  .reg .b32 %r<4>;\n  .reg .b64 %rd<4>;\n" +
	"  ld.param.u64 %rd1, [p];\n  ld.param.u32 %r1, [n];\n  cvta.to.global.u64 %rd1, %rd1;\n" +
	"  mov.u32 %r2, %tid.x;\n  mul.wide.u32 %rd2, %r2, 4;\n  add.s64 %rd3, %rd1, %rd2;\n  mov.u32 %r3, 0;\n" +
	"LOOP:\n  st.volatile.global.u32 [%rd3], %r3;\n  add.u32 %r3, %r3, 1;\n" +
	"  setp.lt.u32 %p1, %r3, %r1;\n  @%p1 bra LOOP;\n  ret;\n}\n"

// TestVMMFreeUnderRunningKernel frees memory a kernel launched just before
// is still writing, as a Thrust sort frees its temporary storage before
// it synchronises, and allocates again at once: the kernel must finish
// without a fault and the context synchronise cleanly. Unmapping or
// reusing the memory at the free faulted the kernel with an illegal
// address.
func TestVMMFreeUnderRunningKernel(t *testing.T) {
	ctx := context.Background()
	d, c := gpuDevice(t, Options{})
	m, err := d.ModuleLoad(ctx, c, []byte(spinPTX))
	if err != nil {
		t.Fatal(err)
	}
	f, params, err := d.ModuleGetFunction(ctx, c, m, "spin")
	if err != nil || len(params) != 2 {
		t.Fatalf("ModuleGetFunction(spin) = %v, %v", params, err)
	}
	launch := func(p backend.DevPtr) {
		t.Helper()
		buf := make([]byte, params[1].Offset+params[1].Size)
		binary.LittleEndian.PutUint64(buf[params[0].Offset:], uint64(p))
		binary.LittleEndian.PutUint32(buf[params[1].Offset:], 1<<22)
		cfg := backend.LaunchConfig{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: buf}
		if err := d.Launch(ctx, c, f, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []uint64{8 << 20, 4096} { // a dedicated chunk, a shared one
		for round := range 3 {
			p, err := d.MemAlloc(ctx, c, n)
			if err != nil {
				t.Fatal(err)
			}
			launch(p)
			if err := d.MemFree(ctx, c, p); err != nil {
				t.Fatalf("MemFree of %d bytes under a running kernel: %v", n, err)
			}
			q, err := d.MemAlloc(ctx, c, n)
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Memset(ctx, c, q, 0, 1, n, 0); err != nil {
				t.Fatal(err)
			}
			if err := d.CtxSynchronize(ctx, c); err != nil {
				t.Fatalf("%d bytes, round %d: the context faulted after memory a running kernel wrote was freed: %v", n, round, err)
			}
			if err := d.MemFree(ctx, c, q); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestPlainMemory checks the switch back to the driver's allocator: the
// worker then lists no memory of its own.
func TestPlainMemory(t *testing.T) {
	ctx := context.Background()
	d, c := gpuDevice(t, Options{PlainMemory: true})
	p, err := d.MemAlloc(ctx, c, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := d.MemRegions(ctx)
	if err != nil || len(regs) != 0 {
		t.Errorf("MemRegions with plain memory = %v, %v; want none", regs, err)
	}
	if err := d.MemFree(ctx, c, p); err != nil {
		t.Fatal(err)
	}
}

// TestHashKernel holds the GPU's block hashes to devmem.HashBlock over
// the same bytes, for several block sizes (whole strides, leftover words,
// a tail of bytes, a short last block).
func TestHashKernel(t *testing.T) {
	ctx := context.Background()
	d, c := gpuDevice(t, Options{})
	rng := rand.New(rand.NewPCG(5, 6))
	n := uint64(6 << 20)
	p, err := d.MemAlloc(ctx, c, n)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := d.MemRegions(ctx)
	if err != nil || len(regs) != 1 {
		t.Fatalf("MemRegions = %v, %v; want one chunk", regs, err)
	}
	r := regs[0]
	data := randomBytes(rng, r.Size)
	if err := d.MemcpyHtoD(ctx, c, p, bytes.NewReader(data[:n]), n, 0); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, r.Size)
	if err := d.ReadMem(ctx, r, 0, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:n], data[:n]) {
		t.Fatal("ReadMem read different bytes from those copied in")
	}
	for _, block := range []uint64{devmem.DefaultBlock, 4096, 8 * 1001, 8 * 45, 3 << 20} {
		seed := rng.Uint64() | 1
		hs := make([]uint64, devmem.BlocksOf(r.Size, block))
		if err := d.HashBlocks(ctx, r, block, seed, hs); err != nil {
			t.Fatalf("HashBlocks(block %d): %v", block, err)
		}
		bad := 0
		for i, h := range hs {
			lo := uint64(i) * block
			if want := devmem.HashBlock(seed, got[lo:min(lo+block, r.Size)]); h != want {
				if bad++; bad <= 3 {
					t.Errorf("block size %d, block %d: GPU %#x, host %#x", block, i, h, want)
				}
			}
		}
		if bad > 0 {
			t.Errorf("block size %d: %d of %d hashes differ", block, bad, len(hs))
		}
	}
}

// TestDeviceMemoryRoundTrip saves the session's memory with devmem,
// releases it, backs it again and reloads it, and checks every byte; then
// a second save of the unchanged memory finds one changed block.
func TestDeviceMemoryRoundTrip(t *testing.T) {
	ctx := context.Background()
	d, c := gpuDevice(t, Options{})
	sizes := []uint64{1000, 200 << 10, 5<<20 + 3, 96 << 20}
	ptrs, data := allocFilled(t, d, c, rand.New(rand.NewPCG(7, 8)), sizes, 2) // 2 stays zero: a reload skips it
	tr := devmem.NewTracker()
	tr.Pin = true // the direct path; the ring is the default
	f, sv, err := tr.Save(ctx, d, devmem.SaveRequest{Release: true})
	if err != nil {
		t.Fatalf("save: %v", err)
	}
	defer f.Close()
	regs, _ := d.MemRegions(ctx)
	if err := d.ReadMem(ctx, regs[0], 0, make([]byte, 8)); err == nil {
		t.Error("ReadMem of released memory succeeded")
	}
	if sv.Bytes < int64(96<<20) {
		t.Errorf("saved %d bytes, want at least the 96 MiB allocated", sv.Bytes)
	}
	// Enough to copy for the direct path: the memfd pinned, no bounce.
	if sv.PinnedBytes < int64(96<<20) || sv.PinError != "" {
		t.Errorf("pinned %d bytes of the memfd (%s); want the whole save", sv.PinnedBytes, sv.PinError)
	}
	t.Logf("save of %d bytes: hash %v, prepare %v, copy %v, release %v", sv.Bytes,
		time.Duration(sv.HashNS), time.Duration(sv.PrepareNS), time.Duration(sv.CopyNS), time.Duration(sv.ReleaseNS))
	if err := tr.Reload(ctx, d, f, sv.LayoutOff, sv.LayoutLen); err != nil {
		t.Fatalf("reload: %v", err)
	}
	for i, n := range sizes {
		if got := readBack(t, d, c, ptrs[i], n); !bytes.Equal(got, data[i]) {
			t.Errorf("allocation %d (%d bytes) differs after release and reload", i, n)
		}
	}
	// Change one byte of the large allocation: the next save relative to
	// the first sends one block.
	if err := d.Memset(ctx, c, ptrs[3]+backend.DevPtr(7<<20), 0x5a, 1, 1, 0); err != nil {
		t.Fatal(err)
	}
	f2, sv2, err := tr.Save(ctx, d, devmem.SaveRequest{Base: sv.Gen})
	if err != nil {
		t.Fatalf("second save: %v", err)
	}
	f2.Close()
	if sv2.SentBytes != devmem.DefaultBlock {
		t.Errorf("second save sent %d bytes, want one block (%d)", sv2.SentBytes, devmem.DefaultBlock)
	}
	// Into the first save's memfd, which holds all of it (its mirror):
	// one block comes across, and the memfd reloads the session whole.
	f3, sv3, err := tr.Save(ctx, d, devmem.SaveRequest{Base: sv.Gen, All: true, Release: true, Into: f, Mirror: sv.Gen})
	if err != nil {
		t.Fatalf("save into the mirror: %v", err)
	}
	if f3 != f || sv3.CopiedBytes != devmem.DefaultBlock {
		t.Errorf("save into the mirror: same file %v, copied %d bytes; want one block", f3 == f, sv3.CopiedBytes)
	}
	if err := tr.Reload(ctx, d, f3, sv3.LayoutOff, sv3.LayoutLen); err != nil {
		t.Fatalf("reload from the mirror: %v", err)
	}
	data[3][7<<20] = 0x5a
	for i, n := range sizes {
		if got := readBack(t, d, c, ptrs[i], n); !bytes.Equal(got, data[i]) {
			t.Errorf("allocation %d (%d bytes) differs after a save into the mirror and a reload", i, n)
		}
	}
}
