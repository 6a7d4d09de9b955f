package hashkernel_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/hashkernel"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
)

// TestKernelMatchesHost runs the kernel on the emulated device's PTX
// interpreter over regions whose sizes exercise every path (strided
// words, leftover words, a tail of bytes, a short last block) and
// compares each block's hash with devmem.HashBlock's.
func TestKernelMatchesHost(t *testing.T) {
	ctx := context.Background()
	d := emulated.New(emulated.Config{MemBytes: 64 << 20, Cores: 2})
	defer d.Close()
	c, err := d.PrimaryCtxRetain(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	mod, err := d.ModuleLoad(ctx, c, hashkernel.PTX)
	if err != nil {
		t.Fatalf("load the hash kernel: %v", err)
	}
	fn, params, err := d.ModuleGetFunction(ctx, c, mod, hashkernel.Entry)
	if err != nil {
		t.Fatal(err)
	}
	if len(params) != 6 || params[5].Offset != 40 {
		t.Fatalf("kernel parameters %+v, want six u64s", params)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct {
		name        string
		size, block uint64
		fill        string
	}{
		{"one block of whole strides", 4096, 4096, "random"},
		{"blocks of one stride", 2048, 256, "random"},
		{"leftover words", 8 * 45, 8 * 45, "random"},
		{"tail bytes", 8*45 + 5, 512, "random"},
		{"one byte", 1, 8, "random"},
		{"tail after whole strides", 256*3 + 7, 256, "random"},
		{"short last block", 1<<20 + 3000, 1 << 18, "random"},
		{"zeros", 3 << 18, 1 << 18, "zero"},
		{"1 MiB blocks", 2<<20 + 8, devmem.DefaultBlock, "random"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := make([]byte, tc.size)
			if tc.fill == "random" {
				for i := range data {
					data[i] = byte(rng.Uint32())
				}
			}
			seed := rng.Uint64() | 1
			l := hashkernel.Launch{Size: tc.size, Block: tc.block, Seed: seed}
			src, err := d.MemAlloc(ctx, c, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			out, err := d.MemAlloc(ctx, c, 8*l.Blocks())
			if err != nil {
				t.Fatal(err)
			}
			defer d.MemFree(ctx, c, src)
			defer d.MemFree(ctx, c, out)
			if err := d.MemcpyHtoD(ctx, c, src, bytes.NewReader(data), tc.size, 0); err != nil {
				t.Fatal(err)
			}
			l.Base, l.Out = uint64(src), uint64(out)
			if err := l.Check(); err != nil {
				t.Fatal(err)
			}
			cfg := backend.LaunchConfig{Grid: [3]uint32{uint32(l.Grid()), 1, 1}, Block: [3]uint32{hashkernel.Threads, 1, 1}, Params: l.Params()}
			if err := d.Launch(ctx, c, fn, cfg); err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := d.MemcpyDtoH(ctx, c, &got, out, 8*l.Blocks(), 0); err != nil {
				t.Fatal(err)
			}
			for i := range l.Blocks() {
				lo := i * tc.block
				want := devmem.HashBlock(seed, data[lo:min(lo+tc.block, tc.size)])
				if g := binary.LittleEndian.Uint64(got.Bytes()[8*i:]); g != want {
					t.Errorf("block %d: kernel %#x, host %#x", i, g, want)
				}
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, l := range []hashkernel.Launch{
		{Base: 0x1000, Size: 100, Block: 0},
		{Base: 0x1000, Size: 100, Block: 12},
		{Base: 0x1004, Size: 100, Block: 8},
		{Base: 0x1000, Size: 0, Block: 8},
	} {
		if err := l.Check(); err == nil {
			t.Errorf("Check(%+v) accepted it", l)
		}
	}
}
