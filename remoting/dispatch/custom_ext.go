package dispatch

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// ModuleCache keeps module images by the SHA-256 of their bytes, shared by
// the sessions of a host. Get returns an image only if its bytes still
// hash to sum. Put may drop the image (the cache is bounded); a failure
// to keep it is not an error of the load.
type ModuleCache interface {
	Get(sum [32]byte) ([]byte, bool)
	Put(sum [32]byte, image []byte)
}

// SetModuleCache makes the session load modules by hash from c and keep
// the modules it is sent in c; nil turns the cache off (every load by
// hash misses, and the client sends the image). It may be called while
// Serve runs: a restored worker learns its new host's cache this way.
func (s *Session) SetModuleCache(c ModuleCache) {
	if c == nil {
		s.modules.Store(nil)
		return
	}
	s.modules.Store(&c)
}

func (s *Session) moduleCache() ModuleCache {
	if p := s.modules.Load(); p != nil {
		return *p
	}
	return nil
}

// maxDeviceAttributes bounds DeviceAttributes' count: CUDA 13 has 136
// attributes; the bound leaves room for newer drivers.
const maxDeviceAttributes = 1024

// doDeviceAttributes answers attributes 0..count-1 at once, each as
// (u32 result, i32 value), so that a client fills its attribute cache
// with one round trip. An attribute the device rejects is reported with
// its error code rather than failing the whole call.
func (s *Session) doDeviceAttributes(ctx context.Context, x *call, dev int32, count uint32) ([]byte, error) {
	if count > maxDeviceAttributes {
		return nil, cu.Errorf(cu.ErrorInvalidValue, "DeviceAttributes: %d attributes asked for, at most %d", count, maxDeviceAttributes)
	}
	if _, err := s.dev.DeviceName(ctx, dev); err != nil {
		return nil, err // no such device
	}
	out := make([]byte, 8*count)
	for a := uint32(0); a < count; a++ {
		v, err := s.dev.DeviceAttribute(ctx, int32(a), dev)
		binary.LittleEndian.PutUint32(out[8*a:], uint32(cu.Code(err)))
		binary.LittleEndian.PutUint32(out[8*a+4:], uint32(v))
	}
	return out, nil
}

func moduleSum(hash []byte) ([32]byte, error) {
	var sum [32]byte
	if len(hash) != len(sum) {
		return sum, cu.Errorf(cu.ErrorInvalidValue, "module hash of %d bytes (want a 32-byte SHA-256)", len(hash))
	}
	copy(sum[:], hash)
	return sum, nil
}

// doModuleLoadCached loads a module from the host's cache by its hash.
// found is false, with no error, when the host lacks it: the client then
// uploads the image.
func (s *Session) doModuleLoadCached(ctx context.Context, x *call, c backend.Ctx, hash []byte, size uint64) (backend.Module, bool, error) {
	sum, err := moduleSum(hash)
	if err != nil {
		return 0, false, err
	}
	if size == 0 || size > wire.MaxImage {
		return 0, false, cu.Errorf(cu.ErrorInvalidImage, "module image of %d bytes (must be 1 to %d)", size, wire.MaxImage)
	}
	mc := s.moduleCache()
	if mc == nil {
		return 0, false, nil
	}
	img, ok := mc.Get(sum)
	if !ok || uint64(len(img)) != size {
		return 0, false, nil
	}
	m, err := s.dev.ModuleLoad(ctx, c, img)
	if err != nil {
		return 0, false, err
	}
	return m, true, nil
}

// doModuleUpload reads a module image, checks it against the hash the
// client announced, loads it and keeps it in the host's cache. An image
// whose bytes do not match its hash is refused before anything is loaded
// or cached, so one client cannot plant an image under another's hash.
func (s *Session) doModuleUpload(ctx context.Context, x *call, c backend.Ctx, hash []byte) (backend.Module, error) {
	sum, err := moduleSum(hash)
	if err != nil {
		return 0, err
	}
	img, err := s.readImage(x)
	if err != nil {
		return 0, err
	}
	if sha256.Sum256(img) != sum {
		s.log.Warn("module upload refused: its bytes do not match its hash", "seq", x.h.Seq, "bytes", len(img))
		return 0, cu.Errorf(cu.ErrorInvalidImage, "module upload of %d bytes does not match its SHA-256 %x", len(img), sum[:8])
	}
	m, err := s.dev.ModuleLoad(ctx, c, img)
	if err != nil {
		return 0, err
	}
	// Only images the device accepted are kept: garbage never fills the
	// cache. Writing a large image takes a while, and the client need not
	// wait for it: it happens beside the session's next calls.
	if mc := s.moduleCache(); mc != nil {
		s.cacheWrites.Add(1)
		go func() {
			defer s.cacheWrites.Done()
			mc.Put(sum, img)
		}()
	}
	return m, nil
}

// FlushModuleCache waits for the module cache writes in progress. A
// worker calls it before it is dumped, so that it holds no file then.
func (s *Session) FlushModuleCache() { s.cacheWrites.Wait() }

// readImage reads a module image from the frame's bulk payload.
func (s *Session) readImage(x *call) ([]byte, error) {
	if x.h.Bulk > wire.MaxImage {
		return nil, cu.Errorf(cu.ErrorInvalidImage, "module image of %d bytes exceeds %d", x.h.Bulk, wire.MaxImage)
	}
	if x.h.Bulk == 0 {
		return nil, cu.Errorf(cu.ErrorInvalidImage, "empty module image")
	}
	img := make([]byte, x.h.Bulk)
	if _, err := io.ReadFull(&x.bulkIn, img); err != nil {
		return nil, fmt.Errorf("%w: read module image: %v", errFatal, err)
	}
	return img, nil
}

// maxAccessDescs and maxMemOps bound the lists a client may send.
const (
	maxAccessDescs = 64
	maxMemOps      = 256
)

func (s *Session) doMemSetAccess(ctx context.Context, x *call, p backend.DevPtr, size uint64, descs []byte) error {
	if len(descs)%12 != 0 || len(descs)/12 > maxAccessDescs {
		return cu.Errorf(cu.ErrorInvalidValue, "MemSetAccess: %d bytes of access descriptors (want up to %d of 12 bytes)", len(descs), maxAccessDescs)
	}
	ds := make([]backend.AccessDesc, len(descs)/12)
	for i := range ds {
		b := descs[12*i:]
		ds[i] = backend.AccessDesc{LocType: binary.LittleEndian.Uint32(b), LocID: int32(binary.LittleEndian.Uint32(b[4:])), Flags: binary.LittleEndian.Uint32(b[8:])}
	}
	return s.dev.MemSetAccess(ctx, p, size, ds)
}

func (s *Session) doStreamBatchMemOp(ctx context.Context, x *call, c backend.Ctx, st backend.Stream, flags uint32, ops []byte) error {
	if len(ops)%24 != 0 || len(ops)/24 > maxMemOps {
		return cu.Errorf(cu.ErrorInvalidValue, "StreamBatchMemOp: %d bytes of operations (want up to %d of 24 bytes)", len(ops), maxMemOps)
	}
	mo := make([]backend.MemOp, len(ops)/24)
	for i := range mo {
		b := ops[24*i:]
		mo[i] = backend.MemOp{Type: binary.LittleEndian.Uint32(b), Flags: binary.LittleEndian.Uint32(b[4:]),
			Addr: backend.DevPtr(binary.LittleEndian.Uint64(b[8:])), Value: binary.LittleEndian.Uint64(b[16:])}
	}
	return s.dev.StreamBatchMemOp(ctx, c, st, flags, mo)
}

// doTensorMapEncode decodes the parameters of cuTensorMapEncodeTiled (kind
// 0) or cuTensorMapEncodeIm2col (kind 1); see docs/protocol.md.
func (s *Session) doTensorMapEncode(ctx context.Context, x *call, kind uint32, params []byte) ([]byte, error) {
	p, err := decodeTensorMap(kind, params)
	if err != nil {
		return nil, err
	}
	tm, err := s.dev.TensorMapEncode(ctx, p)
	if err != nil {
		return nil, err
	}
	return tm[:], nil
}

// maxTensorRank is the driver's limit on a tensor map's rank.
const maxTensorRank = 5

func decodeTensorMap(kind uint32, params []byte) (backend.TensorMapParams, error) {
	d := wire.Dec{B: params}
	p := backend.TensorMapParams{Im2col: kind == 1}
	if kind > 1 {
		return p, cu.Errorf(cu.ErrorInvalidValue, "tensor map kind %d (0 tiled, 1 im2col)", kind)
	}
	p.DataType, p.Rank = d.U32(), d.U32()
	p.Address = backend.DevPtr(d.U64())
	p.Interleave, p.Swizzle, p.L2Promotion, p.OOBFill = d.U32(), d.U32(), d.U32(), d.U32()
	if d.Err() == nil && (p.Rank == 0 || p.Rank > maxTensorRank) {
		return p, cu.Errorf(cu.ErrorInvalidValue, "tensor map rank %d (must be 1 to %d)", p.Rank, maxTensorRank)
	}
	r := int(p.Rank)
	for i := 0; i < r; i++ {
		p.GlobalDim = append(p.GlobalDim, d.U64())
	}
	for i := 0; i+1 < r; i++ {
		p.GlobalStrides = append(p.GlobalStrides, d.U64())
	}
	for i := 0; i < r; i++ {
		p.ElemStrides = append(p.ElemStrides, d.U32())
	}
	if p.Im2col {
		if r < 3 {
			return p, cu.Errorf(cu.ErrorInvalidValue, "an im2col tensor map needs rank 3 to 5, not %d", r)
		}
		for i := 0; i < r-2; i++ {
			p.LowerCorner = append(p.LowerCorner, d.I32())
		}
		for i := 0; i < r-2; i++ {
			p.UpperCorner = append(p.UpperCorner, d.I32())
		}
		p.ChannelsPerPixel, p.PixelsPerColumn = d.U32(), d.U32()
	} else {
		for i := 0; i < r; i++ {
			p.BoxDim = append(p.BoxDim, d.U32())
		}
	}
	if err := d.Err(); err != nil {
		return p, cu.Errorf(cu.ErrorInvalidValue, "tensor map parameters: %d bytes do not match rank %d", len(params), r)
	}
	return p, nil
}

// extent checks a pitched copy's geometry and returns its packed size.
func extent(what string, e backend.Extent, sides ...backend.Pitched) (uint64, error) {
	n := e.Width * e.Height
	if e.Height != 0 && n/e.Height != e.Width || e.Depth != 0 && (n*e.Depth)/e.Depth != n {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "%s: %dx%dx%d bytes overflows", what, e.Width, e.Height, e.Depth)
	}
	for _, sd := range sides {
		if e.Height > 1 && sd.Pitch < e.Width || e.Depth > 1 && sd.Height < e.Height {
			return 0, cu.Errorf(cu.ErrorInvalidValue, "%s: pitch %d or height %d is smaller than the copy (%d bytes, %d rows)",
				what, sd.Pitch, sd.Height, e.Width, e.Height)
		}
	}
	return n * e.Depth, nil
}

func (s *Session) doMemcpyHtoD3D(ctx context.Context, x *call, c backend.Ctx, dst backend.DevPtr, dstPitch, dstHeight, w, h, dp uint64, st backend.Stream) error {
	e := backend.Extent{Width: w, Height: h, Depth: dp}
	to := backend.Pitched{Ptr: dst, Pitch: dstPitch, Height: dstHeight}
	n, err := extent("MemcpyHtoD3D", e, to)
	if err != nil {
		return err
	}
	if n != x.h.Bulk {
		return cu.Errorf(cu.ErrorInvalidValue, "MemcpyHtoD3D: %d bytes announced, %d bytes of payload", n, x.h.Bulk)
	}
	return s.dev.MemcpyHtoD3D(ctx, c, to, &x.bulkIn, e, st)
}

func (s *Session) doMemcpyDtoH3D(ctx context.Context, x *call, c backend.Ctx, src backend.DevPtr, srcPitch, srcHeight, w, h, dp uint64, st backend.Stream) error {
	e := backend.Extent{Width: w, Height: h, Depth: dp}
	from := backend.Pitched{Ptr: src, Pitch: srcPitch, Height: srcHeight}
	n, err := extent("MemcpyDtoH3D", e, from)
	if err != nil {
		return err
	}
	if x.h.Bulk != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "MemcpyDtoH3D: request carries %d bytes of payload", x.h.Bulk)
	}
	if n > wire.MaxBulk {
		return cu.Errorf(cu.ErrorInvalidValue, "MemcpyDtoH3D: %d bytes exceeds the protocol's bulk limit", n)
	}
	bo := &bulkOut{x: x, n: n}
	err = s.dev.MemcpyDtoH3D(ctx, c, bo, from, e, st)
	switch {
	case err == nil && bo.written == n:
		return nil
	case !bo.started:
		if err == nil {
			err = cu.Errorf(cu.ErrorUnknown, "MemcpyDtoH3D: the device wrote %d of %d bytes", bo.written, n)
		}
		return err
	default:
		return fmt.Errorf("%w: MemcpyDtoH3D of %d bytes stopped after %d: %v", errFatal, n, bo.written, err)
	}
}

func (s *Session) doMemcpyDtoD3D(ctx context.Context, x *call, c backend.Ctx, dst backend.DevPtr, dstPitch, dstHeight uint64,
	src backend.DevPtr, srcPitch, srcHeight, w, h, dp uint64, st backend.Stream) error {
	e := backend.Extent{Width: w, Height: h, Depth: dp}
	to := backend.Pitched{Ptr: dst, Pitch: dstPitch, Height: dstHeight}
	from := backend.Pitched{Ptr: src, Pitch: srcPitch, Height: srcHeight}
	if _, err := extent("MemcpyDtoD3D", e, to, from); err != nil {
		return err
	}
	return s.dev.MemcpyDtoD3D(ctx, c, to, from, e, st)
}
