package cuda

// #include <stdlib.h>
// #include "vmm.h"
import "C"

import (
	"context"
	"encoding/binary"
	"runtime"
	"slices"
	"unsafe"

	"github.com/gpuctl/gpuctl/devmem/hashkernel"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// The worker saves its chunks (vmm.go) itself: package devmem lists them
// as regions, hashes them on the GPU with hashkernel's kernel, copies the
// blocks that changed through a ring of pinned buffers, each with its own
// stream so that the copy engines overlap, and releases the physical
// memory before the driver's checkpoint, which then has only the rest
// (pools, module variables, the client's own mappings, small buffers of
// this package) to copy.

var (
	_ backend.DeviceMemory = (*Device)(nil)
	_ backend.HostPinner   = (*Device)(nil)
)

// ringSlotBytes is the size of one pinned buffer of the save ring. Blocks
// are 1 MiB; a slot holds two, or 256K block hashes.
const ringSlotBytes = 2 << 20

// memTools are one context's means of saving: the ring, the hash kernel
// and its output buffer. They are made on first use and freed when the
// memory is released, so that the process dumped carries none of them.
type memTools struct {
	ring    chan *ringSlot
	slots   []*ringSlot
	mod     C.CUmodule
	fn      C.CUfunction
	scratch C.CUdeviceptr // hash output, ringSlotBytes
	hashing chan struct{} // one hash launch at a time uses scratch
}

type ringSlot struct {
	buf    unsafe.Pointer
	stream C.CUstream
	done   C.CUevent
}

func (s *ringSlot) bytes(n int) []byte { return unsafe.Slice((*byte)(s.buf), n) }

// ringSlots is how many slots a ring has: two per core that copies (see
// ringCopy), at least 8 so that the copy engines have work queued.
func ringSlots() int { return min(max(2*runtime.GOMAXPROCS(0), 8), 32) }

// tools returns c's tools, making the ring on first use.
func (d *Device) tools(c *cuCtx) (*memTools, error) {
	d.vmm.mu.Lock()
	defer d.vmm.mu.Unlock()
	if c.tools == nil {
		c.tools = &memTools{hashing: make(chan struct{}, 1)}
	}
	t := c.tools
	if t.ring != nil {
		return t, nil
	}
	n := ringSlots()
	ring := make(chan *ringSlot, n)
	for range n {
		s := &ringSlot{}
		t.slots = append(t.slots, s)
		if err := d.drv.check(C.gc_host_alloc(d.drv.api, c.raw, ringSlotBytes, &s.buf), "cuMemHostAlloc"); err != nil {
			d.freeRing(c, t)
			return nil, err
		}
		if err := d.drv.check(C.gc_stream_create(d.drv.api, c.raw, 1 /* CU_STREAM_NON_BLOCKING */, 0, &s.stream), "cuStreamCreate"); err != nil {
			d.freeRing(c, t)
			return nil, err
		}
		if err := d.drv.check(C.gc_event_create(d.drv.api, c.raw, eventDisableTiming, &s.done), "cuEventCreate"); err != nil {
			d.freeRing(c, t)
			return nil, err
		}
		ring <- s
	}
	t.ring = ring
	return t, nil
}

// freeRing frees t's pinned buffers, streams and events.
func (d *Device) freeRing(c *cuCtx, t *memTools) {
	for _, s := range t.slots {
		if s.done != nil {
			C.gc_event_synchronize(d.drv.api, c.raw, s.done)
			C.gc_event_destroy(d.drv.api, c.raw, s.done)
		}
		if s.stream != nil {
			C.gc_stream_destroy(d.drv.api, c.raw, s.stream)
		}
		if s.buf != nil {
			C.gc_host_free(d.drv.api, c.raw, s.buf)
		}
	}
	t.slots, t.ring = nil, nil
}

// freeTools frees the ring and the hash output buffer, and with all the
// kernel's module.
func (d *Device) freeTools(c *cuCtx, all bool) {
	d.vmm.mu.Lock()
	defer d.vmm.mu.Unlock()
	t := c.tools
	if t == nil {
		return
	}
	d.freeRing(c, t)
	if t.scratch != 0 {
		C.gc_mem_free(d.drv.api, c.raw, t.scratch)
		t.scratch = 0
	}
	if all {
		if t.mod != nil {
			C.gc_module_unload(d.drv.api, c.raw, t.mod)
		}
		c.tools = nil
	}
}

// hashKernel loads the hash kernel into c on first use and makes its
// output buffer.
func (d *Device) hashKernel(c *cuCtx, t *memTools) error {
	d.vmm.mu.Lock()
	defer d.vmm.mu.Unlock()
	if t.fn == nil {
		var log [4096]C.char
		var m C.CUmodule
		img := C.CBytes(hashkernel.PTX)
		defer C.free(img)
		if err := d.drv.check(C.gc_module_load(d.drv.api, c.raw, img, &m, &log[0], C.size_t(len(log))), "cuModuleLoadData (hash kernel)"); err != nil {
			return cu.Errorf(cu.ErrorInvalidPTX, "%v: %s", err, C.GoString(&log[0]))
		}
		name := C.CString(hashkernel.Entry)
		defer C.free(unsafe.Pointer(name))
		var f C.CUfunction
		if err := d.drv.check(C.gc_module_function(d.drv.api, c.raw, m, name, &f), "cuModuleGetFunction (hash kernel)"); err != nil {
			C.gc_module_unload(d.drv.api, c.raw, m)
			return err
		}
		t.mod, t.fn = m, f
	}
	if t.scratch == 0 {
		if err := d.drv.check(C.gc_mem_alloc(d.drv.api, c.raw, ringSlotBytes, &t.scratch), "cuMemAlloc (hash output)"); err != nil {
			return err
		}
	}
	return nil
}

// chunk looks up a region the worker listed.
func (d *Device) chunk(r backend.MemRegion) (*vmmChunk, error) {
	if d.vmm != nil && r.Kind == backend.MemAlloc {
		if ch, ok := d.vmm.chunks[r.ID]; ok && ch.size == r.Size {
			if !ch.backed {
				return nil, cu.Errorf(cu.ErrorIllegalState, "device memory region %#x is released", r.ID)
			}
			return ch, nil
		}
	}
	return nil, cu.Errorf(cu.ErrorInvalidValue, "no device memory region %d/%#x of %d bytes", r.Kind, r.ID, r.Size)
}

func (d *Device) chunkSpan(r backend.MemRegion, off uint64, n int) (*vmmChunk, error) {
	ch, err := d.chunk(r)
	if err != nil {
		return nil, err
	}
	if off > r.Size || uint64(n) > r.Size-off {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "%d bytes at offset %d run past region %#x of %d bytes", n, off, r.ID, r.Size)
	}
	return ch, nil
}

// MemRegions drains every context (a save reads memory the client's
// queued work may still write) and lists the chunks by address.
func (d *Device) MemRegions(context.Context) ([]backend.MemRegion, error) {
	if d.vmm == nil || len(d.vmm.chunks) == 0 {
		return nil, nil
	}
	for h, c := range d.ctxs {
		if err := d.drv.check(C.gc_ctx_synchronize(d.drv.api, c.raw), "cuCtxSynchronize"); err != nil {
			d.log.Warn("context reports an earlier failure while draining to save device memory", "ctx", uint64(h), "err", err)
			continue
		}
		// Drained: memory freed before is given back, not saved.
		if c.heap != nil {
			if err := c.heap.Reclaim(); err != nil {
				d.log.Warn("unmapping freed device memory before a save", "ctx", uint64(h), "err", err)
			}
		}
	}
	out := make([]backend.MemRegion, 0, len(d.vmm.chunks))
	for base, ch := range d.vmm.chunks {
		out = append(out, backend.MemRegion{Kind: backend.MemAlloc, ID: base, Size: ch.size})
	}
	slices.SortFunc(out, func(a, b backend.MemRegion) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	return out, nil
}

// PinHost registers b with the driver (cuMemHostRegister, portable to
// every context): copies into and out of it are then direct DMA at the
// bus's speed, where a copy through pageable memory is staged by the
// driver and one through the ring is copied again by the CPU.
func (d *Device) PinHost(_ context.Context, b []byte) (func(), error) {
	if len(b) == 0 {
		return func() {}, nil
	}
	var c *cuCtx
	if d.vmm != nil {
		for _, ch := range d.vmm.chunks {
			c = ch.ctx
			break
		}
	}
	if c == nil {
		return nil, cu.Errorf(cu.ErrorIllegalState, "no device memory to copy: nothing to pin host memory for")
	}
	p := unsafe.Pointer(&b[0])
	if err := d.drv.check(C.gc_host_register(d.drv.api, c.raw, p, C.size_t(len(b))), "cuMemHostRegister"); err != nil {
		return nil, err
	}
	lo := uintptr(p)
	d.vmm.mu.Lock()
	if d.vmm.pinned == nil {
		d.vmm.pinned = map[uintptr]uintptr{}
	}
	d.vmm.pinned[lo] = lo + uintptr(len(b))
	d.vmm.mu.Unlock()
	return func() {
		d.vmm.mu.Lock()
		delete(d.vmm.pinned, lo)
		d.vmm.mu.Unlock()
		if err := d.drv.check(C.gc_host_unregister(d.drv.api, c.raw, p), "cuMemHostUnregister"); err != nil {
			d.log.Warn("unpinning host memory", "bytes", len(b), "err", err)
		}
	}, nil
}

// isPinned reports whether b lies within one range PinHost pinned.
func (d *Device) isPinned(b []byte) bool {
	if len(b) == 0 || d.vmm == nil {
		return false
	}
	lo := uintptr(unsafe.Pointer(&b[0]))
	hi := lo + uintptr(len(b))
	d.vmm.mu.Lock()
	defer d.vmm.mu.Unlock()
	for s, e := range d.vmm.pinned {
		if s <= lo && hi <= e {
			return true
		}
	}
	return false
}

// ReadMem copies straight into dst when it is pinned, and otherwise
// through slots of the ring (see ringCopy); concurrent calls use the other
// slots and streams.
func (d *Device) ReadMem(ctx context.Context, r backend.MemRegion, off uint64, dst []byte) error {
	return d.copyMem(ctx, r, off, dst, false)
}

// WriteMem copies straight from src when it is pinned, and otherwise
// through slots of the ring, like ReadMem.
func (d *Device) WriteMem(ctx context.Context, r backend.MemRegion, off uint64, src []byte) error {
	return d.copyMem(ctx, r, off, src, true)
}

// copyMem moves host to (toDev) or from region r at off for ReadMem and
// WriteMem.
func (d *Device) copyMem(ctx context.Context, r backend.MemRegion, off uint64, host []byte, toDev bool) error {
	ch, err := d.chunkSpan(r, off, len(host))
	if err != nil {
		return err
	}
	return d.copyAt(ctx, ch.ctx, r.ID+off, host, toDev)
}

// copyAt moves host to (toDev) or from device address at in context c:
// straight when host is pinned, else through c's ring.
func (d *Device) copyAt(ctx context.Context, c *cuCtx, at uint64, host []byte, toDev bool) error {
	t, err := d.tools(c)
	if err != nil {
		return err
	}
	dev := C.CUdeviceptr(at)
	if !d.isPinned(host) {
		return d.ringCopy(ctx, c, t, at, host, toDev)
	}
	s := <-t.ring
	defer func() { t.ring <- s }()
	var rc C.CUresult
	what := "cuMemcpyDtoHAsync (save, direct)"
	if toDev {
		rc, what = C.gc_htod(d.drv.api, c.raw, dev, unsafe.Pointer(&host[0]), C.size_t(len(host)), s.stream, s.done), "cuMemcpyHtoDAsync (reload, direct)"
	} else {
		rc = C.gc_dtoh(d.drv.api, c.raw, unsafe.Pointer(&host[0]), dev, C.size_t(len(host)), s.stream, s.done)
	}
	if err := d.drv.check(rc, what); err != nil {
		return err
	}
	return d.drv.check(C.gc_event_synchronize(d.drv.api, c.raw, s.done), "cuEventSynchronize (direct copy)")
}

// ringCopy moves host to (toDev) or from device address dev through the
// ring, a slot's worth at a time, with two slots when the ring has one to
// spare: one slot's copy runs on the bus while the CPU copies the other's
// bytes, so that neither the copy engine nor the core waits on the other
// (one slot at a time left a host-to-device copy at ~22 GB/s on the H200
// host, where direct copies run at ~55).
func (d *Device) ringCopy(ctx context.Context, c *cuCtx, t *memTools, dev uint64, host []byte, toDev bool) error {
	slots := []*ringSlot{<-t.ring}
	select {
	case s := <-t.ring:
		slots = append(slots, s)
	default:
	}
	// What each slot has in flight: its length and where it goes in host
	// (a read); n == 0 when idle.
	type flight struct {
		n   int
		at  int
		set bool
	}
	fl := make([]flight, len(slots))
	wait := func(i int) error {
		if !fl[i].set {
			return nil
		}
		fl[i].set = false
		return d.drv.check(C.gc_event_synchronize(d.drv.api, c.raw, slots[i].done), "cuEventSynchronize (ring copy)")
	}
	defer func() {
		// Nothing may still be copying into or out of a slot that goes
		// back to the ring.
		for i, s := range slots {
			_ = wait(i)
			t.ring <- s
		}
	}()
	// drain finishes slot i's read into host.
	drain := func(i int) error {
		f := fl[i]
		if err := wait(i); err != nil {
			return err
		}
		if !toDev && f.n > 0 {
			copy(host[f.at:f.at+f.n], slots[i].bytes(f.n))
		}
		return nil
	}
	for k, at := 0, 0; at < len(host); k++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		i := k % len(slots)
		if err := drain(i); err != nil {
			return err
		}
		s := slots[i]
		n := min(len(host)-at, ringSlotBytes)
		var r C.CUresult
		if toDev {
			copy(s.bytes(n), host[at:at+n])
			r = C.gc_htod(d.drv.api, c.raw, C.CUdeviceptr(dev+uint64(at)), s.buf, C.size_t(n), s.stream, s.done)
		} else {
			r = C.gc_dtoh(d.drv.api, c.raw, s.buf, C.CUdeviceptr(dev+uint64(at)), C.size_t(n), s.stream, s.done)
		}
		if err := d.drv.check(r, "cuMemcpyAsync (ring copy)"); err != nil {
			return err
		}
		fl[i] = flight{n: n, at: at, set: true}
		at += n
	}
	for i := range slots {
		if err := drain(i); err != nil {
			return err
		}
		fl[i].n = 0
	}
	return nil
}

// HashBlocks runs the hash kernel over the region, at most a slot's worth
// of hashes per launch, and copies the hashes back through the ring.
func (d *Device) HashBlocks(ctx context.Context, r backend.MemRegion, block, seed uint64, out []uint64) error {
	ch, err := d.chunk(r)
	if err != nil {
		return err
	}
	return d.hashAt(ctx, ch.ctx, r.ID, r.Size, block, seed, out)
}

// hashAt hashes size bytes at device address base in context c.
func (d *Device) hashAt(ctx context.Context, c *cuCtx, base, size, block, seed uint64, out []uint64) error {
	all := hashkernel.Launch{Base: base, Size: size, Block: block, Seed: seed}
	if err := all.Check(); err != nil {
		return cu.Errorf(cu.ErrorInvalidValue, "%v", err)
	}
	if uint64(len(out)) != all.Blocks() {
		return cu.Errorf(cu.ErrorInvalidValue, "%d hashes for %d bytes in blocks of %d", len(out), size, block)
	}
	t, err := d.tools(c)
	if err != nil {
		return err
	}
	if err := d.hashKernel(c, t); err != nil {
		return err
	}
	t.hashing <- struct{}{}
	defer func() { <-t.hashing }()
	s := <-t.ring
	defer func() { t.ring <- s }()
	per := uint64(ringSlotBytes / 8)
	block3 := [3]C.uint{hashkernel.Threads, 1, 1}
	for i := uint64(0); i < all.Blocks(); i += per {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := min(per, all.Blocks()-i)
		seg := hashkernel.Launch{Base: base + i*block, Size: min(k*block, size-i*block), Block: block, Seed: seed, Out: uint64(t.scratch)}
		params := seg.Params()
		grid := [3]C.uint{C.uint(seg.Grid()), 1, 1}
		if err := d.drv.check(C.gc_launch(d.drv.api, c.raw, t.fn, &grid[0], &block3[0], 0, s.stream, unsafe.Pointer(&params[0]), C.size_t(len(params))), "cuLaunchKernel (hash kernel)"); err != nil {
			return err
		}
		if err := d.drv.check(C.gc_dtoh(d.drv.api, c.raw, s.buf, t.scratch, C.size_t(8*k), s.stream, s.done), "cuMemcpyDtoHAsync (hashes)"); err != nil {
			return err
		}
		if err := d.drv.check(C.gc_event_synchronize(d.drv.api, c.raw, s.done), "hash kernel"); err != nil {
			return err
		}
		b := s.bytes(int(8 * k))
		for j := range k {
			out[i+j] = binary.LittleEndian.Uint64(b[8*j:])
		}
	}
	return nil
}

// ReleaseMem frees the save tools' buffers and unmaps and releases every
// chunk's physical memory, keeping its addresses reserved. A failure
// leaves the chunks it did not reach backed; RestoreMem backs the rest.
func (d *Device) ReleaseMem(context.Context) error {
	if d.vmm == nil {
		return nil
	}
	for _, c := range d.ctxs {
		d.freeTools(c, false)
	}
	for _, base := range d.chunkBases() {
		ch := d.vmm.chunks[base]
		if !ch.backed {
			continue
		}
		r := C.gc_vmm_unback(d.drv.api, d.ext.x, ch.ctx.raw, C.CUdeviceptr(base), C.size_t(ch.size), ch.handle)
		if err := d.drv.check(r, "cuMemUnmap/cuMemRelease (release device memory)"); err != nil {
			return err
		}
		ch.backed = false
		ch.dropFD()
	}
	return nil
}

// RestoreMem backs every released chunk with new physical memory at its
// old addresses and zeroes it: a reload skips blocks that were all zero.
func (d *Device) RestoreMem(context.Context) error {
	if d.vmm == nil {
		return nil
	}
	// A process restored from a dump made while its memory was parked:
	// the memory stayed with the host it was dumped on.
	d.forgetParked()
	touched := map[*cuCtx]bool{}
	for _, base := range d.chunkBases() {
		ch := d.vmm.chunks[base]
		if ch.backed {
			continue
		}
		var h C.CUmemGenericAllocationHandle
		r := C.gc_vmm_back(d.drv.api, d.ext.x, ch.ctx.raw, C.CUdeviceptr(base), C.size_t(ch.size), C.int(d.dev), d.exportable(), &h)
		if err := d.drv.check(r, "cuMemCreate/cuMemMap (back device memory again)"); err != nil {
			return err
		}
		ch.handle, ch.backed = h, true
		if err := d.drv.check(C.gc_memset(d.drv.api, ch.ctx.raw, C.CUdeviceptr(base), 0, 1, C.size_t(ch.size), nil), "cuMemsetD8Async (zero device memory)"); err != nil {
			return err
		}
		touched[ch.ctx] = true
	}
	for c := range touched {
		if err := d.drv.check(C.gc_ctx_synchronize(d.drv.api, c.raw), "cuCtxSynchronize (zero device memory)"); err != nil {
			return err
		}
	}
	return nil
}

func (d *Device) chunkBases() []uint64 {
	out := make([]uint64, 0, len(d.vmm.chunks))
	for b := range d.vmm.chunks {
		out = append(out, b)
	}
	slices.Sort(out)
	return out
}
