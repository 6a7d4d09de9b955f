package emulated

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

func (d *Device) MemAlloc(_ context.Context, h backend.Ctx, size uint64) (backend.DevPtr, error) {
	if _, err := d.ctx(h); err != nil {
		return 0, err
	}
	a, err := d.mem.alloc(size, h)
	if err != nil {
		return 0, err
	}
	return backend.DevPtr(a.base), nil
}

func (d *Device) MemFree(_ context.Context, h backend.Ctx, p backend.DevPtr) error {
	if _, err := d.ctx(h); err != nil {
		return err
	}
	if p == 0 {
		return nil // freeing 0 does nothing, as in CUDA
	}
	if d.isGlobal(uint64(p)) {
		return cu.Errorf(cu.ErrorInvalidValue, "%#x is a module variable; it is freed when its module is unloaded", uint64(p))
	}
	if pl, ok := d.poolOf[uint64(p)]; ok {
		d.poolFree(pl, uint64(p))
		return nil
	}
	return d.mem.free(uint64(p))
}

func (d *Device) MemGetInfo(_ context.Context, h backend.Ctx) (uint64, uint64, error) {
	if _, err := d.ctx(h); err != nil {
		return 0, 0, err
	}
	used := d.mem.inUse()
	return d.mem.total - used, d.mem.total, nil
}

func (d *Device) MemGetAddressRange(_ context.Context, h backend.Ctx, p backend.DevPtr) (backend.DevPtr, uint64, error) {
	if _, err := d.ctx(h); err != nil {
		return 0, 0, err
	}
	a := d.mem.find(uint64(p))
	if a == nil {
		return 0, 0, cu.Errorf(cu.ErrorNotFound, "device address %#x is not in any allocation", uint64(p))
	}
	return backend.DevPtr(a.base), uint64(len(a.data)), nil
}

// stream validates a stream handle for work submitted on context c.
func (d *Device) stream(c *context_, s backend.Stream) error {
	if s == 0 || s == streamLegacy || s == streamPerThread {
		return nil
	}
	st, ok := d.streams[s]
	if !ok || st.ctx != c.handle {
		return cu.Errorf(cu.ErrorInvalidHandle, "stream %#x does not exist in context %#x", uint64(s), uint64(c.handle))
	}
	return nil
}

// MemcpyHtoD reads n bytes from src into device memory. On failure it
// still consumes all n bytes, so the caller's stream stays framed.
func (d *Device) MemcpyHtoD(_ context.Context, h backend.Ctx, dst backend.DevPtr, src io.Reader, n uint64, s backend.Stream) error {
	buf, err := d.copyTarget(h, dst, n, s)
	if err != nil {
		if _, derr := io.CopyN(io.Discard, src, int64(n)); derr != nil {
			return fmt.Errorf("discard %d bytes of a failed copy: %w", n, derr)
		}
		return err
	}
	if len(d.blocked) > 0 {
		c, _ := d.ctx(h)
		var tmp []byte
		if d.later(c, s, func() { d.deferredCopy(c, uint64(dst), tmp) }) {
			tmp = make([]byte, n)
			if _, err := io.ReadFull(src, tmp); err != nil {
				return fmt.Errorf("read %d bytes for device address %#x: %w", n, uint64(dst), err)
			}
			return nil
		}
	}
	if _, err := io.ReadFull(src, buf); err != nil {
		return fmt.Errorf("read %d bytes for device address %#x: %w", n, uint64(dst), err)
	}
	d.pump()
	return nil
}

func (d *Device) copyTarget(h backend.Ctx, p backend.DevPtr, n uint64, s backend.Stream) ([]byte, error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, err
	}
	if err := d.stream(c, s); err != nil {
		return nil, err
	}
	return d.mem.slice(uint64(p), n)
}

// MemcpyDtoH is synchronous in CUDA, so it also reports pending
// asynchronous errors, before writing anything.
func (d *Device) MemcpyDtoH(_ context.Context, h backend.Ctx, dst io.Writer, src backend.DevPtr, n uint64, s backend.Stream) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	buf, err := d.mem.slice(uint64(src), n)
	if err != nil {
		return err
	}
	if !d.drained(c, s) {
		return errBlocked("a copy to the host")
	}
	if err := c.takePending(); err != nil {
		return err
	}
	if _, err := dst.Write(buf); err != nil {
		return fmt.Errorf("write %d bytes from device address %#x: %w", n, uint64(src), err)
	}
	return nil
}

func (d *Device) MemcpyDtoD(_ context.Context, h backend.Ctx, dst, src backend.DevPtr, n uint64, s backend.Stream) error {
	to, err := d.copyTarget(h, dst, n, s)
	if err != nil {
		return err
	}
	from, err := d.mem.slice(uint64(src), n)
	if err != nil {
		return err
	}
	c, _ := d.ctx(h)
	if d.later(c, s, func() {
		// The memory is looked up again: it may be gone by now.
		if from, err := d.mem.slice(uint64(src), n); err != nil {
			c.fail(cu.Errorf(cu.ErrorIllegalAddress, "queued copy from %#x: %v", uint64(src), err))
		} else {
			d.deferredCopy(c, uint64(dst), from)
		}
	}) {
		return nil
	}
	copy(to, from) // copy handles overlap like memmove
	d.pump()
	return nil
}

func (d *Device) Memset(_ context.Context, h backend.Ctx, dst backend.DevPtr, value uint32, elemSize int, count uint64, s backend.Stream) error {
	if elemSize != 1 && elemSize != 2 && elemSize != 4 {
		return cu.Errorf(cu.ErrorInvalidValue, "memset element size %d (must be 1, 2 or 4)", elemSize)
	}
	if uint64(elemSize) > 1 && uint64(dst)%uint64(elemSize) != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "memset of %d-byte elements at misaligned address %#x", elemSize, uint64(dst))
	}
	n := count * uint64(elemSize)
	if count != 0 && n/count != uint64(elemSize) {
		return cu.Errorf(cu.ErrorInvalidValue, "memset of %d elements overflows", count)
	}
	buf, err := d.copyTarget(h, dst, n, s)
	if err != nil {
		return err
	}
	c, _ := d.ctx(h)
	if d.later(c, s, func() {
		if buf, err := d.mem.slice(uint64(dst), n); err != nil {
			c.fail(cu.Errorf(cu.ErrorIllegalAddress, "queued memset of %#x: %v", uint64(dst), err))
		} else {
			fill(buf, value, elemSize)
		}
	}) {
		return nil
	}
	fill(buf, value, elemSize)
	d.pump()
	return nil
}

// fill writes value's low elemSize bytes repeatedly, doubling the filled
// prefix so large fills run at memmove speed.
func fill(buf []byte, value uint32, elemSize int) {
	if len(buf) == 0 {
		return
	}
	var pat [4]byte
	binary.LittleEndian.PutUint32(pat[:], value)
	k := copy(buf, pat[:elemSize])
	for k < len(buf) {
		k += copy(buf[k:], buf[:k])
	}
}
