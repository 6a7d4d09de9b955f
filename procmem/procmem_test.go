package procmem

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestNewRegions(t *testing.T) {
	before, err := parseMaps(strings.NewReader(`00400000-00500000 r-xp 00000000 08:01 1234 /usr/bin/worker
7f0000000000-7f0004000000 rw-p 00000000 00:00 0
7f1000000000-7f1000800000 rw-p 00000000 00:00 0
7f4000000000-7f4010000000 ---p 00000000 00:00 0
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		line string
		want []uint64 // start, end of each part picked
	}{
		{"new anonymous", "7f2000000000-7f2010000000 rw-p 00000000 00:00 0", []uint64{0x7f2000000000, 0x7f2010000000}},
		// The kernel merged the new mapping with the old one before it.
		{"merged with an old one", "7f0000000000-7f0010000000 rw-p 00000000 00:00 0", []uint64{0x7f0004000000, 0x7f0010000000}},
		{"between two old ones", "7f0000000000-7f1000800000 rw-p 00000000 00:00 0", []uint64{0x7f0004000000, 0x7f1000000000}},
		// Address space reserved without access, then made writable.
		{"over a PROT_NONE reservation", "7f4000000000-7f4008000000 rw-p 00000000 00:00 0", []uint64{0x7f4000000000, 0x7f4008000000}},
		{"inside an old reservation", "7f0001000000-7f0003000000 rw-p 00000000 00:00 0", nil},
		{"new part too small", "7f0000000000-7f0004800000 rw-p 00000000 00:00 0", nil},
		{"too small", "7f3000000000-7f3000800000 rw-p 00000000 00:00 0", nil},
		{"shared", "7f2000000000-7f2010000000 rw-s 00000000 00:01 99 /memfd:devmem (deleted)", nil},
		{"file, private", "7f2000000000-7f2010000000 rw-p 00000000 08:01 77 /var/lib/x", nil},
		{"named", "7f2000000000-7f2010000000 rw-p 00000000 00:00 0 [anon: Go: heap]", nil},
		{"heap", "7f2000000000-7f2010000000 rw-p 00000000 00:00 0 [heap]", nil},
		{"read-only", "7f2000000000-7f2010000000 r--p 00000000 00:00 0", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now, err := parseMaps(strings.NewReader(tc.line + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for _, r := range NewRegions(before, now) {
				got = append(got, r.Start, r.End)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("NewRegions(%q) = %#x, want %#x", tc.line, got, tc.want)
			}
		})
	}
	if _, err := parseMaps(strings.NewReader("zz-1 rw-p 0 00:00 0\n")); err == nil {
		t.Fatal("a malformed line parsed")
	}
}

// mapRegion maps n bytes of private anonymous memory between two
// inaccessible pages, so that it cannot merge with a neighbour.
func mapRegion(t *testing.T, n int) []byte {
	t.Helper()
	all, err := unix.Mmap(-1, 0, n+2*pageSize, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(all) })
	b := all[pageSize : pageSize+n]
	if err := unix.Mprotect(b, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	return b
}

// fill writes every page of b: page i holds i+1 when data(i), zeros otherwise.
func fill(b []byte, data func(i int) bool) {
	for i := 0; i < len(b)/pageSize; i++ {
		p := b[i*pageSize : (i+1)*pageSize]
		clear(p)
		if data(i) {
			binary.LittleEndian.PutUint64(p[pageSize-8:], uint64(i+1))
		}
	}
}

// resident reports, per page of b, whether it is in memory.
func resident(t *testing.T, b []byte) []bool {
	t.Helper()
	pm, err := OpenPageMap()
	if err != nil {
		t.Fatal(err)
	}
	defer pm.Close()
	ents := make([]uint64, len(b)/pageSize)
	if err := pm.Read(uint64(uintptr(unsafe.Pointer(&b[0])))/pageSize, ents); err != nil {
		t.Fatal(err)
	}
	out := make([]bool, len(ents))
	for i, e := range ents {
		out[i] = e&PagePresent != 0
	}
	return out
}

func TestDropKeepsContentAndDropsOnlyNewZeroPages(t *testing.T) {
	const n = 32 << 20
	old := mapRegion(t, n)
	fill(old, func(int) bool { return false })
	before, err := Take()
	if err != nil {
		t.Fatal(err)
	}
	data := func(i int) bool { return i%3 == 0 || (i >= 4000 && i < 4100) }
	fresh := mapRegion(t, n)
	fill(fresh, data)
	want := bytes.Clone(fresh)
	small := mapRegion(t, 4<<20)
	fill(small, func(int) bool { return false })

	d, err := Drop(context.Background(), before)
	if err != nil {
		t.Fatal(err)
	}
	zeroPages := 0
	for i, in := range resident(t, fresh) {
		if in != data(i) {
			t.Fatalf("page %d of the new mapping: resident %v, want %v", i, in, data(i))
		}
		if !data(i) {
			zeroPages++
		}
	}
	if !bytes.Equal(fresh, want) {
		t.Fatal("the new mapping's content changed")
	}
	if d.Regions < 1 || d.Zero < int64(zeroPages)*pageSize || d.Scanned < n {
		t.Fatalf("Drop = %+v, want at least 1 region, %d bytes scanned and %d dropped", d, n, zeroPages*pageSize)
	}
	for name, b := range map[string][]byte{"the mapping from before": old, "the small mapping": small} {
		for i, in := range resident(t, b) {
			if !in {
				t.Fatalf("page %d of %s was dropped", i, name)
			}
		}
	}
	// The dropped pages read back as zeros and take writes.
	fresh[pageSize+5] = 9
	if fresh[pageSize+5] != 9 || fresh[2*pageSize+5] != 0 {
		t.Fatal("a dropped page does not behave as zeroed memory")
	}
}

func TestDropWithNothingNew(t *testing.T) {
	before, err := Take()
	if err != nil {
		t.Fatal(err)
	}
	d, err := Drop(context.Background(), before)
	if err != nil || d.Zero != 0 {
		t.Fatalf("Drop = %+v, %v; want nothing dropped", d, err)
	}
}

// The kernel merges a new mapping into an old one next to it (as the
// driver's copy was on a second checkpoint): only the new part is
// looked into.
func TestDropMergedMapping(t *testing.T) {
	const n = 32 << 20
	// Reserve guard, old, new, guard; then make old writable.
	room, err := unix.Mmap(-1, 0, 2*n+2*pageSize, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(room) })
	base := uintptr(unsafe.Pointer(&room[0]))
	old := room[pageSize : pageSize+n]
	if err := unix.Mprotect(old, unix.PROT_READ|unix.PROT_WRITE); err != nil {
		t.Fatal(err)
	}
	fill(old, func(int) bool { return false })
	before, err := Take()
	if err != nil {
		t.Fatal(err)
	}
	// The new part replaces the reservation in place (MAP_FIXED): a hole
	// unmapped ahead of time would be the first fit for any mapping made
	// meanwhile, by this test's own reads or the runtime.
	b, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&room[pageSize+n]), n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	if err != nil {
		t.Fatal(err)
	}
	fresh := unsafe.Slice((*byte)(b), n)
	fill(fresh, func(i int) bool { return i%2 == 1 })
	now, err := Take()
	if err != nil {
		t.Fatal(err)
	}
	merged := false
	for _, r := range now {
		if r.Start == uint64(base+pageSize) && r.End == uint64(base+pageSize+2*n) {
			merged = true
		}
	}
	if !merged {
		t.Skip("the kernel did not merge the two mappings")
	}
	if _, err := Drop(context.Background(), before); err != nil {
		t.Fatal(err)
	}
	for i, in := range resident(t, old) {
		if !in {
			t.Fatalf("page %d of the old part was dropped", i)
		}
	}
	for i, in := range resident(t, fresh) {
		if in != (i%2 == 1) {
			t.Fatalf("page %d of the new part: resident %v, want %v", i, in, i%2 == 1)
		}
	}
}
