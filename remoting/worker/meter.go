package worker

import (
	"context"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// meter is the session's device as dispatch sees it: it counts the bytes
// MemAlloc handed out and, while gpud meters the session (its tenant has
// a memory limit), asks gpud before holding more than gpud last granted.
// A refused allocation fails with CUDA_ERROR_OUT_OF_MEMORY, as one the
// device could not serve would; the session goes on.
//
// Only the call thread allocates and frees; the control loop reads the
// count (stats) and switches metering (attach, resume, quiesce), hence
// the mutex. Module globals and the driver's own use of device memory are
// not counted: the limit is on what the client allocates.
type meter struct {
	backend.Device
	log *slog.Logger

	total atomic.Uint64 // bytes allocated and not freed

	mu      sync.Mutex
	allocs  map[backend.DevPtr]allocation
	granted uint64       // what gpud last agreed the session may hold
	quota   *quotaClient // nil: not metered
}

type allocation struct {
	ctx  backend.Ctx
	size uint64
}

var _ backend.Device = (*meter)(nil)

func newMeter(dev backend.Device, log *slog.Logger) *meter {
	return &meter{Device: dev, log: log, allocs: map[backend.DevPtr]allocation{}}
}

// Allocated is what the session's allocations hold now.
func (m *meter) Allocated() uint64 { return m.total.Load() }

// configure meters the session against gpud's quota service name, or
// stops metering for "". gpud's ledger counts the session's allocations
// as they are when it sends this (the session is quiesced or new), so
// that is what is granted.
func (m *meter) configure(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.quota != nil && m.quota.name != name {
		m.quota.close()
		m.quota = nil
	}
	if name != "" && m.quota == nil {
		m.quota = &quotaClient{name: name}
	}
	m.granted = m.total.Load()
}

// hangUp closes the connection to gpud's quota service (a quiesced worker
// holds no socket); the next question dials again.
func (m *meter) hangUp() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.quota != nil {
		m.quota.close()
	}
}

func (m *meter) MemAlloc(ctx context.Context, c backend.Ctx, size uint64) (backend.DevPtr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	total := m.total.Load()
	if size > math.MaxUint64-total {
		return 0, cu.Errorf(cu.ErrorOutOfMemory, "an allocation of %d bytes cannot be counted", size)
	}
	want := total + size
	if m.quota != nil && want > m.granted {
		g, err := m.quota.ask(want)
		if err != nil {
			m.log.Warn("allocation refused: the quota service did not answer", "bytes", size, "err", err)
			return 0, cu.Errorf(cu.ErrorOutOfMemory, "device memory quota: %v", err)
		}
		if !g.OK {
			m.log.Info("allocation refused by the tenant's device memory limit", "bytes", size, "session_bytes", total,
				"tenant_bytes", g.Held, "limit", g.Limit, "why", g.Reason)
			return 0, cu.Errorf(cu.ErrorOutOfMemory, "the tenant's device memory limit of %d bytes is reached (%d held)", g.Limit, g.Held)
		}
		m.granted = want
	}
	p, err := m.Device.MemAlloc(ctx, c, size)
	if err != nil {
		m.settle()
		return 0, err
	}
	m.allocs[p] = allocation{ctx: c, size: size}
	m.total.Store(want)
	return p, nil
}

func (m *meter) MemFree(ctx context.Context, c backend.Ctx, p backend.DevPtr) error {
	if err := m.Device.MemFree(ctx, c, p); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.allocs[p]; ok {
		delete(m.allocs, p)
		m.total.Add(-a.size)
	}
	m.settle()
	return nil
}

// MemGetInfo reports, for a metered session, no more free memory than
// the tenant has left, and no more in all than its limit, so that a
// program sizing its allocations from it stays within the limit.
func (m *meter) MemGetInfo(ctx context.Context, c backend.Ctx) (uint64, uint64, error) {
	free, total, err := m.Device.MemGetInfo(ctx, c)
	if err != nil {
		return free, total, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.quota == nil {
		return free, total, nil
	}
	g, qerr := m.quota.ask(m.granted)
	if qerr != nil || g.Limit == 0 {
		return free, total, nil
	}
	left := uint64(0)
	if g.Held < g.Limit {
		left = g.Limit - g.Held
	}
	return min(free, left), min(total, g.Limit), nil
}

// Destroying a context, or releasing or resetting a primary one, frees
// its allocations along with it.

func (m *meter) CtxDestroy(ctx context.Context, c backend.Ctx) error {
	err := m.Device.CtxDestroy(ctx, c)
	m.recount(ctx, err)
	return err
}

func (m *meter) PrimaryCtxRelease(ctx context.Context, dev int32) error {
	err := m.Device.PrimaryCtxRelease(ctx, dev)
	m.recount(ctx, err)
	return err
}

func (m *meter) PrimaryCtxReset(ctx context.Context, dev int32) error {
	err := m.Device.PrimaryCtxReset(ctx, dev)
	m.recount(ctx, err)
	return err
}

// recount drops the allocations the device no longer has, after a call
// that may have freed some; err is that call's result.
func (m *meter) recount(ctx context.Context, err error) {
	if err != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for p, a := range m.allocs {
		if base, _, err := m.Device.MemGetAddressRange(ctx, a.ctx, p); err != nil || base != p {
			delete(m.allocs, p)
			m.total.Add(-a.size)
		}
	}
	m.settle()
}

// settle gives back to gpud what was granted beyond what is held (after
// a free, or an allocation the device refused). The caller holds m.mu.
func (m *meter) settle() {
	total := m.total.Load()
	if m.quota == nil || m.granted <= total {
		return
	}
	if _, err := m.quota.ask(total); err != nil {
		// gpud keeps counting the larger figure, which errs on the safe
		// side; the next question corrects it.
		m.log.Warn("could not give device memory back to the tenant's quota", "err", err)
		return
	}
	m.granted = total
}

func (m *meter) Close() error {
	err := m.Device.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range m.allocs {
		delete(m.allocs, p)
	}
	m.total.Store(0)
	if m.quota != nil {
		m.quota.close()
	}
	return err
}
