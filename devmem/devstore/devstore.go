// Package devstore is gpud's side of saved device memory (package
// devmem): it turns a worker's memfd into the image files devmem.bin and
// devmem.json, reusing the stored chunks of blocks that did not change
// since the save the worker compared with, and reads them back out of the
// store, decompressing on every core, for a restore.
package devstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/store"
)

// Table is a complete save in a store: its layout and the chunk of every
// block, in file order.
type Table struct {
	Layout *devmem.Layout
	Chunks []images.Chunk
	// Image is the image that holds the save, when it was read from one
	// or stored in one here (FromManifest, TableOf); empty for a
	// migration's pre-copy round.
	Image string
}

// Gen is the save's generation, or 0 for no table.
func (t *Table) Gen() uint64 {
	if t == nil {
		return 0
	}
	return t.Layout.Gen
}

// FromManifest reads the table of an image's saved device memory; nil
// when the image has none (an image whose memory CRIU dumped).
func FromManifest(ctx context.Context, st *store.Store, m *images.Manifest) (*Table, error) {
	var data, lay *images.File
	for i := range m.Files {
		switch m.Files[i].Path {
		case devmem.DataFile:
			data = &m.Files[i]
		case devmem.LayoutFile:
			lay = &m.Files[i]
		}
	}
	if data == nil && lay == nil {
		return nil, nil
	}
	subj := errs.Image(m.ID)
	if data == nil || lay == nil || lay.Size > 256<<20 {
		return nil, errs.New(errs.DataLoss, subj, "the image has one of %s and %s without the other", devmem.DataFile, devmem.LayoutFile)
	}
	lj := make([]byte, lay.Size)
	var pos int64
	for _, c := range lay.Chunks {
		if !c.Zero {
			if err := st.ReadChunkTo(ctx, c.Digest, lj[pos:pos+c.Size]); err != nil {
				return nil, errs.Wrap(err, errs.KindOf(err), subj, "read %s", devmem.LayoutFile)
			}
		}
		pos += c.Size
	}
	l, err := devmem.ParseLayout(lj)
	if err != nil {
		return nil, errs.Wrap(err, errs.DataLoss, subj, "%s", devmem.LayoutFile)
	}
	spans := l.Spans()
	if len(data.Chunks) != len(spans) {
		return nil, errs.New(errs.DataLoss, subj, "%s has %d chunks for %d blocks", devmem.DataFile, len(data.Chunks), len(spans))
	}
	for i, s := range spans {
		if data.Chunks[i].Size != int64(s.Len) {
			return nil, errs.New(errs.DataLoss, subj, "%s: chunk %d is %d bytes, its block %d", devmem.DataFile, i, data.Chunks[i].Size, s.Len)
		}
	}
	return &Table{Layout: l, Chunks: data.Chunks, Image: m.ID}, nil
}

// Snapshot is a save as gpud holds it: the worker's memfd, mapped.
type Snapshot struct {
	File   *os.File
	Saved  devmem.Saved
	Layout *devmem.Layout
	Data   []byte // the data, Layout.Size bytes
}

// Open maps a worker's memfd and reads its layout. The snapshot owns f.
func Open(f *os.File, sv devmem.Saved) (*Snapshot, error) {
	if sv.LayoutLen <= 0 || sv.LayoutLen > 256<<20 || sv.LayoutOff < sv.Bytes {
		f.Close()
		return nil, fmt.Errorf("saved device memory: layout of %d bytes at %d", sv.LayoutLen, sv.LayoutOff)
	}
	lj := make([]byte, sv.LayoutLen)
	if _, err := f.ReadAt(lj, sv.LayoutOff); err != nil {
		f.Close()
		return nil, fmt.Errorf("saved device memory: read the layout: %w", err)
	}
	l, err := devmem.ParseLayout(lj)
	if err != nil {
		f.Close()
		return nil, err
	}
	s := &Snapshot{File: f, Saved: sv, Layout: l}
	if l.Size > 0 {
		if s.Data, err = unix.Mmap(int(f.Fd()), 0, int(l.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			f.Close()
			return nil, fmt.Errorf("saved device memory: map: %w", err)
		}
	}
	return s, nil
}

// Close unmaps and closes the snapshot; its memory goes back to the host.
func (s *Snapshot) Close() {
	if s == nil {
		return
	}
	if s.Data != nil {
		_ = unix.Munmap(s.Data)
		s.Data = nil
	}
	if s.File != nil {
		s.File.Close()
		s.File = nil
	}
}

// baseChunk finds, for each block of l, the chunk base holds for the same
// block of the same region; -1 where base has none.
func baseChunks(l *devmem.Layout, base *Table) []int {
	if base == nil {
		return blockMap(l, nil)
	}
	return blockMap(l, base.Layout)
}

// blockMap maps each block of l to the same block (the same region, by
// kind, id and size, and index) of bl, or to -1 where bl has none.
func blockMap(l, bl *devmem.Layout) []int {
	out := make([]int, l.Blocks)
	for i := range out {
		out[i] = -1
	}
	if bl == nil || bl.Block != l.Block {
		return out
	}
	type rkey struct {
		kind     uint8
		id, size uint64
	}
	first := map[rkey]int{}
	n := 0
	for _, r := range bl.Regions {
		first[rkey{r.Kind, r.ID, r.Size}] = n
		n += devmem.BlocksOf(r.Size, bl.Block)
	}
	for i, s := range l.Spans() {
		r := l.Regions[s.Region]
		if f, ok := first[rkey{r.Kind, r.ID, r.Size}]; ok {
			out[i] = f + s.Index
		}
	}
	return out
}

// Files are the image files of snapshot s: blocks sent in s are stored,
// the others reuse base's chunks. The layout stored says every block is
// present, as it is in the image.
func Files(s *Snapshot, base *Table) ([]images.MemFile, error) {
	l := s.Layout
	if l.Base != 0 && l.Base != base.Gen() {
		return nil, fmt.Errorf("saved device memory is relative to save %x, gpud holds %x", l.Base, base.Gen())
	}
	bc := baseChunks(l, base)
	blocks := make([]images.MemBlock, 0, l.Blocks)
	for i, sp := range l.Spans() {
		b := images.MemBlock{Off: sp.FileOff, Len: sp.Len}
		if !l.IsChanged(i) && (bc[i] >= 0 || !l.IsSent(i)) {
			if bc[i] < 0 {
				return nil, fmt.Errorf("saved device memory: block %d was not sent and the previous save lacks it", i)
			}
			c := base.Chunks[bc[i]]
			b.Reuse = &c
		}
		blocks = append(blocks, b)
	}
	lj, err := json.Marshal(complete(l))
	if err != nil {
		return nil, err
	}
	return []images.MemFile{
		{Path: devmem.DataFile, Data: s.Data, Blocks: blocks},
		{Path: devmem.LayoutFile, Data: lj, Blocks: []images.MemBlock{{Off: 0, Len: len(lj)}}},
	}, nil
}

// complete is l as an image holds it: every block present, relative to
// nothing.
func complete(l *devmem.Layout) *devmem.Layout {
	full := *l
	full.Base = 0
	full.Sent = allSent(l.Blocks)
	full.Changed = nil
	return &full
}

func allSent(n int) []byte {
	b := make([]byte, (n+7)/8)
	for i := range n {
		b[i/8] |= 1 << (i % 8)
	}
	return b
}

// TableOf is the table of an image committed with Files(s, ...).
func TableOf(s *Snapshot, m *images.Manifest) (*Table, error) {
	for _, f := range m.Files {
		if f.Path == devmem.DataFile {
			return &Table{Layout: complete(s.Layout), Chunks: f.Chunks, Image: m.ID}, nil
		}
	}
	return nil, fmt.Errorf("image %s has no %s", m.ID, devmem.DataFile)
}

// Complete reads the blocks s lacks from the store (base's chunks) into
// s, and rewrites its layout to say every block is present: a worker can
// then be reloaded from it.
func Complete(ctx context.Context, st *store.Store, s *Snapshot, base *Table) error {
	l := s.Layout
	if l.SentCount() == l.Blocks {
		return nil
	}
	bc := baseChunks(l, base)
	spans := l.Spans()
	var idx []int
	for i := range spans {
		if !l.IsSent(i) {
			if bc[i] < 0 {
				return fmt.Errorf("saved device memory: block %d was not sent and the previous save lacks it", i)
			}
			idx = append(idx, i)
		}
	}
	err := fill(ctx, st, len(idx), func(k int) (images.Chunk, []byte) {
		i := idx[k]
		return base.Chunks[bc[i]], s.Data[spans[i].FileOff : spans[i].FileOff+int64(spans[i].Len)]
	})
	if err != nil {
		return err
	}
	// The data is complete now; Changed still says what a commit must
	// store.
	full := *l
	full.Sent = allSent(l.Blocks)
	return s.writeLayout(&full)
}

// writeLayout rewrites the layout s's file holds after its data as l,
// and makes it s's.
func (s *Snapshot) writeLayout(l *devmem.Layout) error {
	lj, err := json.Marshal(l)
	if err != nil {
		return err
	}
	off := (l.Size + 4095) &^ 4095
	if err := s.File.Truncate(off); err != nil {
		return err
	}
	if _, err := s.File.WriteAt(lj, off); err != nil {
		return err
	}
	s.Layout = l
	s.Saved.LayoutOff, s.Saved.LayoutLen = off, int64(len(lj))
	return nil
}

// Load reads a table's blocks out of the store into a new memfd, on every
// core, for a worker to reload.
func Load(ctx context.Context, st *store.Store, t *Table) (*Snapshot, error) {
	s, _, err := LoadStaged(ctx, st, t, nil)
	return s, err
}

// LoadStaged is Load that takes each chunk staged returns (its content,
// already checked: a migration target's staging) from memory and reads
// only the others out of the store; it reports how many blocks came from
// the staging. A nil staged reads everything from the store.
func LoadStaged(ctx context.Context, st *store.Store, t *Table, staged func(store.Digest) []byte) (*Snapshot, int, error) {
	s, err := create(t.Layout, false)
	if err != nil {
		return nil, 0, err
	}
	spans := t.Layout.Spans()
	var hits atomic.Int64
	err = fillFrom(ctx, st, len(spans), func(i int) (images.Chunk, []byte) {
		dst := s.Data[spans[i].FileOff : spans[i].FileOff+int64(spans[i].Len)]
		if !t.Chunks[i].Zero {
			// Back the block's pages in one call, on the core that
			// fills it (best effort: older kernels fault them in one by
			// one under the copy).
			_ = unix.Madvise(dst, unix.MADV_POPULATE_WRITE)
		}
		return t.Chunks[i], dst
	}, func(d store.Digest, dst []byte) bool {
		if staged == nil {
			return false
		}
		b := staged(d)
		if len(b) != len(dst) {
			return false
		}
		copy(dst, b)
		hits.Add(1)
		return true
	})
	if err != nil {
		s.Close()
		return nil, 0, err
	}
	return s, int(hits.Load()), nil
}

// Create makes an empty memfd laid out as l (its data all zeros, its
// pages backed at once), mapped, for gpud to fill and a worker to reload.
func Create(l *devmem.Layout) (*Snapshot, error) { return create(l, true) }

// create is Create that leaves the pages to whoever fills them unless
// populate.
func create(l *devmem.Layout, populate bool) (*Snapshot, error) {
	fd, err := unix.MemfdCreate("gpuctl-devmem", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "devmem")
	lj, err := json.Marshal(l)
	if err != nil {
		f.Close()
		return nil, err
	}
	sv := devmem.Saved{LayoutOff: (l.Size + 4095) &^ 4095, LayoutLen: int64(len(lj)), Gen: l.Gen, Bytes: l.Size}
	if err := f.Truncate(sv.LayoutOff + sv.LayoutLen); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.WriteAt(lj, sv.LayoutOff); err != nil {
		f.Close()
		return nil, err
	}
	s, err := Open(f, sv)
	if err != nil {
		return nil, err
	}
	if populate && len(s.Data) > 0 {
		// Back the whole file at once, on every core: a page fault per
		// 4 KiB of a gigabyte costs more than the copy, and on the GPU
		// hosts (virtual machines) one core backs fresh memory at about
		// 1.4 GB/s (best effort: older kernels fault them in as before).
		populateParallel(s.Data)
	}
	return s, nil
}

// populateParallel backs b's pages in parts on every core.
func populateParallel(b []byte) {
	const part = 64 << 20
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for off := 0; off < len(b); off += part {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = unix.Madvise(b[off:min(off+part, len(b))], unix.MADV_POPULATE_WRITE)
		})
	}
	wg.Wait()
}

// SetLayout rewrites the layout s's file describes, for data laid out
// the same way (the same regions): a staged file handed to a worker
// under an image's layout.
func (s *Snapshot) SetLayout(l *devmem.Layout) error {
	if l.Size != s.Layout.Size || len(l.Regions) != len(s.Layout.Regions) {
		return fmt.Errorf("saved device memory: a layout of %d bytes in %d regions for data of %d in %d", l.Size, len(l.Regions), s.Layout.Size, len(s.Layout.Regions))
	}
	if err := s.writeLayout(l); err != nil {
		return err
	}
	s.Saved = devmem.Saved{LayoutOff: s.Saved.LayoutOff, LayoutLen: s.Saved.LayoutLen, Gen: l.Gen, Bytes: l.Size}
	return nil
}

// SameBlocks reports whether a and b lay the same regions out the same
// way, block for block.
func SameBlocks(a, b *devmem.Layout) bool {
	if a == nil || b == nil || a.Block != b.Block || a.Size != b.Size || a.Blocks != b.Blocks || len(a.Regions) != len(b.Regions) {
		return false
	}
	for i := range a.Regions {
		if a.Regions[i] != b.Regions[i] {
			return false
		}
	}
	return true
}

// Fill reads the chunks of t's blocks that need says are needed out of
// the store into s on every core (zero chunks are written as zeros).
func Fill(ctx context.Context, st *store.Store, s *Snapshot, t *Table, need func(i int) bool) error {
	spans := t.Layout.Spans()
	var idx []int
	for i := range spans {
		if need(i) {
			idx = append(idx, i)
		}
	}
	return fill(ctx, st, len(idx), func(k int) (images.Chunk, []byte) {
		i := idx[k]
		dst := s.Data[spans[i].FileOff : spans[i].FileOff+int64(spans[i].Len)]
		if t.Chunks[i].Zero {
			clear(dst)
		}
		return t.Chunks[i], dst
	})
}

// fill reads n chunks into their destinations on every core; zero
// chunks are left as the memfd's holes.
func fill(ctx context.Context, st *store.Store, n int, at func(i int) (images.Chunk, []byte)) error {
	return fillFrom(ctx, st, n, at, nil)
}

// fillFrom is fill that first offers each chunk to staged, which copies
// it into its destination and says so when it holds it.
func fillFrom(ctx context.Context, st *store.Store, n int, at func(i int) (images.Chunk, []byte), staged func(store.Digest, []byte) bool) error {
	workers := min(runtime.GOMAXPROCS(0), max(n, 1))
	const batch = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next int
		ferr error
	)
	for range workers {
		wg.Go(func() {
			var ds []store.Digest
			var dsts [][]byte
			for {
				mu.Lock()
				if ferr != nil || next >= n {
					mu.Unlock()
					return
				}
				lo := next
				next = min(n, next+batch)
				hi := next
				mu.Unlock()
				ds, dsts = ds[:0], dsts[:0]
				for i := lo; i < hi; i++ {
					c, dst := at(i)
					if c.Zero || staged != nil && staged(c.Digest, dst) {
						continue
					}
					ds = append(ds, c.Digest)
					dsts = append(dsts, dst)
				}
				if len(ds) == 0 {
					continue
				}
				if err := st.ReadChunksTo(ctx, ds, dsts); err != nil {
					mu.Lock()
					if ferr == nil {
						ferr = err
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	return ferr
}

// Scratch returns a new memfd of size bytes whose pages are already
// faulted in, on every core: a worker saves into it (SaveRequest.Into)
// without taking a page fault per page while its session is paused.
// gpud makes it before the pause.
func Scratch(size int64) (*os.File, error) {
	fd, err := unix.MemfdCreate("gpuctl-devmem", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "devmem")
	if err := f.Truncate(size); err != nil {
		f.Close()
		return nil, fmt.Errorf("size a memfd of %d bytes: %w", size, err)
	}
	if size == 0 {
		return f, nil
	}
	data, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("map a memfd of %d bytes: %w", size, err)
	}
	defer unix.Munmap(data)
	_ = unix.Madvise(data, unix.MADV_HUGEPAGE) // where the host offers large pages for shared memory
	const part = 64 << 20
	n := int((size + part - 1) / part)
	var (
		wg   sync.WaitGroup
		next atomic.Int64
		mu   sync.Mutex
		ferr error
	)
	for range min(runtime.GOMAXPROCS(0), n) {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				b := data[i*part : min((i+1)*part, size)]
				if err := unix.Madvise(b, unix.MADV_POPULATE_WRITE); err != nil {
					mu.Lock()
					ferr = cmp.Or(ferr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if ferr != nil {
		f.Close()
		return nil, fmt.Errorf("fault in a memfd of %d bytes: %w", size, ferr)
	}
	return f, nil
}
