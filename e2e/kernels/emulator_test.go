package kernels_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"testing"

	"github.com/gpuctl/gpuctl/e2e/kernels"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated/ptx"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// flatMem is device memory for the emulator: allocations at increasing
// addresses with gaps between them, so that a stray access faults.
type flatMem struct {
	bases []uint64
	spans [][]byte
	next  uint64
}

func (m *flatMem) alloc(n int) uint64 {
	if m.next == 0 {
		m.next = 1 << 32
	}
	base := m.next
	m.bases = append(m.bases, base)
	m.spans = append(m.spans, make([]byte, n))
	m.next += (uint64(n) + 1<<20) &^ 0xffff
	return base
}

func (m *flatMem) Span(addr uint64) (uint64, []byte, bool) {
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] > addr }) - 1
	if i < 0 || addr >= m.bases[i]+uint64(len(m.spans[i])) {
		return 0, nil, false
	}
	return m.bases[i], m.spans[i], true
}

func (m *flatMem) bytes(addr uint64) []byte {
	_, b, _ := m.Span(addr)
	return b
}

// runOnEmulator runs one case the way kernelrun does and writes its outputs
// (or its error) under dir.
func runOnEmulator(ctx context.Context, c *kernels.Case, ptxDir, target, dir string) error {
	src, err := os.ReadFile(c.PTXPath(ptxDir, target))
	if err != nil {
		return err
	}
	mod, err := ptx.Load(src)
	if err != nil {
		return err
	}
	mem := &flatMem{}
	globals := map[string]uint64{}
	for _, g := range mod.Globals() {
		addr := mem.alloc(int(g.Size))
		copy(mem.bytes(addr), g.Init)
		if err := mod.BindGlobal(g.Name, addr); err != nil {
			return err
		}
		globals[g.Name] = addr
	}
	fn, err := mod.Function(c.Kernel)
	if err != nil {
		return err
	}
	in, err := c.Inputs()
	if err != nil {
		return err
	}
	addrs := map[string]uint64{}
	for _, g := range c.Globals {
		addr, size, err := mod.GlobalAddr(g.Name)
		if err != nil {
			return err
		}
		if size != uint64(g.Bytes()) {
			return fmt.Errorf("global %s has %d bytes, the case declares %d", g.Name, size, g.Bytes())
		}
		addrs[g.Name] = addr
		if v, ok := in[g.Name]; ok {
			copy(mem.bytes(addr), v)
		}
	}
	layout := fn.Params()
	if len(layout) != len(c.Params) {
		return fmt.Errorf("kernel %s takes %d parameters, the case gives %d", c.Kernel, len(layout), len(c.Params))
	}
	var params []byte
	for i, p := range c.Params {
		value := p.Value()
		if p.Buffer != nil {
			addr := mem.alloc(p.Buffer.Bytes())
			copy(mem.bytes(addr), in[p.Name])
			addrs[p.Name] = addr
			value = binary.LittleEndian.AppendUint64(nil, addr)
		}
		l := layout[i]
		if int(l.Size) != len(value) {
			return fmt.Errorf("parameter %d (%s) is %d bytes in the kernel, %d in the case", i, p.Name, l.Size, len(value))
		}
		for len(params) < int(l.Offset+l.Size) {
			params = append(params, 0)
		}
		copy(params[l.Offset:], value)
	}
	for range c.Launches {
		err = fn.Run(ctx, ptx.Launch{Grid: c.Grid, Block: c.Block, SharedBytes: c.Shared, Params: params}, mem, runtime.GOMAXPROCS(0))
		if err != nil {
			break
		}
	}
	if c.Expect != "" {
		var ce *cu.Error
		if !errors.As(err, &ce) {
			return fmt.Errorf("launch returned %v, want %s", err, c.Expect)
		}
		return os.WriteFile(kernels.ErrorPath(dir, c), []byte(ce.Code.Name()+"\n"), 0o644)
	}
	if err != nil {
		return err
	}
	for _, ck := range c.Checks {
		if err := os.WriteFile(kernels.OutputPath(dir, c, ck.Name), mem.bytes(addrs[ck.Name]), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// TestEmulatorCorpus runs every case on the PTX emulator, for both targets,
// and checks the outputs against the CPU references.
func TestEmulatorCorpus(t *testing.T) {
	cases, err := kernels.Load("cases")
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"sm_75", "sm_90"} {
		t.Run(target, func(t *testing.T) {
			dir := t.TempDir()
			var run []kernels.Case
			for i := range cases {
				c := &cases[i]
				if c.HasTag("bench") && testing.Short() {
					continue
				}
				// A module added since the PTX was last built cannot run
				// yet; the GPU suite compiles it fresh, CI waits for the
				// committed PTX (e2e/kernels/build-ptx.sh).
				if _, err := os.Stat(c.PTXPath("ptx", target)); errors.Is(err, os.ErrNotExist) {
					t.Logf("%s: no %s yet; run e2e/kernels/build-ptx.sh on a machine with nvcc and commit ptx/", c.Name, c.PTXPath("ptx", target))
					continue
				}
				if err := runOnEmulator(t.Context(), c, "ptx", target, dir); err != nil {
					t.Errorf("%s: %v", c.Name, err)
					continue
				}
				run = append(run, *c)
			}
			if err := kernels.CheckDir(run, dir); err != nil {
				t.Error(err)
			}
			// With a recorded GPU run for this target, the emulator must
			// also equal the hardware.
			golden := filepath.Join("golden", target)
			if _, err := os.Stat(filepath.Join(golden, "MANIFEST")); err != nil {
				t.Logf("no GPU record in %s; compared with the CPU references only", golden)
				return
			}
			rep, err := kernels.CheckGolden(run, dir, golden)
			if err != nil {
				t.Error(err)
			}
			t.Logf("emulator against the GPU (%s): %s", target, rep)
		})
	}
}
