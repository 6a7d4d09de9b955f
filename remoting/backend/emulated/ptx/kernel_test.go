package ptx

import (
	"context"
	"math"
	"os"
	"testing"
)

func readTestdata(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSaxpy(t *testing.T) {
	m := mustLoad(t, readTestdata(t, "saxpy.ptx"))
	f := mustFunc(t, m, "saxpy")
	for _, n := range []int{1, 31, 32, 33, 1000, 4096} {
		mem := newTestMem()
		x, y := mem.alloc(4*n), mem.alloc(4*n)
		xs, ys := make([]float32, n), make([]float32, n)
		for i := range xs {
			xs[i] = float32(i) * 0.5
			ys[i] = float32(n-i) * 0.25
		}
		mem.putF32(x, xs)
		mem.putF32(y, ys)
		a := float32(1.75)
		err := f.Run(context.Background(), Launch{Grid: [3]uint32{uint32((n + 127) / 128), 1, 1}, Block: [3]uint32{128, 1, 1},
			Params: params(t, f, int32(n), a, x, y)}, mem, 2)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		got := mem.f32s(y, n)
		for i := range got {
			want := float32(math.FMA(float64(xs[i]), float64(a), float64(ys[i])))
			if got[i] != want {
				t.Fatalf("n=%d: y[%d] = %v, want %v", n, i, got[i], want)
			}
		}
	}
}
