package ptx

import (
	"context"
	"runtime"
	"testing"
)

// Benchmarks of the interpreter on nvcc 13 output (testdata/nvcc). Each
// reports thread-instructions per second ("Minst/s", all workers
// together) and per worker ("Minst/s/core").

func benchLaunch(b *testing.B, f *Function, l Launch, mem Memory, workers int) {
	b.Helper()
	ctx := context.Background()
	var total uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st, err := f.run(ctx, l, mem, workers)
		if err != nil {
			b.Fatal(err)
		}
		total += st.ThreadInstructions
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(total)/sec/1e6, "Minst/s")
	b.ReportMetric(float64(total)/sec/1e6/float64(workers), "Minst/s/core")
}

func workerCounts() []int {
	n := runtime.GOMAXPROCS(0)
	if n == 1 {
		return []int{1}
	}
	return []int{1, n}
}

func BenchmarkSaxpy1M(b *testing.B) {
	m := mustLoad(b, readTestdata(b, "nvcc/basic.sm_90.ptx"))
	f := mustFunc(b, m, "saxpy")
	const n = 1 << 20
	mem := newTestMem()
	x, y := mem.alloc(4*n), mem.alloc(4*n)
	l := Launch{Grid: [3]uint32{n / 256, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: params(b, f, int32(n), float32(2), x, y)}
	for _, w := range workerCounts() {
		b.Run(benchName("workers", w), func(b *testing.B) { benchLaunch(b, f, l, mem, w) })
	}
}

func BenchmarkMatmulTiled256(b *testing.B) {
	m := mustLoad(b, readTestdata(b, "nvcc/matmul.sm_90.ptx"))
	f := mustFunc(b, m, "matmul_tiled")
	const n = 256
	mem := newTestMem()
	a, bb, c := mem.alloc(4*n*n), mem.alloc(4*n*n), mem.alloc(4*n*n)
	l := Launch{Grid: [3]uint32{n / 16, n / 16, 1}, Block: [3]uint32{16, 16, 1}, Params: params(b, f, a, bb, c, int32(n), int32(n), int32(n))}
	for _, w := range workerCounts() {
		b.Run(benchName("workers", w), func(b *testing.B) { benchLaunch(b, f, l, mem, w) })
	}
}

// BenchmarkALU is arithmetic-bound: saxpy_iter's dependent loop.
func BenchmarkALU(b *testing.B) {
	m := mustLoad(b, readTestdata(b, "nvcc/basic.sm_90.ptx"))
	f := mustFunc(b, m, "saxpy_iter")
	const n = 1 << 14
	mem := newTestMem()
	x, y := mem.alloc(4*n), mem.alloc(4*n)
	l := Launch{Grid: [3]uint32{n / 256, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: params(b, f, int32(n), float32(1.0001), x, y, int32(64))}
	for _, w := range workerCounts() {
		b.Run(benchName("workers", w), func(b *testing.B) { benchLaunch(b, f, l, mem, w) })
	}
}

func benchName(k string, v int) string {
	return k + "=" + string(rune('0'+v/10%10)) + string(rune('0'+v%10))
}

// BenchmarkLaunchEmpty is the fixed cost of one launch of an empty kernel.
func BenchmarkLaunchEmpty(b *testing.B) {
	m := mustLoad(b, readTestdata(b, "nvcc/basic.sm_90.ptx"))
	f := mustFunc(b, m, "empty")
	mem := newTestMem()
	l := Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1}}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		if err := f.Run(ctx, l, mem, 2); err != nil {
			b.Fatal(err)
		}
	}
}
