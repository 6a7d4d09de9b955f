// Package procmem is the calling process's own memory as the kernel
// shows it (/proc/self/maps, /proc/self/pagemap), and with it the drop of
// the all-zero pages of the memory a CUDA driver checkpoint leaves in a
// worker, so that CRIU neither dumps nor restores them.
//
// When the driver checkpoints a process it copies each context's device
// state into one new anonymous mapping of the process: about 269 MiB per
// context on the H200, of which 264 MiB are zeros (the context's unused
// local memory, stacks and queues). CRIU dumps every written page, zero
// or not, so that mapping made up nearly all of a worker's image and of
// the time its dump, store, transfer and restore took. Private anonymous
// memory reads back as zeros once its pages are dropped with
// MADV_DONTNEED, so dropping the zero pages changes nothing the process
// can observe: the driver's restore reads the same bytes.
//
// Only memory mapped since a Snapshot taken before the driver's
// checkpoint is touched, and only in private, anonymous, unnamed, writable
// mappings, in new ranges of at least MinRegion bytes: the driver's checkpoint copy is such
// a mapping, while thread stacks, the Go heap (named "[anon: Go: ...]"
// where the kernel names mappings, and grown inside address space it
// reserved beforehand), malloc's heaps and everything mapped before the
// pause are not. Nothing may write such a mapping while Drop runs; a
// checkpointed driver does not touch its copy until it is restored.
package procmem

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MinRegion is the smallest mapping Drop looks into. The driver's copy
// is hundreds of MiB; thread stacks (8 MiB) and malloc's per-thread
// heaps grown during a pause stay below it.
const MinRegion = 16 << 20

const pageSize = 4096

// Region is one mapping of /proc/self/maps.
type Region struct {
	Start, End uint64
	Perms      string // "rw-p"
	Inode      uint64
	Path       string // "" for anonymous memory
}

// Snapshot is the process's mappings at one moment.
type Snapshot []Region

// Take reads the calling process's mappings.
func Take() (Snapshot, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, fmt.Errorf("read the process's mappings: %w", err)
	}
	defer f.Close()
	return parseMaps(f)
}

func parseMaps(r io.Reader) (Snapshot, error) {
	var out Snapshot
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// start-end perms offset dev inode [path]
		fs := strings.Fields(sc.Text())
		if len(fs) < 5 {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		if !ok {
			return nil, fmt.Errorf("/proc/self/maps: malformed range %q", fs[0])
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		inode, err3 := strconv.ParseUint(fs[4], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("/proc/self/maps: %q: %w", sc.Text(), err)
		}
		reg := Region{Start: start, End: end, Perms: fs[1], Inode: inode}
		if len(fs) > 5 {
			reg.Path = strings.Join(fs[5:], " ")
		}
		out = append(out, reg)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/self/maps: %w", err)
	}
	return out, nil
}

// NewRegions are the parts of now's mappings that Drop may look into:
// the address ranges no writable mapping of before covered, inside
// private, anonymous, unnamed, read-write mappings, each at least
// MinRegion bytes. A new mapping next to an old one of the same kind is
// merged with it by the kernel; only its new part is returned. A range
// that was reserved without access before (PROT_NONE, as allocators
// reserve address space) and is writable now counts as new: it held no
// content that could be written.
func NewRegions(before, now Snapshot) []Region {
	var written Snapshot
	for _, r := range before {
		if strings.Contains(r.Perms, "w") {
			written = append(written, r)
		}
	}
	var out []Region
	for _, r := range now {
		if r.Perms != "rw-p" || r.Inode != 0 || r.Path != "" || r.End-r.Start < MinRegion {
			continue
		}
		for _, part := range written.subtract(r) {
			if part.End-part.Start >= MinRegion {
				out = append(out, part)
			}
		}
	}
	return out
}

// subtract returns the parts of r that no mapping of s covers.
func (s Snapshot) subtract(r Region) []Region {
	parts := []Region{r}
	for _, o := range s {
		var next []Region
		for _, p := range parts {
			if o.End <= p.Start || p.End <= o.Start {
				next = append(next, p)
				continue
			}
			if p.Start < o.Start {
				q := p
				q.End = o.Start
				next = append(next, q)
			}
			if o.End < p.End {
				q := p
				q.Start = o.End
				next = append(next, q)
			}
		}
		parts = next
	}
	return parts
}

// Dropped is what a Drop did.
type Dropped struct {
	Regions int   `json:"regions"`
	Scanned int64 `json:"scanned_bytes"` // resident bytes looked at
	Zero    int64 `json:"zero_bytes"`    // of those, dropped
}

// Drop drops the resident all-zero pages of the mappings that appeared
// since before (see NewRegions), on all cores.
func Drop(ctx context.Context, before Snapshot) (Dropped, error) {
	now, err := Take()
	if err != nil {
		return Dropped{}, err
	}
	regs := NewRegions(before, now)
	d := Dropped{Regions: len(regs)}
	if len(regs) == 0 {
		return d, nil
	}
	pm, err := OpenPageMap()
	if err != nil {
		return d, err
	}
	defer pm.Close()
	// A garbage collection could write heap metadata into memory the
	// scan has found zero; none starts while it runs.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))

	const chunk = 2 << 20
	type job struct{ start, end uint64 }
	jobs := make(chan job)
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
	)
	workers := min(runtime.GOMAXPROCS(0), 8)
	for range workers {
		wg.Go(func() {
			pm := pm.Clone()
			ents := make([]uint64, chunk/pageSize)
			var scanned, zero int64
			for j := range jobs {
				s, z, err := dropChunk(pm, ents, j.start, j.end)
				scanned += s
				zero += z
				if err != nil {
					mu.Lock()
					first = cmp.Or(first, err)
					mu.Unlock()
				}
			}
			mu.Lock()
			d.Scanned += scanned
			d.Zero += zero
			mu.Unlock()
		})
	}
feed:
	for _, r := range regs {
		for a := r.Start; a < r.End; a += chunk {
			if ctx.Err() != nil {
				break feed
			}
			jobs <- job{a, min(a+chunk, r.End)}
		}
	}
	close(jobs)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return d, first
}

var zeroPage [pageSize]byte

// dropChunk drops the resident zero pages of [start, end), whole runs at
// a time.
func dropChunk(pm *PageMap, ents []uint64, start, end uint64) (scanned, zero int64, err error) {
	n := int((end - start) / pageSize)
	ents = ents[:n]
	if err := pm.Read(start/pageSize, ents); err != nil {
		return 0, 0, err
	}
	mem := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(nil), uintptr(start))), end-start)
	run := -1 // first page of the current run of zero pages
	flush := func(i int) {
		if run < 0 {
			return
		}
		b := mem[run*pageSize : i*pageSize]
		if e := unix.Madvise(b, unix.MADV_DONTNEED); e != nil && err == nil {
			err = fmt.Errorf("drop zero pages at %#x: %w", start+uint64(run*pageSize), e)
		} else if e == nil {
			zero += int64(len(b))
		}
		run = -1
	}
	for i := range n {
		if ents[i]&PagePresent == 0 {
			flush(i)
			continue
		}
		scanned += pageSize
		if bytes.Equal(mem[i*pageSize:(i+1)*pageSize], zeroPage[:]) {
			if run < 0 {
				run = i
			}
			continue
		}
		flush(i)
	}
	flush(n)
	return scanned, zero, err
}
