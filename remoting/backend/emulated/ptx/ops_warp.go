package ptx

import (
	"fmt"
	"math/bits"

	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Warp-synchronous operations. The lanes in m are the lanes executing the
// instruction together, which is the set the hardware would converge.

const (
	shflUp = iota
	shflDown
	shflBfly
	shflIdx
)

func opShfl(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	var src [warpSize]uint64
	copy(src[:], r[int(in.a)*warpSize:int(in.a)*warpSize+warpSize])
	for mm := m; mm != 0; mm &= mm - 1 {
		l := bits.TrailingZeros32(mm)
		lane := int32(l)
		bval := int32(r[int(in.b)*warpSize+l] & 0x1f)
		cv := r[int(in.c)*warpSize+l]
		clamp := int32(cv & 0x1f)
		seg := int32(cv >> 8 & 0x1f)
		maxLane := lane&seg | clamp&^seg
		minLane := lane & seg
		var j int32
		var ok bool
		switch in.aux {
		case shflUp:
			j = lane - bval
			ok = j >= maxLane
		case shflDown:
			j = lane + bval
			ok = j <= maxLane
		case shflBfly:
			j = lane ^ bval
			ok = j <= maxLane
		default:
			j = minLane | bval&^seg
			ok = j <= maxLane
		}
		if !ok {
			j = lane
		}
		r[int(in.d)*warpSize+l] = src[j]
		if in.d2 >= 0 {
			r[int(in.d2)*warpSize+l] = b2u(ok)
		}
	}
}

const (
	voteAll = iota
	voteAny
	voteUni
	voteBallot
)

func memberMask(fr *frame, in *inst, m uint32) uint32 {
	if in.e < 0 {
		return m
	}
	return m & uint32(fr.regs[int(in.e)*warpSize+bits.TrailingZeros32(m)])
}

func opVote(w *warp, fr *frame, in *inst, m uint32) {
	r := fr.regs
	mm := memberMask(fr, in, m)
	var ballot uint32
	for x := mm; x != 0; x &= x - 1 {
		l := bits.TrailingZeros32(x)
		if r[int(in.a)*warpSize+l] != 0 {
			ballot |= 1 << l
		}
	}
	var v uint64
	switch in.aux {
	case voteAll:
		v = b2u(ballot == mm)
	case voteAny:
		v = b2u(ballot != 0)
	case voteUni:
		v = b2u(ballot == 0 || ballot == mm)
	default:
		v = uint64(ballot)
	}
	for x := m; x != 0; x &= x - 1 {
		r[int(in.d)*warpSize+bits.TrailingZeros32(x)] = v
	}
}

func opActivemask(w *warp, fr *frame, in *inst, m uint32) {
	for x := m; x != 0; x &= x - 1 {
		fr.regs[int(in.d)*warpSize+bits.TrailingZeros32(x)] = uint64(m)
	}
}

func opMatch(all bool, t ptype) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		mm := memberMask(fr, in, m)
		a := int(in.a) * warpSize
		mask := t.mask()
		for x := m; x != 0; x &= x - 1 {
			l := bits.TrailingZeros32(x)
			var same uint32
			for y := mm; y != 0; y &= y - 1 {
				k := bits.TrailingZeros32(y)
				if r[a+k]&mask == r[a+l]&mask {
					same |= 1 << k
				}
			}
			if all {
				ok := same == mm
				if !ok {
					same = 0
				}
				if in.d2 >= 0 {
					r[int(in.d2)*warpSize+l] = b2u(ok)
				}
			}
			r[int(in.d)*warpSize+l] = uint64(same)
		}
	}
}

func opRedux(op string, t ptype) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		r := fr.regs
		mm := memberMask(fr, in, m)
		a := int(in.a) * warpSize
		var acc uint64
		first := true
		for y := mm; y != 0; y &= y - 1 {
			v := t.ext(r[a+bits.TrailingZeros32(y)])
			if first {
				acc, first = v, false
				continue
			}
			switch op {
			case "add":
				acc += v
			case "and":
				acc &= v
			case "or":
				acc |= v
			case "xor":
				acc ^= v
			case "min":
				if t.signed() && int64(v) < int64(acc) || !t.signed() && v < acc {
					acc = v
				}
			case "max":
				if t.signed() && int64(v) > int64(acc) || !t.signed() && v > acc {
					acc = v
				}
			}
		}
		acc &= 0xffffffff
		for x := m; x != 0; x &= x - 1 {
			r[int(in.d)*warpSize+bits.TrailingZeros32(x)] = acc
		}
	}
}

func opElect(w *warp, fr *frame, in *inst, m uint32) {
	mm := memberMask(fr, in, m)
	leader := bits.TrailingZeros32(mm)
	for x := m; x != 0; x &= x - 1 {
		l := bits.TrailingZeros32(x)
		fr.regs[int(in.d)*warpSize+l] = uint64(leader)
		if in.d2 >= 0 {
			fr.regs[int(in.d2)*warpSize+l] = b2u(l == leader)
		}
	}
}

func opNop(w *warp, fr *frame, in *inst, m uint32) {}

func opTrap(w *warp, fr *frame, in *inst, m uint32) {
	w.fail(cu.ErrorLaunchFailed, in, "trap instruction executed")
}

func opUnsupported(what string) execFn {
	return func(w *warp, fr *frame, in *inst, m uint32) {
		w.fail(cu.ErrorNotSupported, in, "instruction `%s` is not supported by the emulator (%s)", in.src.text, what)
	}
}

// builtins are the device-runtime functions nvcc calls without a body.
var builtins = map[string]func(w *warp, fr *frame, in *inst, em uint32){
	// printf: formatted to the launch's Output (discarded without one).
	"vprintf": printfBuiltin,
	// assert(): fails the launch with the assertion's text.
	"__assertfail": func(w *warp, fr *frame, in *inst, em uint32) {
		ci := in.call
		l := bits.TrailingZeros32(em)
		ps := uint32(fr.fn.paramSize)
		arg := func(i int) uint64 {
			if i >= len(ci.args) {
				return 0
			}
			a := ci.args[i]
			return loadVal(fr.params[uint32(l)*ps+a.Offset:uint32(l)*ps+a.Offset+min(a.Size, 8)], tU64, ^uint64(0))
		}
		msg := w.cstring(l, arg(0))
		file := w.cstring(l, arg(1))
		w.fail(cu.ErrorAssert, in, "device assertion `%s` failed at %s:%d in thread (%d,%d,%d) of block (%d,%d,%d)",
			msg, file, uint32(arg(2)),
			w.special[spTidX][l], w.special[spTidY][l], w.special[spTidZ][l],
			w.b.ctaid[0], w.b.ctaid[1], w.b.ctaid[2])
	},
}

// cstring reads a NUL-terminated string at a generic address, best effort.
func (w *warp) cstring(lane int, addr uint64) string { return w.cstringN(lane, addr, 256) }

// cstringN reads at most limit bytes of a NUL-terminated string.
func (w *warp) cstringN(lane int, addr uint64, limit uint64) (s string) {
	defer func() {
		if recover() != nil {
			s = fmt.Sprintf("<string at %#x>", addr)
		}
	}()
	var out []byte
	for i := uint64(0); i < limit; i++ {
		b := w.generic(lane, addr+i, 1, nil)[0]
		if b == 0 {
			break
		}
		out = append(out, b)
	}
	return string(out)
}
