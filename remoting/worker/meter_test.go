package worker

import (
	"context"
	"log/slog"
	"math"
	"os"
	"sync"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// tenantLedger is one tenant's account with a limit: other sessions of
// the tenant hold others bytes, and each PID holds what it was granted.
type tenantLedger struct {
	mu     sync.Mutex
	limit  uint64
	others uint64
	held   map[int]uint64
	asked  []uint64 // every request, in order
}

func (l *tenantLedger) Hold(pid int, b uint64) QuotaGrant {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.asked = append(l.asked, b)
	if l.held == nil {
		l.held = map[int]uint64{}
	}
	sum := l.others
	for p, h := range l.held {
		if p != pid {
			sum += h
		}
	}
	if b > l.held[pid] && sum+b > l.limit {
		return QuotaGrant{Limit: l.limit, Held: sum + l.held[pid], Reason: "over the limit"}
	}
	l.held[pid] = b
	return QuotaGrant{OK: true, Limit: l.limit, Held: sum + b}
}

func (l *tenantLedger) holding(pid int) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[pid]
}

func serveQuota(t *testing.T, l Ledger) *QuotaServer {
	t.Helper()
	q, err := ListenQuota()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { q.Serve(ctx, l, nil); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return q
}

func newTestMeter(t *testing.T) (*meter, backend.Ctx) {
	t.Helper()
	m := newMeter(emulated.New(emulated.Config{MemBytes: 64 << 20, Seed: "meter"}), slog.New(slog.DiscardHandler))
	t.Cleanup(func() { m.Close() })
	c, err := m.PrimaryCtxRetain(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

func TestMeterCountsUnmetered(t *testing.T) {
	ctx := context.Background()
	m, c := newTestMeter(t)
	p1, err := m.MemAlloc(ctx, c, 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.MemAlloc(ctx, c, 4<<20); err != nil {
		t.Fatal(err)
	}
	if got := m.Allocated(); got != 12<<20 {
		t.Fatalf("allocated %d, want 12 MiB", got)
	}
	// The device's own refusal is counted as nothing.
	if _, err := m.MemAlloc(ctx, c, 1<<40); cu.Code(err) != cu.ErrorOutOfMemory || m.Allocated() != 12<<20 {
		t.Fatalf("oversized allocation: %v, allocated %d", err, m.Allocated())
	}
	if err := m.MemFree(ctx, c, p1); err != nil || m.Allocated() != 4<<20 {
		t.Fatalf("after free: %v, allocated %d", err, m.Allocated())
	}
	// A free the device refuses changes nothing.
	if err := m.MemFree(ctx, c, p1); err == nil || m.Allocated() != 4<<20 {
		t.Fatalf("double free: %v, allocated %d", err, m.Allocated())
	}
	// Releasing the last reference to the primary context frees what it
	// held.
	if err := m.PrimaryCtxRelease(ctx, 0); err != nil || m.Allocated() != 0 {
		t.Fatalf("after the primary context's release: %v, allocated %d", err, m.Allocated())
	}
}

func TestMeterAsksGpud(t *testing.T) {
	ctx := context.Background()
	l := &tenantLedger{limit: 1 << 20, others: 256 << 10}
	q := serveQuota(t, l)
	m, c := newTestMeter(t)
	m.configure(q.Name())
	me := os.Getpid()

	p, err := m.MemAlloc(ctx, c, 512<<10)
	if err != nil || l.holding(me) != 512<<10 {
		t.Fatalf("allocation within the limit: %v; ledger holds %d", err, l.holding(me))
	}
	// 256 KiB (others) + 512 KiB + 512 KiB > 1 MiB.
	if _, err := m.MemAlloc(ctx, c, 512<<10); cu.Code(err) != cu.ErrorOutOfMemory {
		t.Fatalf("allocation past the limit: %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if m.Allocated() != 512<<10 || l.holding(me) != 512<<10 {
		t.Fatalf("a refused allocation changed the counts: %d, ledger %d", m.Allocated(), l.holding(me))
	}
	// Exactly what is left fits, and then nothing is free.
	if _, err := m.MemAlloc(ctx, c, 256<<10); err != nil {
		t.Fatalf("allocation of exactly what is left: %v", err)
	}
	free, total, err := m.MemGetInfo(ctx, c)
	if err != nil || free != 0 || total != 1<<20 {
		t.Fatalf("MemGetInfo at the limit: %d free of %d, %v; want 0 of 1 MiB", free, total, err)
	}
	// A free gives the memory back to the tenant at once.
	if err := m.MemFree(ctx, c, p); err != nil || l.holding(me) != 256<<10 {
		t.Fatalf("after free: %v; ledger holds %d, want 256 KiB", err, l.holding(me))
	}
	if free, _, _ := m.MemGetInfo(ctx, c); free != 512<<10 {
		t.Fatalf("MemGetInfo after free: %d free, want 512 KiB", free)
	}
	// An allocation the device refuses gives its grant back.
	l.mu.Lock()
	l.limit = 1 << 50
	l.mu.Unlock()
	if _, err := m.MemAlloc(ctx, c, 1<<40); cu.Code(err) != cu.ErrorOutOfMemory || l.holding(me) != 256<<10 {
		t.Fatalf("device refusal: %v; ledger holds %d, want 256 KiB", err, l.holding(me))
	}
	// A context destroyed with allocations in it gives them back.
	c2, err := m.CtxCreate(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.MemAlloc(ctx, c2, 1<<20); err != nil || l.holding(me) != 1280<<10 {
		t.Fatalf("allocation in a second context: %v; ledger %d", err, l.holding(me))
	}
	if err := m.CtxDestroy(ctx, c2); err != nil || m.Allocated() != 256<<10 || l.holding(me) != 256<<10 {
		t.Fatalf("after destroying the context: %v; allocated %d, ledger %d", err, m.Allocated(), l.holding(me))
	}
	// A session no longer metered asks nothing.
	l.mu.Lock()
	n := len(l.asked)
	l.mu.Unlock()
	m.hangUp()
	m.configure("")
	_, err = m.MemAlloc(ctx, c, 4<<20)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil || len(l.asked) != n {
		t.Fatalf("an unmetered allocation: %v, %d questions (had %d)", err, len(l.asked), n)
	}
}

func TestMeterWithoutGpudFailsClosed(t *testing.T) {
	m, c := newTestMeter(t)
	m.configure("nobody-listens-here")
	if _, err := m.MemAlloc(context.Background(), c, 4096); cu.Code(err) != cu.ErrorOutOfMemory {
		t.Fatalf("allocation with the quota service gone: %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if m.Allocated() != 0 {
		t.Fatalf("allocated %d after a refusal", m.Allocated())
	}
}

// Arguments of the pool and VMM calls on the emulated device: pinned
// device memory of device 0, and its VMM granularity.
const (
	pinned   = 1 // CU_MEM_ALLOCATION_TYPE_PINNED
	onDevice = 1 // CU_MEM_LOCATION_TYPE_DEVICE
	gran     = 2 << 20
	// CU_MEMPOOL_ATTR_RELEASE_THRESHOLD
	releaseThreshold = 4
)

// keepingPool is a pool that keeps every freed byte for reuse.
func keepingPool(t *testing.T, m *meter) backend.MemPool {
	t.Helper()
	ctx := context.Background()
	p, err := m.MemPoolCreate(ctx, pinned, 0, onDevice, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MemPoolSetAttribute(ctx, p, releaseThreshold, math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	return p
}

// Pools and VMM count as cuMemAlloc does, for as long as the device
// holds their memory.
func TestMeterCountsPoolsAndVMM(t *testing.T) {
	ctx := context.Background()
	m, c := newTestMeter(t)
	want := func(what string, n uint64) {
		t.Helper()
		if got := m.Allocated(); got != n {
			t.Fatalf("%s: allocated %d, want %d", what, got, n)
		}
	}

	// The default pool releases what is freed (threshold 0).
	p, err := m.MemAllocAsync(ctx, c, 4<<20, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want("stream-ordered allocation", 4<<20)
	if err := m.MemFreeAsync(ctx, c, p, 0); err != nil {
		t.Fatal(err)
	}
	want("after its free", 0)

	// A pool that keeps freed memory holds it until trimmed.
	pool := keepingPool(t, m)
	if p, err = m.MemAllocAsync(ctx, c, 8<<20, pool, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.MemFree(ctx, c, p); err != nil { // cuMemFree takes pool memory too
		t.Fatal(err)
	}
	want("freed into a pool that keeps it", 8<<20)
	if _, err := m.MemAllocAsync(ctx, c, 8<<20, pool, 0); err != nil {
		t.Fatal(err)
	}
	want("reused from the pool", 8<<20)
	if _, err := m.MemAllocAsync(ctx, c, 2<<20, pool, 0); err != nil {
		t.Fatal(err)
	}
	want("a second allocation from the pool", 10<<20)
	// A destroyed pool holds its allocations until they are freed.
	if err := m.MemPoolDestroy(ctx, pool); err != nil {
		t.Fatal(err)
	}
	want("destroyed pool with live allocations", 10<<20)
	pool = keepingPool(t, m)
	if p, err = m.MemAllocAsync(ctx, c, 4<<20, pool, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.MemFreeAsync(ctx, c, p, 0); err != nil {
		t.Fatal(err)
	}
	want("a second pool keeping memory", 14<<20)
	if err := m.MemPoolTrimTo(ctx, pool, 0); err != nil {
		t.Fatal(err)
	}
	want("after trimming it", 10<<20)

	// A physical allocation counts until it is released and unmapped.
	h, err := m.MemCreate(ctx, 2*gran, pinned, 0, onDevice, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want("cuMemCreate", 10<<20+2*gran)
	va, err := m.MemAddressReserve(ctx, 4*gran, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	want("an address reservation", 10<<20+2*gran)
	if err := m.MemMap(ctx, va, 2*gran, 0, h, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.MemMap(ctx, va+2*gran, gran, gran, h, 0); err != nil { // an alias of its second half
		t.Fatal(err)
	}
	if err := m.MemRelease(ctx, h); err != nil {
		t.Fatal(err)
	}
	want("released but mapped", 10<<20+2*gran)
	h2, err := m.MemRetainAllocationHandle(ctx, va+2*gran)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.MemUnmap(ctx, va, 3*gran); err != nil {
		t.Fatal(err)
	}
	want("unmapped but retained", 10<<20+2*gran)
	if err := m.MemRelease(ctx, h2); err != nil {
		t.Fatal(err)
	}
	want("released and unmapped", 10<<20)
	if err := m.MemAddressFree(ctx, va, 4*gran); err != nil {
		t.Fatal(err)
	}
}

// A tenant cannot get past its limit through pools or VMM: an allocation
// of either past it fails as cuMemAlloc's does, and memory a pool keeps
// for reuse is the session's.
func TestMeterLimitsPoolsAndVMM(t *testing.T) {
	ctx := context.Background()
	l := &tenantLedger{limit: 8 << 20}
	q := serveQuota(t, l)
	m, c := newTestMeter(t)
	m.configure(q.Name())
	me := os.Getpid()
	oom := func(what string, err error) {
		t.Helper()
		if cu.Code(err) != cu.ErrorOutOfMemory {
			t.Fatalf("%s: %v, want CUDA_ERROR_OUT_OF_MEMORY", what, err)
		}
	}

	p, err := m.MemAllocAsync(ctx, c, 6<<20, 0, 0)
	if err != nil || l.holding(me) != 6<<20 {
		t.Fatalf("stream-ordered allocation within the limit: %v; ledger holds %d", err, l.holding(me))
	}
	_, err = m.MemAllocAsync(ctx, c, 4<<20, 0, 0)
	oom("stream-ordered allocation past the limit", err)
	_, err = m.MemCreate(ctx, 2*gran, pinned, 0, onDevice, 0, 0, 0)
	oom("cuMemCreate past the limit", err)
	if m.Allocated() != 6<<20 || l.holding(me) != 6<<20 {
		t.Fatalf("refusals changed the counts: %d, ledger %d", m.Allocated(), l.holding(me))
	}
	if err := m.MemFreeAsync(ctx, c, p, 0); err != nil || l.holding(me) != 0 {
		t.Fatalf("after the free: %v; ledger holds %d", err, l.holding(me))
	}

	// Memory parked in a pool still counts: it cannot be held twice.
	pool := keepingPool(t, m)
	if p, err = m.MemAllocAsync(ctx, c, 6<<20, pool, 0); err != nil {
		t.Fatal(err)
	}
	if err := m.MemFreeAsync(ctx, c, p, 0); err != nil || l.holding(me) != 6<<20 {
		t.Fatalf("freed into the pool: %v; ledger holds %d, want 6 MiB", err, l.holding(me))
	}
	_, err = m.MemAlloc(ctx, c, 4<<20)
	oom("cuMemAlloc next to a pool's kept memory", err)
	other := keepingPool(t, m)
	_, err = m.MemAllocAsync(ctx, c, 4<<20, other, 0)
	oom("a second pool next to the first's kept memory", err)
	// The kept memory serves the pool's own allocations.
	if p, err = m.MemAllocAsync(ctx, c, 6<<20, pool, 0); err != nil || l.holding(me) != 6<<20 {
		t.Fatalf("reuse of the pool's memory: %v; ledger holds %d", err, l.holding(me))
	}
	if err := m.MemFree(ctx, c, p); err != nil {
		t.Fatal(err)
	}
	if err := m.MemPoolTrimTo(ctx, pool, 0); err != nil || l.holding(me) != 0 {
		t.Fatalf("after trimming the pool: %v; ledger holds %d", err, l.holding(me))
	}

	// VMM within the limit, then past it, then given back.
	h, err := m.MemCreate(ctx, 3*gran, pinned, 0, onDevice, 0, 0, 0)
	if err != nil || l.holding(me) != 3*gran {
		t.Fatalf("cuMemCreate within the limit: %v; ledger holds %d", err, l.holding(me))
	}
	_, err = m.MemAllocAsync(ctx, c, 4<<20, 0, 0)
	oom("stream-ordered allocation next to VMM memory", err)
	_, err = m.MemCreate(ctx, gran, pinned, 0, onDevice, 0, 0, 0)
	if err != nil {
		t.Fatalf("cuMemCreate of exactly what is left: %v", err)
	}
	if free, _, err := m.MemGetInfo(ctx, c); err != nil || free != 0 {
		t.Fatalf("MemGetInfo at the limit: %d free, %v", free, err)
	}
	if err := m.MemRelease(ctx, h); err != nil || l.holding(me) != gran {
		t.Fatalf("after cuMemRelease: %v; ledger holds %d", err, l.holding(me))
	}
}

// A pool may reserve more than an allocation asks for (the emulated
// device reserves 512-byte blocks): when that passes the limit, the
// allocation is undone and refused, and nothing stays counted.
func TestMeterPoolReservesPastTheLimit(t *testing.T) {
	ctx := context.Background()
	l := &tenantLedger{limit: 1<<20 - 50}
	q := serveQuota(t, l)
	m, c := newTestMeter(t)
	m.configure(q.Name())
	pool := keepingPool(t, m)
	if _, err := m.MemAllocAsync(ctx, c, 1<<20-100, pool, 0); cu.Code(err) != cu.ErrorOutOfMemory {
		t.Fatalf("an allocation whose block passes the limit: %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if m.Allocated() != 0 || l.holding(os.Getpid()) != 0 {
		t.Fatalf("after the refusal: allocated %d, ledger holds %d; want both 0", m.Allocated(), l.holding(os.Getpid()))
	}
	if _, err := m.MemAllocAsync(ctx, c, 1<<20-1024, pool, 0); err != nil || m.Allocated() != 1<<20-1024 {
		t.Fatalf("an allocation whose block fits: %v, allocated %d", err, m.Allocated())
	}
}
