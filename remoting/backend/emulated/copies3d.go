package emulated

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// rows returns the device bytes of every row of a pitched copy, in order.
func (d *Device) rows(p backend.Pitched, e backend.Extent) ([][]byte, error) {
	out := make([][]byte, 0, e.Height*e.Depth)
	for z := uint64(0); z < e.Depth; z++ {
		for y := uint64(0); y < e.Height; y++ {
			off := (z*p.Height + y) * p.Pitch
			b, err := d.mem.slice(uint64(p.Ptr)+off, e.Width)
			if err != nil {
				return nil, fmt.Errorf("row %d of slice %d: %w", y, z, err)
			}
			out = append(out, b)
		}
	}
	return out, nil
}

func (d *Device) MemcpyHtoD3D(_ context.Context, h backend.Ctx, dst backend.Pitched, src io.Reader, e backend.Extent, s backend.Stream) error {
	n := e.Width * e.Height * e.Depth
	c, err := d.ctx(h)
	if err == nil {
		err = d.stream(c, s)
	}
	var rows [][]byte
	if err == nil {
		rows, err = d.rows(dst, e)
	}
	if err != nil {
		if _, derr := io.CopyN(io.Discard, src, int64(n)); derr != nil {
			return fmt.Errorf("discard %d bytes of a failed copy: %w", n, derr)
		}
		return err
	}
	packed := make([]byte, n)
	if _, err := io.ReadFull(src, packed); err != nil {
		return fmt.Errorf("read %d bytes of a pitched copy: %w", n, err)
	}
	if d.later(c, s, func() {
		// Looked up again when it runs: the memory may be gone.
		rows, err := d.rows(dst, e)
		if err != nil {
			c.fail(cu.Errorf(cu.ErrorIllegalAddress, "queued pitched copy: %v", err))
			return
		}
		for i, r := range rows {
			copy(r, packed[uint64(i)*e.Width:])
		}
	}) {
		return nil
	}
	for i, r := range rows {
		copy(r, packed[uint64(i)*e.Width:])
	}
	d.pump()
	return nil
}

func (d *Device) MemcpyDtoH3D(_ context.Context, h backend.Ctx, dst io.Writer, src backend.Pitched, e backend.Extent, s backend.Stream) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	rows, err := d.rows(src, e)
	if err != nil {
		return err
	}
	if !d.drained(c, s) {
		return errBlocked("a copy to the host")
	}
	if err := c.takePending(); err != nil {
		return err
	}
	for _, r := range rows {
		if _, err := dst.Write(r); err != nil {
			return fmt.Errorf("write a pitched copy to the host: %w", err)
		}
	}
	return nil
}

func (d *Device) MemcpyDtoD3D(_ context.Context, h backend.Ctx, dst, src backend.Pitched, e backend.Extent, s backend.Stream) error {
	c, err := d.ctx(h)
	if err != nil {
		return err
	}
	if err := d.stream(c, s); err != nil {
		return err
	}
	to, err := d.rows(dst, e)
	if err != nil {
		return err
	}
	from, err := d.rows(src, e)
	if err != nil {
		return err
	}
	run := func(to, from [][]byte) {
		// Overlapping pitched copies are undefined in CUDA; staging the
		// source keeps them at least deterministic here.
		buf := make([]byte, 0, uint64(len(from))*e.Width)
		for _, r := range from {
			buf = append(buf, r...)
		}
		for i, r := range to {
			copy(r, buf[uint64(i)*e.Width:])
		}
	}
	if d.later(c, s, func() {
		to, err := d.rows(dst, e)
		if err == nil {
			var from [][]byte
			if from, err = d.rows(src, e); err == nil {
				run(to, from)
				return
			}
		}
		c.fail(cu.Errorf(cu.ErrorIllegalAddress, "queued pitched copy: %v", err))
	}) {
		return nil
	}
	run(to, from)
	d.pump()
	return nil
}

// MemcpyPeer copies between two contexts of this device, which share one
// address space.
func (d *Device) MemcpyPeer(ctx context.Context, h backend.Ctx, dst backend.DevPtr, dstCtx backend.Ctx, src backend.DevPtr, srcCtx backend.Ctx, n uint64, s backend.Stream) error {
	for _, c := range []backend.Ctx{dstCtx, srcCtx} {
		if _, err := d.ctx(c); err != nil {
			return err
		}
	}
	return d.MemcpyDtoD(ctx, h, dst, src, n, s)
}

// Tensor maps. The emulator runs no TMA instructions, so its descriptor
// is a layout of gpuctl's own (docs/emulated.md), checked with the rules
// the driver documents for cuTensorMapEncodeTiled and ...Im2col.

// tensorElemBytes is the size of each CUtensorMapDataType's element.
var tensorElemBytes = map[uint32]uint64{0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}

// tensorMapMagic starts every emulated descriptor: "GTM1".
const tensorMapMagic = 0x314d5447

func (d *Device) TensorMapEncode(_ context.Context, p backend.TensorMapParams) ([128]byte, error) {
	var tm [128]byte
	bad := func(format string, a ...any) ([128]byte, error) {
		return tm, cu.Errorf(cu.ErrorInvalidValue, "tensor map: "+format, a...)
	}
	es, ok := tensorElemBytes[p.DataType]
	if !ok {
		return bad("data type %d is not one the emulated device encodes", p.DataType)
	}
	if p.Interleave > 2 || p.Swizzle > 3 || p.L2Promotion > 3 || p.OOBFill > 1 {
		return bad("interleave %d, swizzle %d, L2 promotion %d or fill %d out of range", p.Interleave, p.Swizzle, p.L2Promotion, p.OOBFill)
	}
	if p.Interleave != 0 && p.Rank < 3 {
		return bad("an interleaved tensor map needs rank 3 or more, not %d", p.Rank)
	}
	align := uint64(16)
	if p.Interleave == 2 {
		align = 32
	}
	if uint64(p.Address)%align != 0 {
		return bad("global address %#x is not %d-byte aligned", uint64(p.Address), align)
	}
	if p.OOBFill == 1 && p.DataType < 6 {
		return bad("NaN fill needs a floating-point data type")
	}
	for i, g := range p.GlobalDim {
		if g == 0 || g > 1<<32 {
			return bad("global dimension %d is %d (must be 1 to 2^32)", i, g)
		}
	}
	for i, st := range p.GlobalStrides {
		if st%align != 0 || st >= 1<<40 {
			return bad("global stride %d is %d (a multiple of %d below 2^40)", i, st, align)
		}
	}
	if len(p.GlobalStrides) > 0 && p.GlobalStrides[0] < p.GlobalDim[0]*es {
		return bad("global stride 0 (%d bytes) is shorter than a row (%d bytes)", p.GlobalStrides[0], p.GlobalDim[0]*es)
	}
	for i, e := range p.ElemStrides {
		if e == 0 || e > 8 {
			return bad("element stride %d is %d (must be 1 to 8)", i, e)
		}
	}
	for i, b := range p.BoxDim {
		if b == 0 || b > 256 {
			return bad("box dimension %d is %d (must be 1 to 256)", i, b)
		}
	}
	if !p.Im2col && p.Interleave == 0 {
		inner := uint64(p.BoxDim[0]) * es
		if inner%16 != 0 {
			return bad("the box's inner dimension is %d bytes, not a multiple of 16", inner)
		}
		if span := uint64(16) << p.Swizzle; p.Swizzle != 0 && inner > span {
			return bad("the box's inner dimension of %d bytes exceeds the %d-byte swizzle span", inner, span)
		}
	}
	if p.Im2col && (p.ChannelsPerPixel == 0 || p.ChannelsPerPixel > 256 || p.PixelsPerColumn == 0 || p.PixelsPerColumn > 1024) {
		return bad("%d channels per pixel and %d pixels per column (1 to 256, 1 to 1024)", p.ChannelsPerPixel, p.PixelsPerColumn)
	}
	le := binary.LittleEndian
	le.PutUint32(tm[0:], tensorMapMagic)
	tm[4], tm[5], tm[6], tm[7] = byte(p.DataType), byte(p.Rank), byte(p.Interleave), byte(p.Swizzle)
	tm[8], tm[9] = byte(p.L2Promotion), byte(p.OOBFill)
	if p.Im2col {
		tm[10] = 1
	}
	le.PutUint64(tm[16:], uint64(p.Address))
	for i, g := range p.GlobalDim {
		le.PutUint64(tm[24+8*i:], g-1)
	}
	for i, st := range p.GlobalStrides {
		le.PutUint64(tm[64+8*i:], st)
	}
	for i, b := range p.BoxDim {
		tm[96+i] = byte(b - 1)
	}
	for i, e := range p.ElemStrides {
		tm[101+i] = byte(e - 1)
	}
	if p.Im2col {
		for i := range p.LowerCorner {
			le.PutUint16(tm[106+2*i:], uint16(int16(p.LowerCorner[i])))
			le.PutUint16(tm[112+2*i:], uint16(int16(p.UpperCorner[i])))
		}
		le.PutUint16(tm[118:], uint16(p.ChannelsPerPixel-1))
		le.PutUint16(tm[120:], uint16(p.PixelsPerColumn-1))
	}
	return tm, nil
}
