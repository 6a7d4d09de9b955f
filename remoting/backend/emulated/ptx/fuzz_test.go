package ptx

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzLoad feeds hostile images to Load and runs whatever loads. Any
// outcome but a Go panic (or an internal fault converted from one) is
// acceptable: errors must be *cu.Error values.
func FuzzLoad(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.ptx")
	nvcc, _ := filepath.Glob("testdata/nvcc/*.ptx")
	for _, name := range append(files, nvcc...) {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add(fatbin(fatbinEntry(fatbinKindPTX, 80, lz4Literals([]byte(".version 8.0\n.target sm_80\n.address_size 64\n.visible .entry k(){ret;}")), fatbinFlagLZ4, 62)))
	f.Fuzz(func(t *testing.T, image []byte) {
		m, err := Load(image)
		if err != nil {
			if codeOf(err) == "CUDA_ERROR_UNKNOWN" {
				t.Fatalf("error without a CUDA result: %v", err)
			}
			return
		}
		for _, name := range m.Kernels() {
			fn, err := m.Function(name)
			if err != nil {
				t.Fatal(err)
			}
			mem := newTestMem()
			for _, g := range m.Globals() {
				if g.Size > 1<<20 {
					return
				}
				addr := mem.alloc(int(g.Size))
				copy(mem.bytes(addr), g.Init)
				if err := m.BindGlobal(g.Name, addr); err != nil {
					t.Fatal(err)
				}
			}
			// Every pointer parameter points at a small buffer.
			params := make([]byte, fn.paramBytes())
			buf := mem.alloc(4096)
			for _, p := range fn.Params() {
				if p.Size == 8 {
					for i := 0; i < 8; i++ {
						params[p.Offset+uint32(i)] = byte(buf >> (8 * i))
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
			err = fn.Run(ctx, Launch{Grid: [3]uint32{2, 1, 1}, Block: [3]uint32{min(uint32(fn.maxThreads()), 64), 1, 1}, Params: params, SharedBytes: 256}, mem, 2)
			cancel()
			if err != nil && strings.Contains(err.Error(), "emulator fault") {
				t.Fatalf("kernel %s: %v", name, err)
			}
		}
	})
}
