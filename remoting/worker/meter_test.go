package worker

import (
	"context"
	"log/slog"
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
