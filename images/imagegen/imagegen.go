// Package imagegen makes synthetic checkpoint memory for tests and
// benchmarks: page runs of the three kinds real dumps are made of (zero,
// incompressible, repetitive), and the two ways memory changes between
// checkpoints (pages rewritten in place, mappings growing).
package imagegen

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
)

// PageSize is the page the generator works in.
const PageSize = 4096

// Mix is the share of each page kind; the three should add up to 1.
type Mix struct {
	Zero, Random, Repetitive float64
	// RunPages is the mean length of a run of pages of one kind, like a
	// buffer or a mapping.
	RunPages int
}

// Realistic is the default mix: a third each, in runs of 64 pages.
var Realistic = Mix{Zero: 0.3, Random: 0.35, Repetitive: 0.35, RunPages: 64}

// Pages returns size bytes (a multiple of PageSize) of memory-like data.
func Pages(seed uint64, size int, mix Mix) []byte {
	r := rand.New(rand.NewPCG(seed, 0x6770))
	b := make([]byte, size)
	for off := 0; off < size; {
		run := 1 + int(r.ExpFloat64()*float64(mix.RunPages))
		end := min(size, off+run*PageSize)
		switch x := r.Float64(); {
		case x < mix.Zero:
		case x < mix.Zero+mix.Random:
			fillRandom(r, b[off:end])
		default:
			fillRepetitive(r, b[off:end])
		}
		off = end
	}
	return b
}

func fillRandom(r *rand.Rand, b []byte) {
	for i := 0; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
}

// fillRepetitive writes what compresses well in real dumps: arrays of
// structs with small counters, float tables with few distinct values, text.
func fillRepetitive(r *rand.Rand, b []byte) {
	switch r.IntN(3) {
	case 0:
		base := r.Uint32()
		for i := 0; i+16 <= len(b); i += 16 {
			binary.LittleEndian.PutUint32(b[i:], base+uint32(i/16))
			binary.LittleEndian.PutUint32(b[i+4:], 7)
			binary.LittleEndian.PutUint64(b[i+8:], uint64(i/16)&0xff)
		}
	case 1:
		vals := []float32{0, 0.5, 1, -1, float32(r.IntN(9))}
		for i := 0; i+4 <= len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], math.Float32bits(vals[(i/4)%len(vals)]))
		}
	default:
		line := fmt.Sprintf("step %d loss=%d lr=3e-4 layer=%d ok\n", r.IntN(1e6), r.IntN(1e3), r.IntN(96))
		for i := range b {
			b[i] = line[i%len(line)]
		}
	}
}

// Change rewrites fraction of data's pages in place, in runs of mean
// runPages pages (1 for scattered single pages), and returns how many
// pages it changed. A page keeps its kind, as memory does when a program
// updates it: incompressible pages get new random bytes, repetitive pages
// new repetitive content, and zero pages that get written become one or the
// other. Every changed page really differs from before.
func Change(seed uint64, data []byte, fraction float64, runPages int) int {
	r := rand.New(rand.NewPCG(seed, 0xc4a7))
	pages := len(data) / PageSize
	want := int(fraction * float64(pages))
	changed := 0
	seen := make([]bool, pages)
	for changed < want {
		p := r.IntN(pages)
		run := 1
		if runPages > 1 {
			run = 1 + int(r.ExpFloat64()*float64(runPages-1))
		}
		for i := p; i < min(pages, p+run) && changed < want; i++ {
			if seen[i] {
				continue
			}
			seen[i] = true
			page := data[i*PageSize : (i+1)*PageSize]
			old := string(page)
			for string(page) == old {
				switch kindOf(page) {
				case kindRandom:
					fillRandom(r, page)
				case kindRepetitive:
					fillRepetitive(r, page)
				default:
					if r.IntN(2) == 0 {
						fillRandom(r, page)
					} else {
						fillRepetitive(r, page)
					}
				}
			}
			changed++
		}
	}
	return changed
}

const (
	kindZero = iota
	kindRandom
	kindRepetitive
)

// kindOf tells the page kinds apart by how many distinct 8-byte words the
// page holds.
func kindOf(page []byte) int {
	words := map[uint64]bool{}
	for i := 0; i+8 <= len(page); i += 8 {
		words[binary.LittleEndian.Uint64(page[i:])] = true
	}
	switch {
	case len(words) == 1 && binary.LittleEndian.Uint64(page) == 0:
		return kindZero
	case len(words) > len(page)/16:
		return kindRandom
	}
	return kindRepetitive
}

// Grow inserts pages of new random content at page index at, the way a
// mapping that grew shifts the rest of a CRIU pages file.
func Grow(seed uint64, data []byte, at, pages int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x960))
	ins := make([]byte, pages*PageSize)
	fillRandom(r, ins)
	out := make([]byte, 0, len(data)+len(ins))
	out = append(out, data[:at*PageSize]...)
	out = append(out, ins...)
	return append(out, data[at*PageSize:]...)
}
