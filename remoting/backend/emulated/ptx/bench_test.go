package ptx

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"
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

// TestBenchReport prints the emulator's benchmark table; `make bench-ptx`
// runs it with GPUCTL_PTX_BENCH=1.
func TestBenchReport(t *testing.T) {
	if os.Getenv("GPUCTL_PTX_BENCH") == "" {
		t.Skip("set GPUCTL_PTX_BENCH=1 to run the benchmark report")
	}
	type load struct {
		name string
		f    *Function
		l    Launch
		mem  Memory
	}
	basic := mustLoad(t, readTestdata(t, "nvcc/basic.sm_90.ptx"))
	mm := mustLoad(t, readTestdata(t, "nvcc/matmul.sm_90.ptx"))
	const n = 1 << 20
	mem := newTestMem()
	x, y := mem.alloc(4*n), mem.alloc(4*n)
	saxpy := mustFunc(t, basic, "saxpy")
	iter := mustFunc(t, basic, "saxpy_iter")
	tiled := mustFunc(t, mm, "matmul_tiled")
	a, b, c := mem.alloc(4*256*256), mem.alloc(4*256*256), mem.alloc(4*256*256)
	loads := []load{
		{"saxpy, 1M elements", saxpy, Launch{Grid: [3]uint32{n / 256, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: params(t, saxpy, int32(n), float32(2), x, y)}, mem},
		{"tiled matmul 256x256", tiled, Launch{Grid: [3]uint32{16, 16, 1}, Block: [3]uint32{16, 16, 1}, Params: params(t, tiled, a, b, c, int32(256), int32(256), int32(256))}, mem},
		{"ALU loop (saxpy_iter, 64 iterations)", iter, Launch{Grid: [3]uint32{64, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: params(t, iter, int32(1<<14), float32(1.0001), x, y, int32(64))}, mem},
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n| workload | workers | time | thread-instructions | Minst/s | Minst/s per core |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, ld := range loads {
		for _, w := range workerCounts() {
			best := time.Duration(math.MaxInt64)
			var st runStats
			for i := 0; i < 3; i++ {
				start := time.Now()
				s, err := ld.f.run(context.Background(), ld.l, ld.mem, w)
				if err != nil {
					t.Fatal(err)
				}
				if d := time.Since(start); d < best {
					best, st = d, s
				}
			}
			rate := float64(st.ThreadInstructions) / best.Seconds() / 1e6
			fmt.Fprintf(&sb, "| %s | %d | %.1f ms | %d | %.0f | %.0f |\n", ld.name, w, float64(best.Microseconds())/1000, st.ThreadInstructions, rate, rate/float64(w))
		}
	}
	t.Log(sb.String())
}
