package emulated

import (
	"context"
	"slices"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Memory pools and stream-ordered allocation. A pool hands out arena
// allocations and keeps freed ones for reuse until its release threshold
// says otherwise. Work on this device is complete when the call that
// submits it returns, so a stream-ordered free takes effect at once and
// memory above the threshold goes back to the device right away: what
// CUDA does at the next synchronisation.

// CUmemPool_attribute values.
const (
	poolAttrReuseFollowEvents  = 1
	poolAttrReuseOpportunistic = 2
	poolAttrReuseInternalDeps  = 3
	poolAttrReleaseThreshold   = 4
	poolAttrReservedCurrent    = 5
	poolAttrReservedHigh       = 6
	poolAttrUsedCurrent        = 7
	poolAttrUsedHigh           = 8
)

// poolAlign is the granularity of pool allocations.
const poolAlign = 512

type mempool struct {
	handle      backend.MemPool
	isDefault   bool
	destroyed   bool
	maxSize     uint64
	threshold   uint64
	reuse       [4]bool           // by attribute 1..3
	live        map[uint64]uint64 // base -> size of allocations in use
	cached      []*allocation     // freed blocks kept for reuse
	reserved    uint64            // bytes of live and cached blocks
	used        uint64            // bytes of live blocks
	reservedMax uint64            // high-water marks
	usedMax     uint64
}

func newPool(h backend.MemPool) *mempool {
	return &mempool{handle: h, reuse: [4]bool{false, true, true, true}, live: map[uint64]uint64{}}
}

func blockSize(n uint64) uint64 { return roundUp(n, poolAlign) }

func (d *Device) defaultPool() *mempool {
	if d.poolDefault == 0 {
		p := newPool(backend.MemPool(d.newID()))
		p.isDefault = true
		d.pools[p.handle] = p
		d.poolDefault = p.handle
	}
	return d.pools[d.poolDefault]
}

func (d *Device) pool(h backend.MemPool) (*mempool, error) {
	p, ok := d.pools[h]
	if !ok || p.destroyed {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "memory pool %#x does not exist", uint64(h))
	}
	return p, nil
}

func (d *Device) DeviceGetDefaultMemPool(_ context.Context, dev int32) (backend.MemPool, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	return d.defaultPool().handle, nil
}

func (d *Device) DeviceGetMemPool(_ context.Context, dev int32) (backend.MemPool, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	if d.poolCurrent != 0 {
		return d.poolCurrent, nil
	}
	return d.defaultPool().handle, nil
}

func (d *Device) DeviceSetMemPool(_ context.Context, dev int32, h backend.MemPool) error {
	if err := d.checkDev(dev); err != nil {
		return err
	}
	if _, err := d.pool(h); err != nil {
		return err
	}
	d.poolCurrent = h
	return nil
}

func (d *Device) MemPoolCreate(_ context.Context, allocType, handleTypes, locType uint32, locID int32, maxSize uint64) (backend.MemPool, error) {
	if allocType != allocTypePinned {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "pool allocation type %d (want CU_MEM_ALLOCATION_TYPE_PINNED)", allocType)
	}
	if err := d.checkLocation(locType, locID); err != nil {
		return 0, err
	}
	if handleTypes&^handleTypeMaxBits != 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "pool handle types %#x", handleTypes)
	}
	p := newPool(backend.MemPool(d.newID()))
	p.maxSize = maxSize
	d.pools[p.handle] = p
	return p.handle, nil
}

// MemPoolDestroy frees the pool's cached memory at once; allocations still
// in use stay valid until they are freed, as in CUDA.
func (d *Device) MemPoolDestroy(_ context.Context, h backend.MemPool) error {
	p, err := d.pool(h)
	if err != nil {
		return err
	}
	if p.isDefault {
		return cu.Errorf(cu.ErrorInvalidValue, "the default memory pool cannot be destroyed")
	}
	p.destroyed = true
	d.trim(p, 0)
	if d.poolCurrent == h {
		d.poolCurrent = 0
	}
	if len(p.live) == 0 {
		delete(d.pools, h)
	}
	return nil
}

func (d *Device) MemPoolSetAttribute(_ context.Context, h backend.MemPool, attr int32, value uint64) error {
	p, err := d.pool(h)
	if err != nil {
		return err
	}
	switch attr {
	case poolAttrReuseFollowEvents, poolAttrReuseOpportunistic, poolAttrReuseInternalDeps:
		p.reuse[attr] = value != 0
	case poolAttrReleaseThreshold:
		p.threshold = value
		d.trim(p, p.threshold)
	case poolAttrReservedHigh, poolAttrUsedHigh:
		if value != 0 {
			return cu.Errorf(cu.ErrorInvalidValue, "a pool's high-water mark can only be reset, to 0")
		}
		if attr == poolAttrReservedHigh {
			p.reservedMax = p.reserved
		} else {
			p.usedMax = p.used
		}
	default:
		return cu.Errorf(cu.ErrorInvalidValue, "pool attribute %d cannot be set", attr)
	}
	return nil
}

func (d *Device) MemPoolGetAttribute(_ context.Context, h backend.MemPool, attr int32) (uint64, error) {
	p, err := d.pool(h)
	if err != nil {
		return 0, err
	}
	switch attr {
	case poolAttrReuseFollowEvents, poolAttrReuseOpportunistic, poolAttrReuseInternalDeps:
		if p.reuse[attr] {
			return 1, nil
		}
		return 0, nil
	case poolAttrReleaseThreshold:
		return p.threshold, nil
	case poolAttrReservedCurrent:
		return p.reserved, nil
	case poolAttrReservedHigh:
		return p.reservedMax, nil
	case poolAttrUsedCurrent:
		return p.used, nil
	case poolAttrUsedHigh:
		return p.usedMax, nil
	}
	return 0, cu.Errorf(cu.ErrorInvalidValue, "pool attribute %d does not exist", attr)
}

// trim releases cached blocks, largest first, while the pool keeps at
// least keep bytes reserved.
func (d *Device) trim(p *mempool, keep uint64) {
	slices.SortFunc(p.cached, func(a, b *allocation) int { return len(b.data) - len(a.data) })
	out := p.cached[:0]
	for _, a := range p.cached {
		n := blockSize(uint64(len(a.data)))
		if p.reserved-n >= keep {
			p.reserved -= n
			_ = d.mem.free(a.base)
			continue
		}
		out = append(out, a)
	}
	clear(p.cached[len(out):])
	p.cached = out
}

func (d *Device) MemPoolTrimTo(_ context.Context, h backend.MemPool, keep uint64) error {
	p, err := d.pool(h)
	if err != nil {
		return err
	}
	d.trim(p, keep)
	return nil
}

func (d *Device) MemAllocAsync(_ context.Context, h backend.Ctx, size uint64, ph backend.MemPool, s backend.Stream) (backend.DevPtr, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	if err := d.stream(c, s); err != nil {
		return 0, err
	}
	if size == 0 {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "stream-ordered allocation of 0 bytes")
	}
	if ph == 0 {
		ph, _ = d.DeviceGetMemPool(context.Background(), 0)
	}
	p, err := d.pool(ph)
	if err != nil {
		return 0, err
	}
	n := blockSize(size)
	if n < size {
		return 0, cu.Errorf(cu.ErrorOutOfMemory, "stream-ordered allocation of %d bytes", size)
	}
	var a *allocation
	for i, b := range p.cached {
		if uint64(len(b.data)) == size {
			a = b
			p.cached = slices.Delete(p.cached, i, i+1)
			break
		}
	}
	if a == nil {
		if p.maxSize != 0 && p.reserved+n > p.maxSize {
			d.trim(p, 0)
			if p.reserved+n > p.maxSize {
				return 0, cu.Errorf(cu.ErrorOutOfMemory, "pool %#x: %d bytes more would pass its maximum of %d", uint64(ph), n, p.maxSize)
			}
		}
		if a, err = d.mem.alloc(size, 0); err != nil {
			// Cached blocks of every pool are memory nobody uses: give
			// them back and try once more.
			for _, q := range d.pools {
				d.trim(q, 0)
			}
			if a, err = d.mem.alloc(size, 0); err != nil {
				return 0, err
			}
		}
		p.reserved += n
		p.reservedMax = max(p.reservedMax, p.reserved)
	}
	p.live[a.base] = size
	p.used += n
	p.usedMax = max(p.usedMax, p.used)
	d.poolOf[a.base] = p
	return backend.DevPtr(a.base), nil
}

func (d *Device) MemFreeAsync(_ context.Context, h backend.Ctx, ptr backend.DevPtr, s backend.Stream) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	p, ok := d.poolOf[uint64(ptr)]
	if !ok {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x was not allocated from a memory pool", uint64(ptr))
	}
	// Stream-ordered: behind a wait, the free waits too.
	if d.later(c, s, func() {
		if q, ok := d.poolOf[uint64(ptr)]; ok {
			d.poolFree(q, uint64(ptr))
		}
	}) {
		return nil
	}
	d.poolFree(p, uint64(ptr))
	return nil
}

// poolFree returns a pool allocation to its pool (cuMemFreeAsync, or
// cuMemFree on pool memory).
func (d *Device) poolFree(p *mempool, base uint64) {
	size := p.live[base]
	delete(p.live, base)
	delete(d.poolOf, base)
	n := blockSize(size)
	p.used -= n
	a := d.mem.find(base)
	if a == nil {
		p.reserved -= n
		return
	}
	p.cached = append(p.cached, a)
	if p.destroyed {
		d.trim(p, 0)
		if len(p.live) == 0 {
			delete(d.pools, p.handle)
		}
		return
	}
	if p.reserved > p.threshold {
		d.trim(p, p.threshold)
	}
}
