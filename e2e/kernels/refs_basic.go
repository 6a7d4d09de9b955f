package kernels

import "math"

// basic.cu, reduce.cu, scan.cu, matmul.cu

func refVecadd(c *Case, m Mem) {
	a, b, out := Get[float32](m, "a"), Get[float32](m, "b"), Get[float32](m, "c")
	for i := range n(c) {
		out[i] = a[i] + b[i]
	}
	Put(m, "c", out)
}

func refScaleOffset(c *Case, m Mem) {
	x := Get[float32](m, "x")
	s, o := c.F32("s"), c.F32("o")
	for i := range n(c) {
		x[i] = fma32(x[i], s, o)
	}
	Put(m, "x", x)
}

func refSaxpy(c *Case, m Mem) {
	x, y := Get[float32](m, "x"), Get[float32](m, "y")
	a := c.F32("a")
	for i := range n(c) {
		y[i] = fma32(a, x[i], y[i])
	}
	Put(m, "y", y)
}

func refSaxpyIter(c *Case, m Mem) {
	x, y := Get[float32](m, "x"), Get[float32](m, "y")
	a := c.F32("a")
	iters := int(c.Int("iters"))
	for i := range n(c) {
		v := y[i]
		for range iters {
			v = fma32(a, v, x[i])
		}
		y[i] = v
	}
	Put(m, "y", y)
}

// refReduceSum: out[0] += the int32 (wrapping) sum of in[0:n].
func refReduceSum(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[int32](m, "out")
	for _, v := range in[:n(c)] {
		out[0] += v
	}
	Put(m, "out", out)
}

// refReduceSumDyn: partial[b] = sum of in[2*B*b : 2*B*(b+1)], clipped to n.
func refReduceSumDyn(c *Case, m Mem) {
	in, partial := Get[uint32](m, "in"), Get[uint32](m, "partial")
	seg := 2 * int(c.Block[0])
	for b := range int(c.Grid[0]) {
		var s uint32
		for i := b * seg; i < (b+1)*seg && i < n(c); i++ {
			s += in[i]
		}
		partial[b] = s
	}
	Put(m, "partial", partial)
}

// refReduceLastblock: block b's grid-stride partial sum, the total in
// result[0], and the ticket counter back at zero.
func refReduceLastblock(c *Case, m Mem) {
	in, partial, result := Get[uint32](m, "in"), Get[uint32](m, "partial"), Get[uint32](m, "result")
	B, G := int(c.Block[0]), int(c.Grid[0])
	for b := range G {
		partial[b] = 0
	}
	var total uint32
	for i, v := range in[:n(c)] {
		partial[(i/B)%G] += v
		total += v
	}
	result[0] = total
	Put(m, "partial", partial)
	Put(m, "result", result)
	Put(m, "g_blocks_done", []uint32{0})
}

func refBlockSyncVotes(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[int32](m, "out")
	B := int(c.Block[0])
	for b := range int(c.Grid[0]) {
		var cnt, all, any int32 = 0, 1, 0
		for t := range B {
			var v int32
			if i := b*B + t; i < n(c) {
				v = in[i]
			}
			if v > 7 {
				cnt++
			}
			if v == 0 {
				all = 0
			}
			if v > 13 {
				any = 1
			}
		}
		out[3*b], out[3*b+1], out[3*b+2] = cnt, all, any
	}
	Put(m, "out", out)
}

// scanSegments applies an inclusive or exclusive scan to each seg-element
// segment of in[0:n].
func scanSegments[T int32 | uint32](in, out []T, n, seg int, inclusive bool) {
	for base := 0; base < n; base += seg {
		var acc T
		for i := base; i < base+seg && i < n; i++ {
			if inclusive {
				acc += in[i]
				out[i] = acc
			} else {
				out[i] = acc
				acc += in[i]
			}
		}
	}
}

func refScanInclusiveBlock(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[int32](m, "out")
	scanSegments(in, out, n(c), int(c.Block[0]), true)
	Put(m, "out", out)
}

func refScanExclusiveBlelloch(c *Case, m Mem) {
	in, out := Get[uint32](m, "in"), Get[uint32](m, "out")
	scanSegments(in, out, n(c), 2*int(c.Block[0]), false)
	Put(m, "out", out)
}

func refScanWarpInclusive(c *Case, m Mem) {
	in, out := Get[int32](m, "in"), Get[int32](m, "out")
	scanSegments(in, out, n(c), 32, true)
	Put(m, "out", out)
}

// refMatmulF32: C = A*B, each element accumulated k = 0..K-1 with one fma per
// step, as the tiled kernels do.
func refMatmulF32(c *Case, m Mem) {
	A, B, C := Get[float32](m, "A"), Get[float32](m, "B"), Get[float32](m, "C")
	M, N, K := int(c.Int("M")), int(c.Int("N")), int(c.Int("K"))
	for r := range M {
		for col := range N {
			var acc float32
			for k := range K {
				acc = fma32(A[r*K+k], B[k*N+col], acc)
			}
			C[r*N+col] = acc
		}
	}
	Put(m, "C", C)
}

func refMatmulF64(c *Case, m Mem) {
	A, B, C := Get[float64](m, "A"), Get[float64](m, "B"), Get[float64](m, "C")
	M, N, K := int(c.Int("M")), int(c.Int("N")), int(c.Int("K"))
	for r := range M {
		for col := range N {
			var acc float64
			for k := range K {
				acc = math.FMA(A[r*K+k], B[k*N+col], acc)
			}
			C[r*N+col] = acc
		}
	}
	Put(m, "C", C)
}
