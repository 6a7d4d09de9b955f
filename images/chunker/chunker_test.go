package chunker

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/images/imagegen"
)

func split(t testing.TB, data []byte, p Params) []Chunk {
	t.Helper()
	var out []Chunk
	if err := Split(data, 0, p, func(c Chunk) error { out = append(out, c); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSplitCoversInputAndRespectsBounds(t *testing.T) {
	gen := imagegen.Pages(1, 8<<20, imagegen.Realistic)
	tests := []struct {
		name string
		data []byte
		p    Params
	}{
		{"empty", nil, Default},
		{"one byte", []byte{1}, Default},
		{"partial tail page", gen[:3*PageSize+100], Default},
		{"all zero", make([]byte, 5<<20), Default},
		{"realistic", gen, Default},
		{"realistic, fixed", gen, Params{AvgPages: 16, Fixed: true}},
		{"realistic, big chunks", gen, Params{MinPages: 4, AvgPages: 16, MaxPages: 64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var next int64
			for i, c := range split(t, tt.data, tt.p) {
				if c.Off != next || c.Len <= 0 {
					t.Fatalf("chunk %d at %d+%d, want offset %d", i, c.Off, c.Len, next)
				}
				b := tt.data[c.Off : c.Off+int64(c.Len)]
				if c.Zero != (bytes.Count(b, []byte{0}) == len(b)) {
					t.Fatalf("chunk %d: Zero=%v is wrong", i, c.Zero)
				}
				if c.Off%PageSize != 0 {
					t.Fatalf("chunk %d starts off a page boundary: %d", i, c.Off)
				}
				if !c.Zero && !tt.p.Fixed && c.Len > tt.p.MaxPages*PageSize {
					t.Fatalf("chunk %d is %d bytes, max %d", i, c.Len, tt.p.MaxPages*PageSize)
				}
				next += int64(c.Len)
			}
			if next != int64(len(tt.data)) {
				t.Fatalf("chunks cover %d of %d bytes", next, len(tt.data))
			}
		})
	}
}

func TestBadParams(t *testing.T) {
	for _, p := range []Params{{AvgPages: 3, MinPages: 1, MaxPages: 8}, {AvgPages: 4, MinPages: 8, MaxPages: 8}, {AvgPages: 4, MinPages: 1, MaxPages: 2}, {}} {
		if err := Split([]byte{1}, 0, p, func(Chunk) error { return nil }); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
}

// newBytes is the share of b's non-zero bytes in chunks a does not have:
// what a second checkpoint would add to the store.
func newBytes(t testing.TB, a, b [][]byte, p Params) (share float64, chunks int) {
	have := map[[32]byte]bool{}
	for _, f := range a {
		for _, c := range split(t, f, p) {
			if !c.Zero {
				have[sha256.Sum256(f[c.Off:c.Off+int64(c.Len)])] = true
			}
		}
	}
	var total, fresh int
	for _, f := range b {
		for _, c := range split(t, f, p) {
			if c.Zero {
				continue
			}
			chunks++
			total += c.Len
			d := sha256.Sum256(f[c.Off : c.Off+int64(c.Len)])
			if !have[d] {
				fresh += c.Len
				have[d] = true
			}
		}
	}
	return float64(fresh) / float64(total), chunks
}

var candidates = []Params{
	{AvgPages: 1, Fixed: true},
	{AvgPages: 4, Fixed: true},
	{AvgPages: 16, Fixed: true},
	{MinPages: 1, AvgPages: 2, MaxPages: 16},
	{MinPages: 1, AvgPages: 4, MaxPages: 32},
	{MinPages: 2, AvgPages: 8, MaxPages: 64},
	{MinPages: 4, AvgPages: 16, MaxPages: 64},
}

// TestChunkingChoice measures each candidate on synthetic dumps and keeps
// the chosen default honest: it must add at most 10% new bytes for 5% of
// pages changed in runs, and survive a mapping growing. Run with -v to see
// the table docs/store.md quotes.
func TestChunkingChoice(t *testing.T) {
	base := imagegen.Pages(7, 64<<20, imagegen.Realistic)
	mutate := func(f func([]byte) []byte) []byte { return f(bytes.Clone(base)) }
	scenarios := []struct {
		name string
		next []byte
	}{
		{"5% pages in runs (mean 16)", mutate(func(b []byte) []byte { imagegen.Change(1, b, 0.05, 16); return b })},
		{"5% pages scattered", mutate(func(b []byte) []byte { imagegen.Change(2, b, 0.05, 1); return b })},
		{"mapping grew (+257 pages at 1/3)", mutate(func(b []byte) []byte { return imagegen.Grow(3, b, len(b)/PageSize/3, 257) })},
		{"grew + 5% in runs", mutate(func(b []byte) []byte {
			imagegen.Change(4, b, 0.05, 16)
			return imagegen.Grow(5, b, len(b)/PageSize/2, 63)
		})},
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "| chunking | chunks/GiB |")
	for _, sc := range scenarios {
		fmt.Fprintf(&sb, " %s |", sc.name)
	}
	sb.WriteString("\n")
	for _, p := range candidates {
		fmt.Fprintf(&sb, "| %s |", p)
		for i, sc := range scenarios {
			share, n := newBytes(t, [][]byte{base}, [][]byte{sc.next}, p)
			if i == 0 {
				fmt.Fprintf(&sb, " %d |", n*(1<<30)/len(sc.next))
			}
			fmt.Fprintf(&sb, " %.1f%% |", 100*share)
			if p == Default && strings.Contains(sc.name, "runs") && share > 0.10 {
				t.Errorf("default chunking stores %.1f%% new bytes for %q, target <= 10%%", 100*share, sc.name)
			}
			if p == Default && strings.HasPrefix(sc.name, "mapping grew") && share > 0.05 {
				t.Errorf("default chunking stores %.1f%% new bytes after a mapping grew", 100*share)
			}
		}
		sb.WriteString("\n")
	}
	t.Logf("new bytes in the second checkpoint, share of its non-zero bytes:\n%s", sb.String())
}

// TestChunkingOnRealDumps compares candidates on two real CRIU image
// directories: GPUCTL_CHUNK_DIRS=first:second (see docs/store.md).
func TestChunkingOnRealDumps(t *testing.T) {
	env := os.Getenv("GPUCTL_CHUNK_DIRS")
	if env == "" {
		t.Skip("set GPUCTL_CHUNK_DIRS=dir1:dir2 to measure on two CRIU dumps")
	}
	dirs := strings.SplitN(env, ":", 2)
	load := func(dir string) [][]byte {
		var out [][]byte
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err == nil {
				out = append(out, b)
			}
		}
		return out
	}
	a, b := load(dirs[0]), load(dirs[1])
	for _, p := range candidates {
		share, n := newBytes(t, a, b, p)
		t.Logf("| %s | %d chunks | %.1f%% new |", p, n, 100*share)
	}
}

func TestCutsGiveTheSameChunksAsOnePiece(t *testing.T) {
	gen := imagegen.Pages(3, 16<<20, imagegen.Realistic)
	zeroMiddle := bytes.Clone(gen)
	clear(zeroMiddle[2<<20 : 11<<20])
	grown := imagegen.Grow(4, bytes.Clone(gen), 100, 7)
	tests := []struct {
		name    string
		data    []byte
		p       Params
		segment int
		pieces  int // at least this many
	}{
		{"realistic, 1 MiB segments", gen, Default, 1 << 20, 16},
		{"realistic, odd segment size", gen, Default, 1<<20 + 123, 10},
		{"realistic, partial tail page", gen[:len(gen)-100], Default, 1 << 20, 16},
		{"grown by pages", grown, Default, 1 << 20, 16},
		{"long zero run spans segments", zeroMiddle, Default, 1 << 20, 7},
		{"all zero", make([]byte, 4<<20), Default, 1 << 20, 1},
		{"segment of one page", gen[:1<<20], Default, PageSize, 20},
		{"fixed", gen, Params{AvgPages: 16, Fixed: true}, 1 << 20, 16},
		{"min pages above 1: one piece", gen, Params{MinPages: 2, AvgPages: 4, MaxPages: 32}, 1 << 20, 1},
		{"shorter than a segment", gen[:5000], Default, 1 << 20, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := split(t, tt.data, tt.p)
			cuts := Cuts(tt.data, tt.p, tt.segment)
			if len(cuts) < tt.pieces || cuts[0] != 0 {
				t.Fatalf("cuts %v: want %d or more starting at 0", cuts, tt.pieces)
			}
			var got []Chunk
			for i, a := range cuts {
				b := int64(len(tt.data))
				if i+1 < len(cuts) {
					b = cuts[i+1]
				}
				if b <= a || a%PageSize != 0 {
					t.Fatalf("cut %d at %d is not a rising page offset (next %d)", i, a, b)
				}
				if err := Split(tt.data[a:b], a, tt.p, func(c Chunk) error { got = append(got, c); return nil }); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d chunks in pieces, %d in one piece", len(got), len(want))
			}
			for i := range want {
				if got[i] != want[i] {
					t.Fatalf("chunk %d: %+v in pieces, %+v in one piece", i, got[i], want[i])
				}
			}
		})
	}
}
