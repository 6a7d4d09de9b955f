package ptx

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// TestCPUBench measures the CPU time (the process's user time, from
// getrusage) of the bench-ptx workloads, one worker each, so that two
// builds of the interpreter can be compared on a machine shared with other
// work, where wall time mostly measures the neighbours.
// scripts/bench-ptx-compare.sh copies this file into an older tree, builds
// both and runs them in turn; it uses only what the package has had since
// its benchmarks were written. It prints one line per workload:
//
//	cpubench NAME THREAD_INSTRUCTIONS USER_NANOSECONDS
func TestCPUBench(t *testing.T) {
	if os.Getenv("GPUCTL_PTX_CPUBENCH") == "" {
		t.Skip("set GPUCTL_PTX_CPUBENCH=1 (scripts/bench-ptx-compare.sh does)")
	}
	reps := 3
	if s := os.Getenv("GPUCTL_PTX_CPUBENCH_REPS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("GPUCTL_PTX_CPUBENCH_REPS=%q: want a positive count of launches", s)
		}
		reps = n
	}
	basic := mustLoad(t, readTestdata(t, "nvcc/basic.sm_90.ptx"))
	mm := mustLoad(t, readTestdata(t, "nvcc/matmul.sm_90.ptx"))
	const n = 1 << 20
	mem := newTestMem()
	x, y := mem.alloc(4*n), mem.alloc(4*n)
	a, b, c := mem.alloc(4*256*256), mem.alloc(4*256*256), mem.alloc(4*256*256)
	saxpy := mustFunc(t, basic, "saxpy")
	iter := mustFunc(t, basic, "saxpy_iter")
	tiled := mustFunc(t, mm, "matmul_tiled")
	loads := []struct {
		name string
		f    *Function
		l    Launch
		reps int
	}{
		{"saxpy", saxpy, Launch{Grid: [3]uint32{n / 256, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: params(t, saxpy, int32(n), float32(2), x, y)}, reps},
		{"matmul", tiled, Launch{Grid: [3]uint32{16, 16, 1}, Block: [3]uint32{16, 16, 1}, Params: params(t, tiled, a, b, c, int32(256), int32(256), int32(256))}, reps},
		// The ALU loop is short: more launches give it a comparable CPU time.
		{"alu", iter, Launch{Grid: [3]uint32{64, 1, 1}, Block: [3]uint32{256, 1, 1}, Params: params(t, iter, int32(1<<14), float32(1.0001), x, y, int32(64))}, 20 * reps},
	}
	ctx := context.Background()
	for _, ld := range loads {
		// One launch first: it sizes the block state the others reuse.
		if _, err := ld.f.run(ctx, ld.l, mem, 1); err != nil {
			t.Fatal(err)
		}
		var insts uint64
		before := cpuTime(t)
		for i := 0; i < ld.reps; i++ {
			st, err := ld.f.run(ctx, ld.l, mem, 1)
			if err != nil {
				t.Fatal(err)
			}
			insts += st.ThreadInstructions
		}
		fmt.Printf("cpubench %s %d %d\n", ld.name, insts, cpuTime(t)-before)
	}
}

// cpuTime is the process's user CPU time so far, in nanoseconds: garbage
// collection on other threads included, time spent waiting for a core not.
func cpuTime(t *testing.T) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatalf("getrusage: %v", err)
	}
	return ru.Utime.Nano()
}
