package cuda

// #include <stdlib.h>
// #include "ext.h"
import "C"

import (
	"context"
	"fmt"
	"io"
	"unsafe"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// extState is what the calls of backend.Extended keep: handle tables for
// pools and physical allocations, and the device ranges that belong to no
// context (stream-ordered allocations and mappings), which every context
// may name.
type extState struct {
	x       *C.gc_ext
	pools   map[backend.MemPool]C.CUmemoryPool
	poolIDs map[C.CUmemoryPool]backend.MemPool
	poolMem map[uint64]uint64 // base -> size of stream-ordered allocations
	handles map[backend.MemHandle]*vmmHandle
	resvs   map[uint64]uint64 // base -> size of address reservations
	maps    map[uint64]uint64 // base -> size of mappings
	devMem  spans
}

type vmmHandle struct {
	raw  C.CUmemGenericAllocationHandle
	refs int // creation and retains not yet released
}

// ext returns the extended state, resolving the entry points on first use.
func (d *Device) extended() (*extState, error) {
	if d.ext != nil {
		return d.ext, nil
	}
	x := C.gc_ext_load(d.drv.api)
	if x == nil {
		return nil, cu.Errorf(cu.ErrorOutOfMemory, "resolving the driver's memory pool and VMM calls")
	}
	d.ext = &extState{x: x, pools: map[backend.MemPool]C.CUmemoryPool{}, poolIDs: map[C.CUmemoryPool]backend.MemPool{},
		poolMem: map[uint64]uint64{}, handles: map[backend.MemHandle]*vmmHandle{}, resvs: map[uint64]uint64{}, maps: map[uint64]uint64{}}
	return d.ext, nil
}

// sharedSpan reports whether [p, p+n) lies in a range that belongs to no
// context.
func (d *Device) sharedSpan(p, n uint64) bool { return d.ext != nil && d.ext.devMem.covers(p, n) }

// location turns the client's device location into the driver's: the
// session's GPU is device 0 to the client.
func (d *Device) location(locType uint32, locID int32) (C.int, C.int, error) {
	const locTypeDevice = 1
	if locType != locTypeDevice {
		return 0, 0, cu.Errorf(cu.ErrorNotSupported, "memory location type %d: sessions allocate device memory only (type 1)", locType)
	}
	if err := d.checkDev(locID); err != nil {
		return 0, 0, err
	}
	return C.int(locType), C.int(d.dev), nil
}

// poolID returns the client's handle for a driver pool.
func (x *extState) poolID(d *Device, raw C.CUmemoryPool) backend.MemPool {
	if h, ok := x.poolIDs[raw]; ok {
		return h
	}
	h := backend.MemPool(d.newID())
	x.pools[h], x.poolIDs[raw] = raw, h
	return h
}

func (d *Device) pool(h backend.MemPool) (*extState, C.CUmemoryPool, error) {
	x, err := d.extended()
	if err != nil {
		return nil, nil, err
	}
	raw, ok := x.pools[h]
	if !ok {
		return nil, nil, cu.Errorf(cu.ErrorInvalidValue, "memory pool %#x does not exist", uint64(h))
	}
	return x, raw, nil
}

func (d *Device) getPool(dev int32, dflt bool) (backend.MemPool, error) {
	if err := d.checkDev(dev); err != nil {
		return 0, err
	}
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	var raw C.CUmemoryPool
	df := C.int(0)
	if dflt {
		df = 1
	}
	if err := d.drv.check(C.gc_pool_get(x.x, d.dev, df, &raw), "cuDeviceGetMemPool"); err != nil {
		return 0, err
	}
	return x.poolID(d, raw), nil
}

func (d *Device) DeviceGetMemPool(_ context.Context, dev int32) (backend.MemPool, error) {
	return d.getPool(dev, false)
}

func (d *Device) DeviceGetDefaultMemPool(_ context.Context, dev int32) (backend.MemPool, error) {
	return d.getPool(dev, true)
}

func (d *Device) DeviceSetMemPool(_ context.Context, dev int32, h backend.MemPool) error {
	if err := d.checkDev(dev); err != nil {
		return err
	}
	x, raw, err := d.pool(h)
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_pool_set(x.x, d.dev, raw), "cuDeviceSetMemPool")
}

func (d *Device) MemPoolCreate(_ context.Context, allocType, handleTypes, locType uint32, locID int32, maxSize uint64) (backend.MemPool, error) {
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	lt, li, err := d.location(locType, locID)
	if err != nil {
		return 0, err
	}
	var raw C.CUmemoryPool
	if err := d.drv.check(C.gc_pool_create(x.x, C.int(allocType), C.int(handleTypes), lt, li, C.size_t(maxSize), &raw), "cuMemPoolCreate"); err != nil {
		return 0, err
	}
	return x.poolID(d, raw), nil
}

func (d *Device) MemPoolDestroy(_ context.Context, h backend.MemPool) error {
	x, raw, err := d.pool(h)
	if err != nil {
		return err
	}
	if err := d.drv.check(C.gc_pool_destroy(x.x, raw), "cuMemPoolDestroy"); err != nil {
		return err
	}
	delete(x.pools, h)
	delete(x.poolIDs, raw)
	return nil
}

func (d *Device) MemPoolSetAttribute(_ context.Context, h backend.MemPool, attr int32, value uint64) error {
	x, raw, err := d.pool(h)
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_pool_set_attr(x.x, raw, C.int(attr), C.ulonglong(value)), "cuMemPoolSetAttribute")
}

func (d *Device) MemPoolGetAttribute(_ context.Context, h backend.MemPool, attr int32) (uint64, error) {
	x, raw, err := d.pool(h)
	if err != nil {
		return 0, err
	}
	var v C.ulonglong
	if err := d.drv.check(C.gc_pool_get_attr(x.x, raw, C.int(attr), &v), "cuMemPoolGetAttribute"); err != nil {
		return 0, err
	}
	return uint64(v), nil
}

func (d *Device) MemPoolTrimTo(_ context.Context, h backend.MemPool, keep uint64) error {
	x, raw, err := d.pool(h)
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_pool_trim(x.x, raw, C.size_t(keep)), "cuMemPoolTrimTo")
}

func (d *Device) MemAllocAsync(_ context.Context, h backend.Ctx, size uint64, ph backend.MemPool, s backend.Stream) (backend.DevPtr, error) {
	c, rs, err := d.ctxStream(h, s)
	if err != nil {
		return 0, err
	}
	if ph == 0 {
		if ph, err = d.getPool(0, false); err != nil {
			return 0, err
		}
	}
	x, raw, err := d.pool(ph)
	if err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	if err := d.drv.check(C.gc_alloc_async(d.drv.api, x.x, c.raw, C.size_t(size), raw, rs, &p), "cuMemAllocFromPoolAsync"); err != nil {
		return 0, err
	}
	x.poolMem[uint64(p)] = size
	x.devMem.add(span{base: uint64(p), size: size})
	return backend.DevPtr(p), nil
}

func (d *Device) MemFreeAsync(_ context.Context, h backend.Ctx, p backend.DevPtr, s backend.Stream) error {
	c, rs, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	if _, ok := x.poolMem[uint64(p)]; !ok {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x was not allocated from a memory pool", uint64(p))
	}
	if err := d.drv.check(C.gc_free_async(d.drv.api, x.x, c.raw, C.CUdeviceptr(p), rs), "cuMemFreeAsync"); err != nil {
		return err
	}
	delete(x.poolMem, uint64(p))
	x.devMem.remove(uint64(p))
	return nil
}

// freePoolMem frees a stream-ordered allocation with cuMemFree, which the
// driver allows; it reports whether p was one.
func (d *Device) freePoolMem(c *cuCtx, p uint64) (bool, error) {
	if d.ext == nil {
		return false, nil
	}
	if _, ok := d.ext.poolMem[p]; !ok {
		return false, nil
	}
	if err := d.drv.check(C.gc_mem_free(d.drv.api, c.raw, C.CUdeviceptr(p)), "cuMemFree"); err != nil {
		return true, err
	}
	delete(d.ext.poolMem, p)
	d.ext.devMem.remove(p)
	return true, nil
}

func (d *Device) MemAddressReserve(_ context.Context, size, align uint64, addr backend.DevPtr, flags uint64) (backend.DevPtr, error) {
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	var p C.CUdeviceptr
	if err := d.drv.check(C.gc_va_reserve(x.x, C.size_t(size), C.size_t(align), C.CUdeviceptr(addr), C.ulonglong(flags), &p), "cuMemAddressReserve"); err != nil {
		return 0, err
	}
	x.resvs[uint64(p)] = size
	return backend.DevPtr(p), nil
}

func (d *Device) MemAddressFree(_ context.Context, p backend.DevPtr, size uint64) error {
	x, err := d.extended()
	if err != nil {
		return err
	}
	if n, ok := x.resvs[uint64(p)]; !ok || n != size {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not a reservation", uint64(p), size)
	}
	if err := d.drv.check(C.gc_va_free(x.x, C.CUdeviceptr(p), C.size_t(size)), "cuMemAddressFree"); err != nil {
		return err
	}
	delete(x.resvs, uint64(p))
	return nil
}

func (d *Device) MemCreate(_ context.Context, size uint64, allocType, handleTypes, locType uint32, locID int32, compression uint32, flags uint64) (backend.MemHandle, error) {
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	lt, li, err := d.location(locType, locID)
	if err != nil {
		return 0, err
	}
	var raw C.CUmemGenericAllocationHandle
	if err := d.drv.check(C.gc_mem_create(x.x, C.size_t(size), C.int(allocType), C.int(handleTypes), lt, li, C.int(compression), C.ulonglong(flags), &raw), "cuMemCreate"); err != nil {
		return 0, err
	}
	h := backend.MemHandle(d.newID())
	x.handles[h] = &vmmHandle{raw: raw, refs: 1}
	return h, nil
}

func (d *Device) handle(h backend.MemHandle) (*extState, *vmmHandle, error) {
	x, err := d.extended()
	if err != nil {
		return nil, nil, err
	}
	vh, ok := x.handles[h]
	if !ok {
		return nil, nil, cu.Errorf(cu.ErrorInvalidValue, "memory handle %#x does not exist", uint64(h))
	}
	return x, vh, nil
}

// MemRelease drops one reference; the driver frees the memory once it is
// also unmapped everywhere.
func (d *Device) MemRelease(_ context.Context, h backend.MemHandle) error {
	x, vh, err := d.handle(h)
	if err != nil {
		return err
	}
	// References taken by MemHandleRetain (an import of this session's own
	// exported handle) are ours, not the driver's: the driver's handle is
	// released with the last of them. Releasing it at the first made the
	// importer's handle dangle, and the driver faulted on the next cuMemMap.
	if vh.refs > 1 {
		vh.refs--
		return nil
	}
	if err := d.drv.check(C.gc_mem_release(x.x, vh.raw), "cuMemRelease"); err != nil {
		return err
	}
	delete(x.handles, h)
	return nil
}

// inReservation checks that [p, p+n) lies in one reservation of this
// session, so that a client cannot map over memory it does not own.
func (x *extState) inReservation(p, n uint64) bool {
	for b, sz := range x.resvs {
		if p >= b && n <= sz && p-b <= sz-n {
			return true
		}
	}
	return false
}

func (d *Device) MemMap(_ context.Context, p backend.DevPtr, size, offset uint64, h backend.MemHandle, flags uint64) error {
	x, vh, err := d.handle(h)
	if err != nil {
		return err
	}
	if !x.inReservation(uint64(p), size) {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not inside a reservation", uint64(p), size)
	}
	if err := d.drv.check(C.gc_mem_map(x.x, C.CUdeviceptr(p), C.size_t(size), C.size_t(offset), vh.raw, C.ulonglong(flags)), "cuMemMap"); err != nil {
		return err
	}
	x.maps[uint64(p)] = size
	x.devMem.add(span{base: uint64(p), size: size})
	return nil
}

func (d *Device) MemUnmap(_ context.Context, p backend.DevPtr, size uint64) error {
	x, err := d.extended()
	if err != nil {
		return err
	}
	if !x.inReservation(uint64(p), size) {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not inside a reservation", uint64(p), size)
	}
	if err := d.drv.check(C.gc_mem_unmap(x.x, C.CUdeviceptr(p), C.size_t(size)), "cuMemUnmap"); err != nil {
		return err
	}
	for b, n := range x.maps {
		if b >= uint64(p) && b+n <= uint64(p)+size {
			delete(x.maps, b)
			x.devMem.remove(b)
		}
	}
	return nil
}

func (d *Device) MemSetAccess(_ context.Context, p backend.DevPtr, size uint64, descs []backend.AccessDesc) error {
	x, err := d.extended()
	if err != nil {
		return err
	}
	if len(descs) == 0 || len(descs) > 64 {
		return cu.Errorf(cu.ErrorInvalidValue, "%d access descriptors (1 to 64)", len(descs))
	}
	if !x.devMem.contains(uint64(p), size) && !x.inReservation(uint64(p), size) {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x+%d is not inside a reservation", uint64(p), size)
	}
	raw := make([]C.int, 0, 3*len(descs))
	for _, ds := range descs {
		lt, li, err := d.location(ds.LocType, ds.LocID)
		if err != nil {
			return err
		}
		raw = append(raw, lt, li, C.int(ds.Flags))
	}
	return d.drv.check(C.gc_mem_set_access(x.x, C.CUdeviceptr(p), C.size_t(size), &raw[0], C.size_t(len(descs))), "cuMemSetAccess")
}

func (d *Device) MemGetAccess(_ context.Context, locType uint32, locID int32, p backend.DevPtr) (uint64, error) {
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	lt, li, err := d.location(locType, locID)
	if err != nil {
		return 0, err
	}
	if !x.devMem.contains(uint64(p), 1) {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "%#x is not mapped", uint64(p))
	}
	var fl C.ulonglong
	if err := d.drv.check(C.gc_mem_get_access(x.x, lt, li, C.CUdeviceptr(p), &fl), "cuMemGetAccess"); err != nil {
		return 0, err
	}
	return uint64(fl), nil
}

func (d *Device) MemGetAllocationGranularity(_ context.Context, allocType, handleTypes, locType uint32, locID int32, option uint32) (uint64, error) {
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	lt, li, err := d.location(locType, locID)
	if err != nil {
		return 0, err
	}
	var g C.size_t
	if err := d.drv.check(C.gc_mem_granularity(x.x, C.int(allocType), C.int(handleTypes), lt, li, C.int(option), &g), "cuMemGetAllocationGranularity"); err != nil {
		return 0, err
	}
	return uint64(g), nil
}

func (d *Device) MemRetainAllocationHandle(_ context.Context, p backend.DevPtr) (backend.MemHandle, error) {
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	if !x.devMem.contains(uint64(p), 1) {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "%#x is not mapped", uint64(p))
	}
	var raw C.CUmemGenericAllocationHandle
	if err := d.drv.check(C.gc_mem_retain(x.x, C.CUdeviceptr(p), &raw), "cuMemRetainAllocationHandle"); err != nil {
		return 0, err
	}
	for h, vh := range x.handles {
		if vh.raw == raw {
			vh.refs++
			return h, nil
		}
	}
	h := backend.MemHandle(d.newID())
	x.handles[h] = &vmmHandle{raw: raw, refs: 1}
	return h, nil
}

// memOpSpan checks the target of a stream memory operation.
func (d *Device) memOpSpan(c *cuCtx, addr backend.DevPtr, width uint32) error {
	if width != 32 && width != 64 {
		return cu.Errorf(cu.ErrorInvalidValue, "stream memory operation of %d bits (32 or 64)", width)
	}
	return d.span(c, addr, uint64(width/8))
}

func (d *Device) StreamWaitValue(_ context.Context, h backend.Ctx, s backend.Stream, addr backend.DevPtr, value uint64, flags, width uint32) error {
	c, rs, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	if err := d.memOpSpan(c, addr, width); err != nil {
		return err
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_wait_value(d.drv.api, x.x, c.raw, rs, C.CUdeviceptr(addr), C.ulonglong(value), C.uint(flags), C.int(width)), "cuStreamWaitValue")
}

func (d *Device) StreamWriteValue(_ context.Context, h backend.Ctx, s backend.Stream, addr backend.DevPtr, value uint64, flags, width uint32) error {
	c, rs, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	if err := d.memOpSpan(c, addr, width); err != nil {
		return err
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_write_value(d.drv.api, x.x, c.raw, rs, C.CUdeviceptr(addr), C.ulonglong(value), C.uint(flags), C.int(width)), "cuStreamWriteValue")
}

func (d *Device) StreamBatchMemOp(_ context.Context, h backend.Ctx, s backend.Stream, flags uint32, ops []backend.MemOp) error {
	c, rs, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	if len(ops) == 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "an empty batch of memory operations")
	}
	raw := make([]C.ulonglong, 0, 3*len(ops))
	for _, op := range ops {
		switch op.Type {
		case 1, 2: // 32-bit wait, write
			err = d.memOpSpan(c, op.Addr, 32)
		case 4, 5: // 64-bit wait, write
			err = d.memOpSpan(c, op.Addr, 64)
		}
		if err != nil {
			return err
		}
		raw = append(raw, C.ulonglong(uint64(op.Type)|uint64(op.Flags)<<32), C.ulonglong(op.Addr), C.ulonglong(op.Value))
	}
	return d.drv.check(C.gc_batch_mem_op(d.drv.api, x.x, c.raw, rs, C.uint(len(ops)), &raw[0], C.uint(flags)), "cuStreamBatchMemOp")
}

// TensorMapEncode has the driver encode the descriptor. The driver needs
// the descriptor 64-byte aligned, so it is encoded into C memory.
func (d *Device) TensorMapEncode(_ context.Context, p backend.TensorMapParams) ([128]byte, error) {
	var out [128]byte
	x, err := d.extended()
	if err != nil {
		return out, err
	}
	tm := C.aligned_alloc(64, 128)
	if tm == nil {
		return out, cu.Errorf(cu.ErrorOutOfMemory, "tensor map")
	}
	defer C.free(tm)
	dims := make([]C.ulonglong, 5)
	strides := make([]C.ulonglong, 5)
	estr := make([]C.uint, 5)
	for i, v := range p.GlobalDim {
		dims[i] = C.ulonglong(v)
	}
	for i, v := range p.GlobalStrides {
		strides[i] = C.ulonglong(v)
	}
	for i, v := range p.ElemStrides {
		estr[i] = C.uint(v)
	}
	addr := C.CUdeviceptr(p.Address)
	var r C.CUresult
	if p.Im2col {
		lo, hi := make([]C.int, 3), make([]C.int, 3)
		for i := range p.LowerCorner {
			lo[i], hi[i] = C.int(p.LowerCorner[i]), C.int(p.UpperCorner[i])
		}
		r = C.gc_tensor_map_im2col(x.x, tm, C.int(p.DataType), C.uint(p.Rank), addr, &dims[0], &strides[0], &lo[0], &hi[0],
			C.uint(p.ChannelsPerPixel), C.uint(p.PixelsPerColumn), &estr[0], C.int(p.Interleave), C.int(p.Swizzle), C.int(p.L2Promotion), C.int(p.OOBFill))
	} else {
		box := make([]C.uint, 5)
		for i, v := range p.BoxDim {
			box[i] = C.uint(v)
		}
		r = C.gc_tensor_map_tiled(x.x, tm, C.int(p.DataType), C.uint(p.Rank), addr, &dims[0], &strides[0], &box[0], &estr[0],
			C.int(p.Interleave), C.int(p.Swizzle), C.int(p.L2Promotion), C.int(p.OOBFill))
	}
	if err := d.drv.check(r, "cuTensorMapEncode"); err != nil {
		return out, err
	}
	copy(out[:], unsafe.Slice((*byte)(tm), 128))
	return out, nil
}

// pitchedSpan checks that a pitched range lies in the session's memory.
func (d *Device) pitchedSpan(c *cuCtx, p backend.Pitched, e backend.Extent) error {
	if e.Width == 0 || e.Height == 0 || e.Depth == 0 {
		return nil
	}
	last := (e.Depth-1)*p.Pitch*p.Height + (e.Height-1)*p.Pitch + e.Width
	return d.span(c, p.Ptr, last)
}

func (d *Device) MemcpyHtoD3D(ctx context.Context, h backend.Ctx, dst backend.Pitched, src io.Reader, e backend.Extent, s backend.Stream) error {
	n := e.Width * e.Height * e.Depth
	c, rs, err := d.ctxStream(h, s)
	if err == nil {
		err = d.pitchedSpan(c, dst, e)
	}
	var x *extState
	if err == nil {
		x, err = d.extended()
	}
	if err != nil || n == 0 {
		return drain(src, n, err)
	}
	if e.Width > stageChunk {
		// Rows too long to stage whole: row by row, each a plain copy.
		for z := uint64(0); z < e.Depth; z++ {
			for y := uint64(0); y < e.Height; y++ {
				row := dst.Ptr + backend.DevPtr((z*dst.Height+y)*dst.Pitch)
				if err := d.MemcpyHtoD(ctx, h, row, io.LimitReader(src, int64(e.Width)), e.Width, s); err != nil {
					return drain(src, n-(z*e.Height+y+1)*e.Width, err)
				}
			}
		}
		return nil
	}
	st, err := d.stage(c)
	if err != nil {
		return drain(src, n, err)
	}
	per := stageChunk / e.Width
	left := n
	i := 0
	for z := uint64(0); z < e.Depth; z++ {
		for y := uint64(0); y < e.Height; y += per {
			rows := min(per, e.Height-y)
			k := rows * e.Width
			if err := d.wait(c, st, i); err != nil {
				return drain(src, left, err)
			}
			if _, err := io.ReadFull(src, st.bytes(i, k)); err != nil {
				d.wait(c, st, i^1)
				return fmt.Errorf("reading %d bytes of copy data from the client: %w", n, err)
			}
			left -= k
			at := dst.Ptr + backend.DevPtr((z*dst.Height+y)*dst.Pitch)
			r := C.gc_copy3d(d.drv.api, x.x, c.raw, rs, C.CUdeviceptr(at), C.size_t(dst.Pitch), C.size_t(rows), nil,
				0, 0, 0, st.buf[i], C.size_t(e.Width), C.size_t(rows), 1)
			if err := d.drv.check(r, "cuMemcpy3DAsync"); err != nil {
				d.wait(c, st, i^1)
				return drain(src, left, err)
			}
			if err := d.drv.check(C.gc_event_record(d.drv.api, c.raw, st.done[i], rs), "cuEventRecord"); err != nil {
				d.wait(c, st, i^1)
				return drain(src, left, err)
			}
			st.pending[i] = true
			i ^= 1
		}
	}
	err0, err1 := d.wait(c, st, 0), d.wait(c, st, 1)
	if err0 != nil {
		return err0
	}
	return err1
}

func (d *Device) MemcpyDtoH3D(_ context.Context, h backend.Ctx, dst io.Writer, src backend.Pitched, e backend.Extent, s backend.Stream) error {
	c, rs, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	if err := d.pitchedSpan(c, src, e); err != nil {
		return err
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	if e.Width*e.Height*e.Depth == 0 {
		return nil
	}
	st, err := d.stage(c)
	if err != nil {
		return err
	}
	// Rows longer than a staging buffer go in pieces of one row.
	per, piece := uint64(1), e.Width
	if e.Width <= stageChunk {
		per = stageChunk / e.Width
	} else {
		piece = stageChunk
	}
	for z := uint64(0); z < e.Depth; z++ {
		for y := uint64(0); y < e.Height; y += per {
			rows := min(per, e.Height-y)
			for off := uint64(0); off < e.Width; off += piece {
				w := min(piece, e.Width-off)
				at := src.Ptr + backend.DevPtr((z*src.Height+y)*src.Pitch+off)
				r := C.gc_copy3d(d.drv.api, x.x, c.raw, rs, 0, 0, 0, st.buf[0],
					C.CUdeviceptr(at), C.size_t(src.Pitch), C.size_t(rows), nil, C.size_t(w), C.size_t(rows), 1)
				if err := d.drv.check(r, "cuMemcpy3DAsync"); err != nil {
					return err
				}
				if err := d.drv.check(C.gc_event_record(d.drv.api, c.raw, st.done[0], rs), "cuEventRecord"); err != nil {
					return err
				}
				st.pending[0] = true
				if err := d.wait(c, st, 0); err != nil {
					return err
				}
				if _, err := dst.Write(st.bytes(0, rows*w)); err != nil {
					return fmt.Errorf("writing copy data to the client: %w", err)
				}
			}
		}
	}
	return nil
}

func (d *Device) MemcpyDtoD3D(_ context.Context, h backend.Ctx, dst, src backend.Pitched, e backend.Extent, s backend.Stream) error {
	c, rs, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	if err := d.pitchedSpan(c, dst, e); err != nil {
		return err
	}
	if err := d.pitchedSpan(c, src, e); err != nil {
		return err
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	if e.Width*e.Height*e.Depth == 0 {
		return nil
	}
	r := C.gc_copy3d(d.drv.api, x.x, c.raw, rs, C.CUdeviceptr(dst.Ptr), C.size_t(dst.Pitch), C.size_t(dst.Height), nil,
		C.CUdeviceptr(src.Ptr), C.size_t(src.Pitch), C.size_t(src.Height), nil, C.size_t(e.Width), C.size_t(e.Height), C.size_t(e.Depth))
	return d.drv.check(r, "cuMemcpy3DAsync")
}

func (d *Device) MemcpyPeer(_ context.Context, h backend.Ctx, dst backend.DevPtr, dstCtx backend.Ctx, src backend.DevPtr, srcCtx backend.Ctx, n uint64, s backend.Stream) error {
	c, rs, err := d.ctxStream(h, s)
	if err != nil {
		return err
	}
	dc, err := d.ctx(dstCtx)
	if err != nil {
		return err
	}
	sc, err := d.ctx(srcCtx)
	if err != nil {
		return err
	}
	if err := d.span(dc, dst, n); err != nil {
		return err
	}
	if err := d.span(sc, src, n); err != nil {
		return err
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	if n == 0 {
		return nil
	}
	return d.drv.check(C.gc_copy_peer(d.drv.api, x.x, c.raw, C.CUdeviceptr(dst), dc.raw, C.CUdeviceptr(src), sc.raw, C.size_t(n), rs), "cuMemcpyPeerAsync")
}

func (d *Device) CtxGetLimit(_ context.Context, h backend.Ctx, limit int32) (uint64, error) {
	c, err := d.ctx(h)
	if err != nil {
		return 0, err
	}
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	var v C.size_t
	if err := d.drv.check(C.gc_ctx_get_limit(d.drv.api, x.x, c.raw, C.int(limit), &v), "cuCtxGetLimit"); err != nil {
		return 0, err
	}
	return uint64(v), nil
}

func (d *Device) CtxSetLimit(_ context.Context, h backend.Ctx, limit int32, value uint64) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	return d.drv.check(C.gc_ctx_set_limit(d.drv.api, x.x, c.raw, C.int(limit), C.size_t(value)), "cuCtxSetLimit")
}

// OccupancyClusters asks the driver, which places clusters within the
// device's GPCs.
func (d *Device) OccupancyClusters(_ context.Context, h backend.Ctx, fh backend.Function, cfg backend.LaunchConfig, q backend.ClusterQuery) (int32, error) {
	c, f, err := d.function(h, fh)
	if err != nil {
		return 0, err
	}
	x, err := d.extended()
	if err != nil {
		return 0, err
	}
	grid := [3]C.uint{C.uint(cfg.Grid[0]), C.uint(cfg.Grid[1]), C.uint(cfg.Grid[2])}
	block := [3]C.uint{C.uint(cfg.Block[0]), C.uint(cfg.Block[1]), C.uint(cfg.Block[2])}
	cluster := [3]C.uint{C.uint(cfg.Cluster[0]), C.uint(cfg.Cluster[1]), C.uint(cfg.Cluster[2])}
	name := "cuOccupancyMaxActiveClusters"
	if q == backend.ClusterMaxSize {
		name = "cuOccupancyMaxPotentialClusterSize"
	}
	var v C.int
	if err := d.drv.check(C.gc_occupancy_clusters(d.drv.api, x.x, c.raw, f.raw, &grid[0], &block[0], C.uint(cfg.SharedBytes),
		&cluster[0], C.int(q), &v), name); err != nil {
		return 0, err
	}
	return int32(v), nil
}
