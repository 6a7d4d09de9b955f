package kernels

import "slices"

// atomics.cu, warp.cu, warp_match.cu, stencil.cu, sort.cu, special.cu,
// barriers.cu, stateful.cu

func refHistShared(c *Case, m Mem) {
	in, bins := Get[uint32](m, "in"), Get[uint32](m, "bins")
	for _, v := range in[:n(c)] {
		bins[v%256]++
	}
	Put(m, "bins", bins)
}

func refHistU64(c *Case, m Mem) {
	in, bins := Get[uint32](m, "in"), Get[uint64](m, "bins")
	for _, v := range in[:n(c)] {
		bins[v&63] += uint64(v) * 0x100000001
	}
	Put(m, "bins", bins)
}

func refAtomicFloatAdd(c *Case, m Mem) {
	in, fsum, dsum := Get[float32](m, "in"), Get[float32](m, "fsum"), Get[float64](m, "dsum")
	var total float32
	for i, v := range in[:n(c)] {
		fsum[i&15] += v
		dsum[i&15] += float64(v) * 0.25
		total += v
	}
	fsum[16] += total
	Put(m, "fsum", fsum)
	Put(m, "dsum", dsum)
}

func refAtomicMinmaxBits(c *Case, m Mem) {
	in, o32, o64 := Get[int32](m, "in"), Get[int32](m, "out32"), Get[int64](m, "out64")
	for i, v := range in[:n(c)] {
		o32[0] = min(o32[0], v)
		o32[1] = max(o32[1], v)
		o32[2] = int32(min(uint32(o32[2]), uint32(v)))
		o32[3] = int32(max(uint32(o32[3]), uint32(v)))
		o32[4] &= v | int32(uint32(1)<<(i&31))
		o32[5] |= v & 0x0f0f0f0f
		o32[6] ^= v
		o32[7] -= v
		o32[8] = min(o32[8], v)
		o32[9] = max(o32[9], v)
		w := int64(v) * 1000003
		u := uint64(uint32(v))<<32 | uint64(uint32(i))
		o64[0] = min(o64[0], w)
		o64[1] = max(o64[1], w)
		o64[2] = int64(uint64(o64[2]) & (u | 1<<(i&63)))
		o64[3] = int64(uint64(o64[3]) | u)
		o64[4] = int64(uint64(o64[4]) ^ u)
	}
	Put(m, "out32", o32)
	Put(m, "out64", o64)
}

func refAtomicCasExch(c *Case, m Mem) {
	in := Get[uint32](m, "in")
	prod, sum64, fmaxv := Get[uint32](m, "prod"), Get[uint64](m, "sum64"), Get[float32](m, "fmaxv")
	slots, olds := Get[uint32](m, "slots"), Get[uint32](m, "olds")
	fslots, folds := Get[float32](m, "fslots"), Get[float32](m, "folds")
	counters := Get[uint32](m, "counters")
	for i, v := range in[:n(c)] {
		prod[0] *= v | 1
		sum64[0] += uint64(v) * uint64(i)
		if f := float32(v&0xfffff) / 1024; fmaxv[0] < f {
			fmaxv[0] = f
		}
		olds[i], slots[i] = slots[i], v
		folds[i], fslots[i] = fslots[i], float32(i)
		// atomicInc: old >= limit ? 0 : old+1; atomicDec: old == 0 || old > limit ? limit : old-1
		if counters[0] >= 99 {
			counters[0] = 0
		} else {
			counters[0]++
		}
		if counters[1] == 0 || counters[1] > 49 {
			counters[1] = 49
		} else {
			counters[1]--
		}
	}
	Put(m, "prod", prod)
	Put(m, "sum64", sum64)
	Put(m, "fmaxv", fmaxv)
	Put(m, "slots", slots)
	Put(m, "olds", olds)
	Put(m, "fslots", fslots)
	Put(m, "folds", folds)
	Put(m, "counters", counters)
}

// warpValues returns the value every thread of warp w contributes: in[i] for
// i < n, else 0. Blocks are multiples of 32 threads in these cases, so
// warps are the aligned 32-thread groups of the global index.
func warpValues[T int32 | float32](in []T, w, n int) [32]T {
	var v [32]T
	for l := range 32 {
		if i := 32*w + l; i < n {
			v[l] = in[i]
		}
	}
	return v
}

func warps(c *Case) int { return c.Threads() / 32 }

func refWarpVote(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[uint32](m, "out")
	for w := range warps(c) {
		v := warpValues(in, w, n(c))
		var ballot, odd uint32
		var any, all uint32 = 0, 1
		for l, x := range v {
			if x > 0 {
				ballot |= 1 << l
			}
			if x < -900 {
				any = 1
			}
			if !(x > -990) {
				all = 0
			}
			if l&1 == 1 && x > 0 && x&2 != 0 {
				odd |= 1 << l
			}
		}
		copy(out[5*w:], []uint32{ballot, any, all, 0xffffffff, odd})
	}
	Put(m, "out", out)
}

func refWarpShflModes(c *Case, m Mem) {
	in, out, out64 := Get[int32](m, "in"), Get[int32](m, "out"), Get[int64](m, "out64")
	// shfl returns the value of lane src of the thread's width-lane segment,
	// or the thread's own value when src leaves the segment (up/down).
	for w := range warps(c) {
		v := warpValues(in, w, n(c))
		for l := range 32 {
			i := 32*w + l
			if i >= n(c) {
				continue
			}
			up := func(d, width int) int32 {
				if l%width >= d {
					return v[l-d]
				}
				return v[l]
			}
			down := func(d, width int) int32 {
				if l%width+d < width {
					return v[l+d]
				}
				return v[l]
			}
			idx := func(src, width int) int32 { return v[l/width*width+src%width] }
			out[7*i+0] = up(3, 32)
			out[7*i+1] = down(5, 32)
			out[7*i+2] = v[l^7]
			out[7*i+3] = idx((l*7+3)&31, 32)
			out[7*i+4] = idx(l*3, 16)
			out[7*i+5] = down(2, 8)
			out[7*i+6] = up(1, 4)
			src := l ^ 3
			out64[i] = int64(v[src])<<20 | int64(src)
		}
	}
	Put(m, "out", out)
	Put(m, "out64", out64)
}

func refWarpReduceXor(c *Case, m Mem) {
	in, out := Get[float32](m, "in"), Get[float32](m, "out")
	for w := range warps(c) {
		v := warpValues(in, w, n(c))
		for mask := 16; mask > 0; mask >>= 1 {
			var next [32]float32
			for l := range 32 {
				next[l] = v[l] + v[l^mask]
			}
			v = next
		}
		out[2*w], out[2*w+1] = v[0], v[31]
	}
	Put(m, "out", out)
}

func refWarpMatch(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[uint32](m, "out")
	for w := range warps(c) {
		v := warpValues(in, w, n(c))
		allSame := true
		for l := range 32 {
			if v[l]&1 != v[0]&1 {
				allSame = false
			}
		}
		for l := range 32 {
			i := 32*w + l
			if i >= n(c) {
				continue
			}
			var anyMask uint32
			for k := range 32 {
				if v[k]&7 == v[l]&7 {
					anyMask |= 1 << k
				}
			}
			out[4*i] = anyMask
			out[4*i+1], out[4*i+2] = 0, 0
			if allSame {
				out[4*i+1], out[4*i+2] = 0xffffffff, 1
			}
			out[4*i+3] = 0xffffffff ^ 1
		}
	}
	Put(m, "out", out)
}

func clampInt(v, lo, hi int) int { return max(lo, min(v, hi)) }

func refStencil1D(c *Case, m Mem) {
	in, out := Get[float32](m, "in"), Get[float32](m, "out")
	w := moduleGlobal[float32](c, m, "c_weights")
	nn := n(c)
	for g := range nn {
		var acc float32
		for k := -3; k <= 3; k++ {
			acc = fma32(w[k+3], in[clampInt(g+k, 0, nn-1)], acc)
		}
		out[g] = acc
	}
	Put(m, "out", out)
}

func refStencil2D(c *Case, m Mem) {
	in, out := Get[float32](m, "in"), Get[float32](m, "out")
	W, H := int(c.Int("w")), int(c.Int("h"))
	center, side := c.F32("center"), c.F32("side")
	at := func(x, y int) float32 { return in[clampInt(y, 0, H-1)*W+clampInt(x, 0, W-1)] }
	for y := range H {
		for x := range W {
			nb := at(x, y-1) + at(x, y+1) + at(x-1, y) + at(x+1, y)
			// Inputs are small integers and the weights dyadic, so every
			// rounding order gives this same exact value.
			out[y*W+x] = fma32(center, at(x, y), side*nb)
		}
	}
	Put(m, "out", out)
}

func refBitonicU32(c *Case, m Mem) {
	d := Get[uint32](m, "data")
	seg, nn := int(c.Block[0]), n(c)
	for base := 0; base < nn; base += seg {
		slices.Sort(d[base:min(base+seg, nn)])
	}
	Put(m, "data", d)
}

func refBitonicF32(c *Case, m Mem) {
	d := Get[float32](m, "data")
	seg, nn := 2*int(c.Block[0]), n(c)
	for base := 0; base < nn; base += seg {
		slices.Sort(d[base:min(base+seg, nn)])
	}
	Put(m, "data", d)
}

func refSpecialRegs(c *Case, m Mem) {
	out := Get[uint32](m, "out")
	g, b := c.Grid, c.Block
	per := b[0] * b[1] * b[2]
	for bz := range g[2] {
		for by := range g[1] {
			for bx := range g[0] {
				blin := bx + g[0]*(by+g[1]*bz)
				for tz := range b[2] {
					for ty := range b[1] {
						for tx := range b[0] {
							tlin := tx + b[0]*(ty+b[1]*tz)
							o := out[(blin*per+tlin)*14:]
							copy(o, []uint32{tx, ty, tz, b[0], b[1], b[2], bx, by, bz, g[0], g[1], g[2], tlin & 31, 1})
						}
					}
				}
			}
		}
	}
	Put(m, "out", out)
}

func refNamedBarrier(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[int32](m, "out")
	for b := range int(c.Grid[0]) {
		base := 64 * b
		for k := range 64 {
			out[base+k] = 3*in[base+k] + 3*in[base+63-k]
		}
	}
	Put(m, "out", out)
}

func mix32(x uint32) uint32 {
	x ^= x >> 16
	x *= 0x7feb352d
	x ^= x >> 15
	x *= 0x846ca68b
	x ^= x >> 16
	return x
}

func refStateInit(c *Case, m Mem) {
	s := Get[uint32](m, "s")
	seed := uint32(c.Int("seed"))
	for i := range int(c.Int("n")) {
		s[i] = mix32(uint32(i) ^ seed)
	}
	Put(m, "s", s)
}

func refStateStep(c *Case, m Mem) {
	s := Get[uint32](m, "s")
	iter := uint32(c.Int("iter"))
	for i := range int(c.Int("n")) {
		x := s[i]
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		s[i] = x + iter*0x9e3779b9 + uint32(i)
	}
	Put(m, "s", s)
}

func refStateChecksum(c *Case, m Mem) {
	s, out := Get[uint32](m, "s"), Get[uint64](m, "out")
	for i := range int(c.Int("n")) {
		out[0] += uint64(s[i]) * (2*uint64(i) + 1)
	}
	Put(m, "out", out)
}
