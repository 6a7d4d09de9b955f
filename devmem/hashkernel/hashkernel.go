// Package hashkernel is devmem's block hash as a GPU kernel: PTX text that
// a backend loads into a context and launches over a region of device
// memory, so that a checkpoint learns which blocks changed without
// copying them. The kernel computes exactly devmem.HashBlock; the test
// holds it to that on the emulated device, and the cuda backend's GPU
// test on a real one.
package hashkernel

import (
	_ "embed"
	"encoding/binary"
	"fmt"
)

// PTX is the module's text, NUL-terminated as cuModuleLoadData wants it.
var PTX = append([]byte(ptx), 0)

//go:embed hash.ptx
var ptx string

// Entry is the kernel's name.
const Entry = "gpuctl_hash_blocks"

// Threads is the CTA size a launch uses: 8 warps, one block each.
const Threads = 256

// Launch describes one launch over a region.
type Launch struct {
	Base, Size, Block, Seed, Out uint64
}

// Blocks is how many blocks (and hashes) the region has.
func (l Launch) Blocks() uint64 { return (l.Size + l.Block - 1) / l.Block }

// Check refuses what the kernel cannot hash.
func (l Launch) Check() error {
	if l.Block == 0 || l.Block%8 != 0 {
		return fmt.Errorf("hash kernel: block of %d bytes is not a multiple of 8", l.Block)
	}
	if l.Base%8 != 0 {
		return fmt.Errorf("hash kernel: region at %#x is not 8-byte aligned", l.Base)
	}
	if l.Size == 0 {
		return fmt.Errorf("hash kernel: empty region")
	}
	if l.Grid() > 1<<31-1 {
		return fmt.Errorf("hash kernel: %d blocks are too many for one launch", l.Blocks())
	}
	return nil
}

// Grid is the number of CTAs.
func (l Launch) Grid() uint64 {
	per := uint64(Threads / 32)
	return (l.Blocks() + per - 1) / per
}

// Params is the kernel's parameter buffer: six u64s in order.
func (l Launch) Params() []byte {
	b := make([]byte, 48)
	for i, v := range []uint64{l.Base, l.Size, l.Block, l.Seed, l.Out, l.Blocks()} {
		binary.LittleEndian.PutUint64(b[8*i:], v)
	}
	return b
}
