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

// meter is the session's device as dispatch sees it: it counts the device
// memory the session holds and, while gpud meters the session (its tenant
// has a memory limit), asks gpud before holding more than gpud last
// granted. A refused allocation fails with CUDA_ERROR_OUT_OF_MEMORY, as
// one the device could not serve would; the session goes on.
//
// Every way a client holds device memory counts, so that none of them
// gets around the limit:
//
//   - cuMemAlloc: the allocation's size, until cuMemFree or the end of
//     its context;
//   - memory pools (cuMemAllocAsync, cuMemAllocFromPoolAsync): what each
//     pool reserves on the device (CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT),
//     and at least its allocations not yet freed. A pool keeps freed
//     memory for reuse up to its release threshold, and that memory is
//     the session's as much as what it uses: counting only allocations
//     would let a session park its limit in one pool after another. A
//     destroyed pool counts its allocations until they are freed;
//   - virtual memory management: a physical allocation (cuMemCreate)
//     counts its size until it is released and no longer mapped, as the
//     driver frees it. Address reservations hold no memory.
//
// The device's figure for a pool is read again after every call that may
// change it, and for every pool before gpud is asked for more; memory a
// pool gives back at a synchronisation is given back to gpud then. A pool
// allocation may reserve more than it asked for (the device's
// granularity): when that passes what gpud grants, the allocation is
// undone and refused. Module globals and the driver's own use of device
// memory are not counted: the limit is on what the client allocates.
//
// Only the call thread allocates and frees; the control loop reads the
// count (stats) and switches metering (attach, resume, quiesce), hence
// the mutex.
type meter struct {
	backend.Device
	log *slog.Logger

	total atomic.Uint64 // what the session holds, as counted above

	mu      sync.Mutex
	allocs  map[backend.DevPtr]allocation // cuMemAlloc
	plain   uint64                        // their bytes
	pools   map[backend.MemPool]*poolUse
	pooled  map[backend.DevPtr]pooledAlloc // stream-ordered allocations
	handles map[backend.MemHandle]*handleRef
	maps    map[backend.DevPtr]mapping // cuMemMap, by address
	vmm     uint64                     // bytes of physical allocations not yet freed
	granted uint64                     // what gpud last agreed the session may hold
	quota   *quotaClient               // nil: not metered
}

type allocation struct {
	ctx  backend.Ctx
	size uint64
}

// poolUse is one memory pool the session allocated from.
type poolUse struct {
	reserved uint64 // what the device last said the pool reserves
	live     uint64 // bytes of its allocations not yet freed
	gone     bool   // destroyed: it holds only its live allocations
}

// holds is what the pool counts for.
func (p *poolUse) holds() uint64 {
	if p.gone {
		return p.live
	}
	return max(p.reserved, p.live)
}

type pooledAlloc struct {
	pool backend.MemPool
	size uint64
}

// physical is one cuMemCreate allocation. The driver frees it when the
// creation's handle and every retained one are released and no mapping
// is left: refs counts those.
type physical struct {
	size uint64
	refs int
}

// handleRef is a handle the client holds to a physical allocation, with
// the references taken through it (creation or retains).
type handleRef struct {
	phys *physical
	refs int
}

type mapping struct {
	size uint64
	phys *physical
}

// poolAttrReservedCurrent is CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT: the
// device memory a pool holds, in use or kept for reuse.
const poolAttrReservedCurrent = 5

var _ backend.Device = (*meter)(nil)

func newMeter(dev backend.Device, log *slog.Logger) *meter {
	return &meter{Device: dev, log: log, allocs: map[backend.DevPtr]allocation{}, pools: map[backend.MemPool]*poolUse{},
		pooled: map[backend.DevPtr]pooledAlloc{}, handles: map[backend.MemHandle]*handleRef{}, maps: map[backend.DevPtr]mapping{}}
}

// Allocated is what the session holds now.
func (m *meter) Allocated() uint64 { return m.total.Load() }

// held adds up what the session holds. The caller holds m.mu.
func (m *meter) held() uint64 {
	n := m.plain + m.vmm
	for _, p := range m.pools {
		n += p.holds()
	}
	return n
}

// update publishes the count after a change. The caller holds m.mu.
func (m *meter) update() { m.total.Store(m.held()) }

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

// admit makes sure the session may hold grow bytes more: for a metered
// session that would pass what gpud granted, it looks at the pools again
// (they may have given memory back) and then asks gpud. The caller holds
// m.mu.
func (m *meter) admit(ctx context.Context, grow uint64) error {
	total := m.held()
	if grow > math.MaxUint64-total {
		return cu.Errorf(cu.ErrorOutOfMemory, "an allocation of %d bytes cannot be counted", grow)
	}
	if m.quota == nil || total+grow <= m.granted {
		return nil
	}
	m.refreshPools(ctx)
	total = m.held()
	if total+grow <= m.granted {
		return nil
	}
	return m.ask(total, total+grow)
}

// ask asks gpud to let the session, holding total bytes, hold want. The
// caller holds m.mu.
func (m *meter) ask(total, want uint64) error {
	g, err := m.quota.ask(want)
	if err != nil {
		m.log.Warn("allocation refused: the quota service did not answer", "bytes", want-total, "err", err)
		return cu.Errorf(cu.ErrorOutOfMemory, "device memory quota: %v", err)
	}
	if !g.OK && g.Limit == 0 {
		// No tenant limit refused it: the device is full, and gpud
		// could not preempt sessions of lower priority to make room.
		m.log.Info("allocation refused: device memory is full", "bytes", want-total, "session_bytes", total, "why", g.Reason)
		return cu.Errorf(cu.ErrorOutOfMemory, "device memory: %s", g.Reason)
	}
	if !g.OK {
		m.log.Info("allocation refused by the tenant's device memory limit", "bytes", want-total, "session_bytes", total,
			"tenant_bytes", g.Held, "limit", g.Limit, "why", g.Reason)
		return cu.Errorf(cu.ErrorOutOfMemory, "the tenant's device memory limit of %d bytes is reached (%d held)", g.Limit, g.Held)
	}
	m.granted = want
	return nil
}

// settle publishes the count and gives back to gpud what was granted
// beyond what is held (after a free, or an allocation the device
// refused). The caller holds m.mu.
func (m *meter) settle() {
	m.update()
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

func (m *meter) MemAlloc(ctx context.Context, c backend.Ctx, size uint64) (backend.DevPtr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.admit(ctx, size); err != nil {
		return 0, err
	}
	p, err := m.Device.MemAlloc(ctx, c, size)
	if err != nil {
		m.settle()
		return 0, err
	}
	m.allocs[p] = allocation{ctx: c, size: size}
	m.plain += size
	m.update()
	return p, nil
}

func (m *meter) MemFree(ctx context.Context, c backend.Ctx, p backend.DevPtr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.Device.MemFree(ctx, c, p); err != nil {
		return err
	}
	if a, ok := m.allocs[p]; ok {
		delete(m.allocs, p)
		m.plain -= a.size
	} else if _, ok := m.pooled[p]; ok {
		m.poolFreed(ctx, p) // cuMemFree takes pool memory too
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

// Memory pools.

// refreshPool reads what pool h reserves now. A pool the device no longer
// knows keeps its last figure until it is destroyed through the meter,
// which errs on the safe side. The caller holds m.mu.
func (m *meter) refreshPool(ctx context.Context, h backend.MemPool, p *poolUse) {
	if p.gone {
		return
	}
	if v, err := m.Device.MemPoolGetAttribute(ctx, h, poolAttrReservedCurrent); err == nil {
		p.reserved = v
	}
}

// refreshPools reads every pool's figure. The caller holds m.mu.
func (m *meter) refreshPools(ctx context.Context) {
	for h, p := range m.pools {
		m.refreshPool(ctx, h, p)
	}
}

// pool returns the meter's record of pool h, making one with the device's
// figure the first time. The caller holds m.mu.
func (m *meter) pool(ctx context.Context, h backend.MemPool) *poolUse {
	p := m.pools[h]
	if p == nil {
		p = &poolUse{}
		m.refreshPool(ctx, h, p)
		m.pools[h] = p
	}
	return p
}

// poolFreed drops stream-ordered allocation ptr, which the device took
// back into its pool. The caller holds m.mu.
func (m *meter) poolFreed(ctx context.Context, ptr backend.DevPtr) {
	a := m.pooled[ptr]
	delete(m.pooled, ptr)
	p := m.pools[a.pool]
	if p == nil {
		return
	}
	p.live -= min(a.size, p.live)
	if p.gone && p.live == 0 {
		delete(m.pools, a.pool)
		return
	}
	m.refreshPool(ctx, a.pool, p)
}

func (m *meter) MemAllocAsync(ctx context.Context, c backend.Ctx, size uint64, pool backend.MemPool, s backend.Stream) (backend.DevPtr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h := pool
	if h == 0 { // the device's current pool
		var err error
		if h, err = m.Device.DeviceGetMemPool(ctx, 0); err != nil {
			return 0, err
		}
	}
	p := m.pool(ctx, h)
	m.refreshPool(ctx, h, p)
	before, was := p.reserved, m.held()
	// Memory the pool keeps for reuse may serve the allocation; what it
	// must reserve beyond that is checked once the device has answered.
	spare := p.reserved - min(p.live, p.reserved)
	if err := m.admit(ctx, size-min(size, spare)); err != nil {
		return 0, err
	}
	ptr, err := m.Device.MemAllocAsync(ctx, c, size, pool, s)
	// A device short of memory may have trimmed any pool.
	m.refreshPools(ctx)
	if err != nil {
		m.settle()
		return 0, err
	}
	m.pooled[ptr] = pooledAlloc{pool: h, size: size}
	p.live += size
	m.update()
	total := m.total.Load()
	if m.quota == nil || total <= m.granted {
		return ptr, nil
	}
	if err := m.ask(was, total); err != nil {
		// The pool reserved more than asked for, past the limit: undo.
		if ferr := m.Device.MemFreeAsync(ctx, c, ptr, s); ferr == nil {
			m.poolFreed(ctx, ptr)
			_ = m.Device.MemPoolTrimTo(ctx, h, before)
			m.refreshPool(ctx, h, p)
		} else {
			m.log.Warn("an allocation past the tenant's limit could not be undone", "bytes", size, "err", ferr)
		}
		m.settle()
		return 0, err
	}
	return ptr, nil
}

func (m *meter) MemFreeAsync(ctx context.Context, c backend.Ctx, ptr backend.DevPtr, s backend.Stream) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.Device.MemFreeAsync(ctx, c, ptr, s); err != nil {
		return err
	}
	if _, ok := m.pooled[ptr]; ok {
		m.poolFreed(ctx, ptr)
	}
	m.settle()
	return nil
}

// poolChanged reads pool h's figure again after a call that may have
// released some of its memory; err is that call's result.
func (m *meter) poolChanged(ctx context.Context, h backend.MemPool, err error) error {
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pools[h]; p != nil {
		m.refreshPool(ctx, h, p)
		m.settle()
	}
	return nil
}

func (m *meter) MemPoolTrimTo(ctx context.Context, h backend.MemPool, keep uint64) error {
	return m.poolChanged(ctx, h, m.Device.MemPoolTrimTo(ctx, h, keep))
}

// MemPoolSetAttribute may lower the release threshold, which releases
// memory at once.
func (m *meter) MemPoolSetAttribute(ctx context.Context, h backend.MemPool, attr int32, value uint64) error {
	return m.poolChanged(ctx, h, m.Device.MemPoolSetAttribute(ctx, h, attr, value))
}

func (m *meter) MemPoolDestroy(ctx context.Context, h backend.MemPool) error {
	if err := m.Device.MemPoolDestroy(ctx, h); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if p := m.pools[h]; p != nil {
		p.gone = true
		if p.live == 0 {
			delete(m.pools, h)
		}
		m.settle()
	}
	return nil
}

// Virtual memory management.

func (m *meter) MemCreate(ctx context.Context, size uint64, allocType, handleTypes, locType uint32, locID int32, compression uint32, flags uint64) (backend.MemHandle, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.admit(ctx, size); err != nil {
		return 0, err
	}
	h, err := m.Device.MemCreate(ctx, size, allocType, handleTypes, locType, locID, compression, flags)
	if err != nil {
		m.settle()
		return 0, err
	}
	m.handles[h] = &handleRef{phys: &physical{size: size, refs: 1}, refs: 1}
	m.vmm += size
	m.update()
	return h, nil
}

// unref drops one reference to ph; the last frees it. The caller holds
// m.mu.
func (m *meter) unref(ph *physical) {
	if ph.refs--; ph.refs == 0 {
		m.vmm -= ph.size
	}
}

func (m *meter) MemRelease(ctx context.Context, h backend.MemHandle) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.Device.MemRelease(ctx, h); err != nil {
		return err
	}
	if r := m.handles[h]; r != nil {
		if r.refs--; r.refs == 0 {
			delete(m.handles, h)
		}
		m.unref(r.phys)
		m.settle()
	}
	return nil
}

func (m *meter) MemMap(ctx context.Context, p backend.DevPtr, size, offset uint64, h backend.MemHandle, flags uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.Device.MemMap(ctx, p, size, offset, h, flags); err != nil {
		return err
	}
	if r := m.handles[h]; r != nil {
		m.maps[p] = mapping{size: size, phys: r.phys}
		r.phys.refs++
	}
	return nil
}

func (m *meter) MemUnmap(ctx context.Context, p backend.DevPtr, size uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.Device.MemUnmap(ctx, p, size); err != nil {
		return err
	}
	for base, mp := range m.maps {
		if base >= p && uint64(base-p)+mp.size <= size {
			delete(m.maps, base)
			m.unref(mp.phys)
		}
	}
	m.settle()
	return nil
}

// MemRetainAllocationHandle takes a reference on the allocation mapped at
// p, which keeps it alive until the returned handle is released.
func (m *meter) MemRetainAllocationHandle(ctx context.Context, p backend.DevPtr) (backend.MemHandle, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, err := m.Device.MemRetainAllocationHandle(ctx, p)
	if err != nil {
		return h, err
	}
	var ph *physical
	for base, mp := range m.maps {
		if p >= base && uint64(p-base) < mp.size {
			ph = mp.phys
			break
		}
	}
	if ph == nil {
		return h, nil
	}
	if r := m.handles[h]; r != nil && r.phys == ph {
		r.refs++
	} else {
		m.handles[h] = &handleRef{phys: ph, refs: 1}
	}
	ph.refs++
	return h, nil
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
			m.plain -= a.size
		}
	}
	m.refreshPools(ctx)
	m.settle()
}

func (m *meter) Close() error {
	err := m.Device.Close()
	m.mu.Lock()
	defer m.mu.Unlock()
	clear(m.allocs)
	clear(m.pools)
	clear(m.pooled)
	clear(m.handles)
	clear(m.maps)
	m.plain, m.vmm = 0, 0
	m.total.Store(0)
	if m.quota != nil {
		m.quota.close()
	}
	return err
}
