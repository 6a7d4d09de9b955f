package ptxgen

import (
	"context"
	"encoding/binary"
	"sort"

	"github.com/gpuctl/gpuctl/remoting/backend/emulated/ptx"
)

// emuMem is device memory for one launch: the three buffers, apart, so a
// stray access faults as it would on the device.
type emuMem struct {
	start uint64 // where the first buffer goes: 0 for 0x7f0000000000
	bases []uint64
	data  [][]byte
}

func (m *emuMem) alloc(b []byte) uint64 {
	if m.start == 0 {
		m.start = 0x7f00_0000_0000
	}
	base := m.start + uint64(len(m.bases))<<32
	m.bases = append(m.bases, base)
	m.data = append(m.data, b)
	return base
}

func (m *emuMem) Span(addr uint64) (uint64, []byte, bool) {
	i := sort.Search(len(m.bases), func(i int) bool { return m.bases[i] > addr }) - 1
	if i < 0 || addr-m.bases[i] >= uint64(len(m.data[i])) {
		return 0, nil, false
	}
	return m.bases[i], m.data[i], true
}

// RunEmulator runs p on the PTX emulator with the given number of worker
// goroutines and returns the exact and the approximate output buffers.
// A kernel that fails returns the emulator's error (a *cu.Error).
func RunEmulator(ctx context.Context, p *Program, workers int) (out, approx []byte, err error) {
	return runKernel(ctx, p, p.PTX, nil, workers)
}

// runKernel runs src, p's kernel or an instrumented form of it, on p's
// launch and buffers. A non-nil trace is passed as a fifth parameter (the
// trace buffer) and filled in place.
func runKernel(ctx context.Context, p *Program, src string, trace []byte, workers int) (out, approx []byte, err error) {
	return runKernelAt(ctx, p, src, trace, workers, 0)
}

// runKernelAt is runKernel with the buffers placed from start on.
func runKernelAt(ctx context.Context, p *Program, src string, trace []byte, workers int, start uint64) (out, approx []byte, err error) {
	mod, err := ptx.Load([]byte(src))
	if err != nil {
		return nil, nil, err
	}
	fn, err := mod.Function("k")
	if err != nil {
		return nil, nil, err
	}
	m := &emuMem{start: start}
	in := append([]byte(nil), p.In...)
	out = append([]byte(nil), p.OutInit...)
	approx = make([]byte, max(p.ApproxLen, 8))
	params := make([]byte, 40)
	binary.LittleEndian.PutUint64(params[0:], m.alloc(in))
	binary.LittleEndian.PutUint64(params[8:], m.alloc(out))
	binary.LittleEndian.PutUint64(params[16:], m.alloc(approx))
	binary.LittleEndian.PutUint32(params[24:], p.Scalar)
	params = params[:28]
	if trace != nil {
		params = params[:40]
		binary.LittleEndian.PutUint64(params[32:], m.alloc(trace))
	}
	err = fn.Run(ctx, ptx.Launch{
		Grid:   [3]uint32{p.Grid, 1, 1},
		Block:  [3]uint32{p.Block, 1, 1},
		Params: params,
	}, m, workers)
	if err != nil {
		return nil, nil, err
	}
	return out, approx[:p.ApproxLen], nil
}
