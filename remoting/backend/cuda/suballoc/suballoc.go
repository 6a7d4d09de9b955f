// Package suballoc places a session's device allocations in chunks of
// device memory that the worker maps itself (virtual memory management),
// so that the worker knows every byte its session can reach and can save,
// release and back again each chunk at the same addresses.
//
// A large allocation gets a chunk of its own, rounded up to the mapping
// granularity (2 MiB on current GPUs). Smaller ones share chunks of
// Config.SmallChunk bytes, first fit, at Config.Align (cuMemAlloc
// guarantees 256-byte alignment); freed space is coalesced, and a chunk
// left empty is given back unless it is the one spare kept for the next
// allocation, so that a loop allocating and freeing one buffer does not
// map and unmap a chunk each time. The package does no device calls: a
// Backing maps and unmaps chunks.
//
// A free is stream-ordered in effect, as cuMemFree is (the driver's free
// waits for the device's earlier work): kernels launched before the free
// may still be using the memory when the worker serves it, so freed space
// is quarantined, neither handed out again nor unmapped, until the heap
// has asked its Backing to drain the device's work queued so far. The
// drain happens when an allocation needs the space, when the quarantine
// passes Config.MaxPending bytes, or never when the caller reports the
// device idle itself (Reclaim after a context synchronisation), so that a
// program that frees and allocates in a loop pays one cheap drain per
// allocation (its work already done) instead of a synchronisation per
// free, and a free never unmaps memory under a running kernel.
package suballoc

import (
	"errors"
	"fmt"
	"slices"
)

// Backing maps a chunk of device memory of size bytes (a multiple of the
// granularity) and returns its address, or unmaps one.
// Drain waits until the device work queued before it has finished, so
// that memory freed before it can be reused or unmapped.
type Backing interface {
	Map(size uint64) (base uint64, err error)
	Unmap(base, size uint64) error
	Drain() error
}

// Config sizes a Heap.
type Config struct {
	// Granularity is the mapping granularity: every chunk is a multiple
	// of it. A power of two.
	Granularity uint64
	// SmallChunk is the size of the chunks small allocations share, a
	// multiple of Granularity. Allocations above half of it get their
	// own chunk.
	SmallChunk uint64
	// Align is the alignment of every allocation, a power of two.
	Align uint64
	// MaxPending is how many freed bytes may wait in quarantine for a
	// drain; a free that passes it drains at once. 0 means
	// DefaultMaxPending.
	MaxPending uint64
}

// DefaultMaxPending bounds the freed memory a heap keeps mapped until the
// next drain.
const DefaultMaxPending = 64 << 20

// Chunk is one mapped range.
type Chunk struct {
	Base, Size uint64
	// Shared is set for a chunk that small allocations share.
	Shared bool
}

// ErrNotAllocated is returned by Free for an address that is not the
// start of a live allocation.
var ErrNotAllocated = errors.New("not the start of an allocation")

// ErrZeroSize is returned by Alloc for 0 bytes, as cuMemAlloc refuses it.
var ErrZeroSize = errors.New("an allocation of 0 bytes")

type extent struct{ off, size uint64 }

type chunk struct {
	Chunk
	free []extent // sorted by offset, coalesced; only for shared chunks
	live int      // allocations in it
}

type alloc struct {
	chunk uint64 // base of its chunk
	size  uint64 // bytes taken from the chunk (rounded)
}

// Heap is one set of chunks and the allocations in them. It is not safe
// for concurrent use.
type Heap struct {
	cfg    Config
	back   Backing
	chunks map[uint64]*chunk
	allocs map[uint64]alloc
	spare  uint64 // base of the empty shared chunk kept; 0 for none
	// pending are the freed allocations not yet drained, in free order,
	// and pendingBytes their sizes' sum.
	pending      []pendingFree
	pendingBytes uint64
}

type pendingFree struct {
	p uint64
	a alloc
}

// New returns an empty heap.
func New(cfg Config, back Backing) (*Heap, error) {
	pow2 := func(v uint64) bool { return v != 0 && v&(v-1) == 0 }
	if !pow2(cfg.Granularity) || !pow2(cfg.Align) || cfg.Align > cfg.Granularity {
		return nil, fmt.Errorf("suballoc: granularity %d and alignment %d must be powers of two, alignment the smaller", cfg.Granularity, cfg.Align)
	}
	if cfg.SmallChunk == 0 || cfg.SmallChunk%cfg.Granularity != 0 {
		return nil, fmt.Errorf("suballoc: shared chunk of %d bytes is not a multiple of the granularity %d", cfg.SmallChunk, cfg.Granularity)
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = DefaultMaxPending
	}
	return &Heap{cfg: cfg, back: back, chunks: map[uint64]*chunk{}, allocs: map[uint64]alloc{}}, nil
}

func roundUp(v, to uint64) (uint64, bool) {
	r := (v + to - 1) / to * to
	return r, r >= v
}

// Alloc places size bytes and returns their address.
func (h *Heap) Alloc(size uint64) (uint64, error) {
	if size == 0 {
		return 0, ErrZeroSize
	}
	n, ok := roundUp(size, h.cfg.Align)
	if !ok {
		return 0, fmt.Errorf("suballoc: %d bytes overflow", size)
	}
	if n > h.cfg.SmallChunk/2 {
		cs, ok := roundUp(size, h.cfg.Granularity)
		if !ok {
			return 0, fmt.Errorf("suballoc: %d bytes overflow", size)
		}
		if len(h.pending) > 0 {
			// A freed chunk of the same size is taken over as it is,
			// saving an unmap and a map.
			// An error unmapping another freed chunk does not stop it.
			kept, err := h.drain(cs)
			if kept != 0 {
				h.chunks[kept].live = 1
				h.allocs[kept] = alloc{chunk: kept, size: cs}
				return kept, nil
			}
			if err != nil {
				return 0, err
			}
		}
		base, err := h.back.Map(cs)
		if err != nil {
			return 0, err
		}
		h.chunks[base] = &chunk{Chunk: Chunk{Base: base, Size: cs}, live: 1}
		h.allocs[base] = alloc{chunk: base, size: cs}
		return base, nil
	}
	if p, ok := h.place(n); ok {
		return p, nil
	}
	if len(h.pending) > 0 {
		_, err := h.drain(0)
		if p, ok := h.place(n); ok {
			return p, nil
		}
		if err != nil {
			return 0, err
		}
	}
	base, err := h.back.Map(h.cfg.SmallChunk)
	if err != nil {
		return 0, err
	}
	c := &chunk{Chunk: Chunk{Base: base, Size: h.cfg.SmallChunk, Shared: true}, free: []extent{{0, h.cfg.SmallChunk}}}
	h.chunks[base] = c
	p, _ := h.take(c, n)
	return p, nil
}

// place puts n bytes in the first shared chunk with room for them.
func (h *Heap) place(n uint64) (uint64, bool) {
	for _, c := range h.sorted() {
		if !c.Shared {
			continue
		}
		if p, ok := h.take(c, n); ok {
			return p, true
		}
	}
	return 0, false
}

// take carves n bytes out of c's first free extent that holds them.
func (h *Heap) take(c *chunk, n uint64) (uint64, bool) {
	for i, e := range c.free {
		if e.size < n {
			continue
		}
		if e.size == n {
			c.free = slices.Delete(c.free, i, i+1)
		} else {
			c.free[i] = extent{e.off + n, e.size - n}
		}
		c.live++
		if h.spare == c.Base {
			h.spare = 0
		}
		p := c.Base + e.off
		h.allocs[p] = alloc{chunk: c.Base, size: n}
		return p, true
	}
	return 0, false
}

// Free gives an allocation back: into quarantine until the next drain
// (see the package comment), at once when the quarantine is full. After
// the drain a dedicated chunk is unmapped, and a shared one when it is
// empty and another empty one is already kept. A failed drain leaves the
// allocation in quarantine and returns the Backing's error.
func (h *Heap) Free(p uint64) error {
	a, ok := h.allocs[p]
	if !ok {
		return ErrNotAllocated
	}
	delete(h.allocs, p)
	h.pending = append(h.pending, pendingFree{p, a})
	h.pendingBytes += a.size
	if h.pendingBytes <= h.cfg.MaxPending {
		return nil
	}
	_, err := h.drain(0)
	return err
}

// Pending is how many freed bytes wait for a drain.
func (h *Heap) Pending() uint64 { return h.pendingBytes }

// Drain asks the Backing to drain and then gives the quarantined space
// back (see Free). Callers use it before they report free memory.
func (h *Heap) Drain() error {
	if len(h.pending) == 0 {
		return nil
	}
	_, err := h.drain(0)
	return err
}

// Reclaim gives the quarantined space back without asking the Backing to
// drain: the caller has just seen the device finish all the work queued
// before now (a context synchronisation that succeeded).
func (h *Heap) Reclaim() error {
	_, err := h.reclaim(0)
	return err
}

// drain drains the device and reclaims; see reclaim for keep.
func (h *Heap) drain(keep uint64) (uint64, error) {
	if err := h.back.Drain(); err != nil {
		return 0, err
	}
	return h.reclaim(keep)
}

// reclaim makes every quarantined free take effect. With keep non-zero,
// the first dedicated chunk of exactly keep bytes stays mapped, empty,
// and its base is returned for the caller to hand out again. It returns
// the first unmap error and goes on past it.
func (h *Heap) reclaim(keep uint64) (uint64, error) {
	var (
		kept  uint64
		first error
	)
	for _, f := range h.pending {
		c := h.chunks[f.a.chunk]
		if !c.Shared && keep != 0 && kept == 0 && c.Size == keep {
			kept = c.Base
			c.live = 0
			continue
		}
		if err := h.release(f.p, f.a); err != nil && first == nil {
			first = err
		}
	}
	h.pending, h.pendingBytes = h.pending[:0], 0
	return kept, first
}

// release frees one allocation whose work has drained.
func (h *Heap) release(p uint64, a alloc) error {
	c := h.chunks[a.chunk]
	if !c.Shared {
		// On failure the chunk stays, empty, for Close to unmap.
		c.live = 0
		if err := h.back.Unmap(c.Base, c.Size); err != nil {
			return err
		}
		delete(h.chunks, c.Base)
		return nil
	}
	c.live--
	c.insert(extent{p - c.Base, a.size})
	if c.live > 0 {
		return nil
	}
	if h.spare == 0 {
		h.spare = c.Base
		return nil
	}
	if err := h.back.Unmap(c.Base, c.Size); err != nil {
		return err
	}
	delete(h.chunks, c.Base)
	return nil
}

// insert puts e back into the free list, merging it with its neighbours.
func (c *chunk) insert(e extent) {
	i, _ := slices.BinarySearchFunc(c.free, e.off, func(x extent, off uint64) int {
		switch {
		case x.off < off:
			return -1
		case x.off > off:
			return 1
		}
		return 0
	})
	c.free = slices.Insert(c.free, i, e)
	if i+1 < len(c.free) && c.free[i].off+c.free[i].size == c.free[i+1].off {
		c.free[i].size += c.free[i+1].size
		c.free = slices.Delete(c.free, i+1, i+2)
	}
	if i > 0 && c.free[i-1].off+c.free[i-1].size == c.free[i].off {
		c.free[i-1].size += c.free[i].size
		c.free = slices.Delete(c.free, i, i+1)
	}
}

// Size returns the bytes an allocation took (its size rounded up), and
// whether p is the start of one.
func (h *Heap) Size(p uint64) (uint64, bool) {
	a, ok := h.allocs[p]
	return a.size, ok
}

// Chunks lists the mapped chunks by address.
func (h *Heap) Chunks() []Chunk {
	out := make([]Chunk, 0, len(h.chunks))
	for _, c := range h.sorted() {
		out = append(out, c.Chunk)
	}
	return out
}

func (h *Heap) sorted() []*chunk {
	out := make([]*chunk, 0, len(h.chunks))
	for _, c := range h.chunks {
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *chunk) int {
		switch {
		case a.Base < b.Base:
			return -1
		case a.Base > b.Base:
			return 1
		}
		return 0
	})
	return out
}

// Len is the number of live allocations (quarantined ones not counted).
func (h *Heap) Len() int { return len(h.allocs) }

// Close drains the device, unmaps every chunk, live allocations or not,
// and empties the heap; it returns the first error and goes on past it
// (a failed drain still unmaps: the context is going away).
func (h *Heap) Close() error {
	var first error
	if len(h.chunks) > 0 {
		first = h.back.Drain()
	}
	for _, c := range h.sorted() {
		if err := h.back.Unmap(c.Base, c.Size); err != nil && first == nil {
			first = err
		}
	}
	clear(h.chunks)
	clear(h.allocs)
	h.spare = 0
	h.pending, h.pendingBytes = nil, 0
	return first
}
