package ptx

import (
	"encoding/binary"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// loadVal reads a little-endian value of type t and extends it to a
// destination register of width mask dm: signed types sign-extend, all
// others zero-extend.
func loadVal(b []byte, t ptype, dm uint64) uint64 {
	var v uint64
	switch len(b) {
	case 1:
		v = uint64(b[0])
	case 2:
		v = uint64(binary.LittleEndian.Uint16(b))
	case 4:
		v = uint64(binary.LittleEndian.Uint32(b))
	case 8:
		v = binary.LittleEndian.Uint64(b)
	}
	if t.signed() {
		v = sext(v, t.bits())
	}
	return v & dm
}

// loadShared reads a value other blocks may update with atomics: aligned
// 4- and 8-byte loads are atomic loads, which cost a plain move on amd64
// and order the load after those atomics.
func loadShared(b []byte, t ptype, dm uint64) uint64 {
	p := unsafe.Pointer(&b[0])
	var v uint64
	switch {
	case len(b) == 4 && uintptr(p)&3 == 0:
		v = uint64(atomic.LoadUint32((*uint32)(p)))
	case len(b) == 8 && uintptr(p)&7 == 0:
		v = atomic.LoadUint64((*uint64)(p))
	default:
		return loadVal(b, t, dm)
	}
	if t.signed() {
		v = sext(v, t.bits())
	}
	return v & dm
}

func storeVal(b []byte, v uint64) {
	switch len(b) {
	case 1:
		b[0] = byte(v)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(v))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(v))
	case 8:
		binary.LittleEndian.PutUint64(b, v)
	}
}

func (w *warp) checkAlign(addr, n uint64, in *inst) {
	if addr&(n-1) != 0 {
		w.fail(cu.ErrorMisalignedAddress, in, "%d-byte access at %#x is not %d-byte aligned", n, addr, n)
	}
}

// opLd loads scalars or vectors from any state space but .param.
func opLd(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a := int(in.a) * warpSize
	sz := uint64(in.t.size())
	n := uint64(in.n)
	total := sz * n
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		w.checkAlign(addr, min(total, 16), in)
		b := w.mem(in.space, l, addr, total, in)
		if n == 1 {
			r[int(in.d)*warpSize+l] = loadShared(b, in.t, in.dmask)
			continue
		}
		for i, d := range in.vec {
			r[int(d)*warpSize+l] = loadShared(b[uint64(i)*sz:uint64(i+1)*sz], in.t, in.dmask)
		}
	}
}

// opLdGlobal32 is the common 4-byte global load.
func opLdGlobal32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a, d := int(in.a)*warpSize, int(in.d)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		b := w.global4(addr, in)
		// An atomic load costs a plain move on amd64 and orders this
		// load after other blocks' atomics, as the PTX memory model does
		// for volatile and relaxed loads.
		r[d+l] = uint64(atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[0]))))
	}
}

// opLdGeneric32 is a 4-byte load through a generic address: global
// addresses take the cached fast path, the windows the general one.
func opLdGeneric32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a, d := int(in.a)*warpSize, int(in.d)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		if addr&3 != 0 {
			w.checkAlign(addr, 4, in)
		}
		var b []byte
		if off := addr - w.spanBase; off < uint64(len(w.spanData)) && uint64(len(w.spanData))-off >= 4 {
			b = w.spanData[off : off+4]
		} else {
			b = w.generic(l, addr, 4, in)
		}
		r[d+l] = loadShared(b, in.t, in.dmask)
	}
}

func opStGeneric32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a, s := int(in.a)*warpSize, int(in.b)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		if addr&3 != 0 {
			w.checkAlign(addr, 4, in)
		}
		var b []byte
		if off := addr - w.spanBase; off < uint64(len(w.spanData)) && uint64(len(w.spanData))-off >= 4 {
			b = w.spanData[off : off+4]
		} else {
			b = w.generic(l, addr, 4, in)
		}
		binary.LittleEndian.PutUint32(b, uint32(r[s+l]))
	}
}

func opSt(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a := int(in.a) * warpSize
	sz := uint64(in.t.size())
	n := uint64(in.n)
	total := sz * n
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		w.checkAlign(addr, min(total, 16), in)
		b := w.mem(in.space, l, addr, total, in)
		if n == 1 {
			storeVal(b, r[int(in.b)*warpSize+l])
			continue
		}
		for i, s := range in.vec {
			storeVal(b[uint64(i)*sz:uint64(i+1)*sz], r[int(s)*warpSize+l])
		}
	}
}

func opStGlobal32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a, s := int(in.a)*warpSize, int(in.b)*warpSize
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		b := w.global4(addr, in)
		binary.LittleEndian.PutUint32(b, uint32(r[s+l]))
	}
}

// paramBytes returns the bytes of a .param access: the launch's parameter
// buffer in a kernel, the lane's parameter area in a function.
func (w *warp) paramBytes(fr *frame, in *inst, lane int, off, n uint64) []byte {
	if in.aux == 0 {
		p := w.b.l.params
		if off > uint64(len(p)) || uint64(len(p))-off < n {
			w.fail(cu.ErrorIllegalAddress, in, "parameter access at offset %d is outside the %d-byte parameter buffer", off, len(p))
		}
		return p[off : off+n]
	}
	ps := uint64(fr.fn.paramSize)
	if off > ps || ps-off < n {
		w.fail(cu.ErrorIllegalAddress, in, "parameter access at offset %d is outside the %d-byte parameter space", off, ps)
	}
	base := uint64(lane) * ps
	return fr.params[base+off : base+off+n]
}

func opLdParam(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	sz := uint64(in.t.size())
	if in.aux == 0 && in.a < 0 && in.n == 1 {
		// A kernel parameter at a fixed offset is the same for every
		// lane: read it once.
		v := loadVal(w.paramBytes(fr, in, 0, in.off, sz), in.t, in.dmask)
		d := int(in.d) * warpSize
		for ; m != 0; m &= m - 1 {
			r[d+bits.TrailingZeros32(m)] = v
		}
		return
	}
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		off := in.off
		if in.a >= 0 {
			off += r[int(in.a)*warpSize+l]
		}
		b := w.paramBytes(fr, in, l, off, sz*uint64(in.n))
		if in.n == 1 {
			r[int(in.d)*warpSize+l] = loadVal(b, in.t, in.dmask)
			continue
		}
		for i, d := range in.vec {
			r[int(d)*warpSize+l] = loadVal(b[uint64(i)*sz:uint64(i+1)*sz], in.t, in.dmask)
		}
	}
}

func opStParam(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	sz := uint64(in.t.size())
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		b := w.paramBytes(fr, in, l, in.off, sz*uint64(in.n))
		if in.n == 1 {
			storeVal(b, r[int(in.b)*warpSize+l])
			continue
		}
		for i, s := range in.vec {
			storeVal(b[uint64(i)*sz:uint64(i+1)*sz], r[int(s)*warpSize+l])
		}
	}
}

// Atomic operations. Every space goes through sync/atomic so that blocks
// running on different goroutines see one order of updates.

const (
	atAdd = iota
	atMin
	atMax
	atAnd
	atOr
	atXor
	atExch
	atCas
	atInc
	atDec
)

var atomOps = map[string]int{"add": atAdd, "min": atMin, "max": atMax, "and": atAnd, "or": atOr, "xor": atXor,
	"exch": atExch, "cas": atCas, "inc": atInc, "dec": atDec}

// atomApply computes the new value of an atomic read-modify-write.
//
// Float adds in global memory follow an H200 (see e2e/ptxgen): single
// precision flushes subnormal operands and results to zero, keeping the
// sign; double precision returns a NaN operand unchanged, the added value's
// before the old one's. In shared memory they are ordinary IEEE adds.
func atomApply(op int, t ptype, old, b, c uint64, global bool) uint64 {
	mask := t.mask()
	switch op {
	case atAdd:
		switch {
		case t == tF32 && global:
			return b32(ftz32(ftz32(f32(old)) + ftz32(f32(b))))
		case t == tF32:
			return b32(f32(old) + f32(b))
		case t == tF64 && global && isNaN64(b):
			return b
		case t == tF64 && global && isNaN64(old):
			return old
		case t == tF64:
			return b64(f64(old) + f64(b))
		}
		switch t {
		case tF16x2:
			return addHalf2(old, b, f16ToF32, func(f float32) uint64 { return uint64(f32ToF16(f)) })
		case tBF16x2:
			return addHalf2(old, b, func(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) },
				func(f float32) uint64 { return uint64(f32ToBF16(f)) })
		}
		return (old + b) & mask
	case atMin, atMax:
		isMin := op == atMin
		switch {
		case t == tF32:
			return b32(float32(fminmax(float64(f32(old)), float64(f32(b)), isMin, false)))
		case t == tF64:
			return b64(fminmax(f64(old), f64(b), isMin, false))
		case t.signed():
			x, y := int64(t.ext(old)), int64(t.ext(b))
			if (y < x) == isMin && y != x {
				return uint64(y) & mask
			}
			return old & mask
		}
		x, y := old&mask, b&mask
		if (y < x) == isMin && y != x {
			return y
		}
		return x
	case atAnd:
		return old & b & mask
	case atOr:
		return (old | b) & mask
	case atXor:
		return (old ^ b) & mask
	case atExch:
		return b & mask
	case atCas:
		if old&mask == b&mask {
			return c & mask
		}
		return old & mask
	case atInc:
		if old&mask >= b&mask {
			return 0
		}
		return (old + 1) & mask
	case atDec:
		if old&mask == 0 || old&mask > b&mask {
			return b & mask
		}
		return (old - 1) & mask
	}
	return old
}

// addHalf2 adds two packed pairs of 16-bit floats, each rounded once.
func addHalf2(x, y uint64, dec func(uint16) float32, enc func(float32) uint64) uint64 {
	lo := enc(dec(uint16(x)) + dec(uint16(y)))
	hi := enc(dec(uint16(x>>16)) + dec(uint16(y>>16)))
	return hi<<16 | lo
}

// atomic performs one atomic read-modify-write on b and returns the old
// value.
func (w *warp) atomic(b []byte, op int, t ptype, x, y uint64, in *inst, global bool) uint64 {
	p := unsafe.Pointer(&b[0])
	switch len(b) {
	case 4:
		if uintptr(p)&3 != 0 {
			w.fail(cu.ErrorMisalignedAddress, in, "atomic on unaligned memory")
		}
		ptr := (*uint32)(p)
		if op == atAdd && !t.float() && t != tF16x2 && t != tBF16x2 {
			return uint64(atomic.AddUint32(ptr, uint32(x)) - uint32(x))
		}
		if op == atExch {
			return uint64(atomic.SwapUint32(ptr, uint32(x)))
		}
		for {
			old := atomic.LoadUint32(ptr)
			nv := uint32(atomApply(op, t, uint64(old), x, y, global))
			if nv == old || atomic.CompareAndSwapUint32(ptr, old, nv) {
				return uint64(old)
			}
		}
	case 8:
		if uintptr(p)&7 != 0 {
			w.fail(cu.ErrorMisalignedAddress, in, "atomic on unaligned memory")
		}
		ptr := (*uint64)(p)
		if op == atAdd && !t.float() {
			return atomic.AddUint64(ptr, x) - x
		}
		if op == atExch {
			return atomic.SwapUint64(ptr, x)
		}
		for {
			old := atomic.LoadUint64(ptr)
			nv := atomApply(op, t, old, x, y, global)
			if nv == old || atomic.CompareAndSwapUint64(ptr, old, nv) {
				return old
			}
		}
	}
	// 16-bit atomics (f16/bf16 add, cas.b16): no sync/atomic form; shared
	// and global 16-bit atomics are rare enough to emulate with a lock-free
	// CAS on the enclosing aligned word.
	if len(b) != 2 || uintptr(p)&1 != 0 {
		w.fail(cu.ErrorMisalignedAddress, in, "%d-byte atomic is not supported or not aligned", len(b))
	}
	mis := uintptr(p) & 3
	wp := (*uint32)(unsafe.Add(p, -int(mis)))
	shift := mis * 8
	for {
		old := atomic.LoadUint32(wp)
		o16 := uint64(old>>shift) & 0xffff
		var n16 uint64
		switch t {
		case tF16:
			n16 = uint64(f32ToF16(f16ToF32(uint16(o16)) + f16ToF32(uint16(x))))
		case tBF16:
			n16 = uint64(f32ToBF16(math.Float32frombits(uint32(o16)<<16) + math.Float32frombits(uint32(x&0xffff)<<16)))
		default:
			n16 = atomApply(op, tB16, o16, x, y, global)
		}
		nv := old&^(0xffff<<shift) | uint32(n16)<<shift
		if nv == old || atomic.CompareAndSwapUint32(wp, old, nv) {
			return o16
		}
	}
}

func opAtom(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a := int(in.a) * warpSize
	sz := uint64(in.t.size())
	op := int(in.aux)
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		w.checkAlign(addr, sz, in)
		b := w.mem(in.space, l, addr, sz, in)
		var y uint64
		if in.c >= 0 {
			y = r[int(in.c)*warpSize+l]
		}
		global := in.space == spGlobal || in.space == spGeneric && addr&^(windowSize-1) != SharedWindow
		old := w.atomic(b, op, in.t, r[int(in.b)*warpSize+l], y, in, global)
		if in.d >= 0 {
			if in.t.signed() {
				old = sext(old, in.t.bits())
			}
			r[int(in.d)*warpSize+l] = old & in.dmask
		}
	}
}

// opCpAsync performs cp.async synchronously: the copy is complete before
// any later wait_group could observe it.
func opCpAsync(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		dst := r[int(in.a)*warpSize+l] + in.off
		src := r[int(in.b)*warpSize+l] + uint64(in.target)
		n := uint64(in.n)
		srcN := n
		if in.c >= 0 {
			srcN = min(r[int(in.c)*warpSize+l], n)
		}
		db := w.mem(spShared, l, dst, n, in)
		if srcN > 0 {
			copy(db, w.mem(spGlobal, l, src, srcN, in))
		}
		clear(db[srcN:])
	}
}

func opClock(name string) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		ns := uint64(time.Since(w.b.l.start).Nanoseconds())
		var v uint64
		switch name {
		case "%clock":
			v = ns & 0xffffffff
		case "%clock_hi":
			v = ns >> 32 & 0xffffffff
		case "%clock64":
			v = ns
		case "%globaltimer":
			v = uint64(time.Now().UnixNano())
		case "%globaltimer_lo":
			v = uint64(time.Now().UnixNano()) & 0xffffffff
		case "%globaltimer_hi":
			v = uint64(time.Now().UnixNano()) >> 32
		}
		d := int(in.d) * warpSize
		for ; m != 0; m &= m - 1 {
			fr.regs[d+bits.TrailingZeros32(m)] = v
		}
	}
}

// opLdShared32 and opStShared32 are the 4-byte shared-memory accesses of
// tiled kernels.
func opLdShared32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a, d := int(in.a)*warpSize, int(in.d)*warpSize
	sh := w.b.shared
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		if addr&3 != 0 || addr > uint64(len(sh))-4 || len(sh) < 4 {
			w.checkAlign(addr, 4, in)
			w.sharedAt(addr, 4, in)
		}
		r[d+l] = uint64(binary.LittleEndian.Uint32(sh[addr:]))
	}
}

func opStShared32(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	a, s := int(in.a)*warpSize, int(in.b)*warpSize
	sh := w.b.shared
	for ; m != 0; m &= m - 1 {
		l := bits.TrailingZeros32(m)
		addr := r[a+l] + in.off
		if addr&3 != 0 || addr > uint64(len(sh))-4 || len(sh) < 4 {
			w.checkAlign(addr, 4, in)
			w.sharedAt(addr, 4, in)
		}
		binary.LittleEndian.PutUint32(sh[addr:], uint32(r[s+l]))
	}
}

// global4 resolves a 4-byte global access: the allocation the warp touched
// last, else a lookup. Both the load and the store fast paths use it.
func (w *warp) global4(addr uint64, in *inst) []byte {
	if addr&3 != 0 {
		w.checkAlign(addr, 4, in)
	}
	if off := addr - w.spanBase; off < uint64(len(w.spanData)) && uint64(len(w.spanData))-off >= 4 {
		return w.spanData[off : off+4]
	}
	return w.global(addr, 4, in)
}
