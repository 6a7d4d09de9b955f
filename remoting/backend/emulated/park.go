package emulated

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/procmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// Parking the emulated device's memory: its device memory is host memory
// of the worker, so Park copies every region into one memfd and releases
// the regions as ReleaseMem does. That one file is both what backend.Parker
// calls the live memory and the snapshot: Unpark maps its pages back at
// the allocations copy-on-write (the client's later writes go to pages of
// its own, never to the file), so the file keeps the memory as Park found
// it, and a kept snapshot is the same file mapped read-only elsewhere.
// Physical allocations of virtual memory management are shared memory
// that other mappings alias, so they get their bytes copied back instead.
//
// After an Unpark the allocations map the file copy-on-write, so the file
// still holds every page the client has not written since. The next Park
// (when the regions are the same) therefore writes only the pages the
// client wrote into that same file, found in /proc/self/pagemap as the
// mapping's anonymous pages, and hands it out again: a checkpoint of an
// idle session copies nothing, where copying all of it into a fresh memfd
// took seconds a GiB on hosts whose fresh memory fills slowly. The worker
// keeps its own descriptor of the file only between an Unpark and the
// next Park or release, never across a dump.

var _ backend.Parker = (*Device)(nil)

// parkedRegion is a region Park copied into its memfd, and where.
type parkedRegion struct {
	backend.MemRegion
	off int64 // a multiple of the page size, so the pages can be mapped
}

// parking is the layout of the memfd Park handed out.
type parking struct {
	regions []parkedRegion
	size    int64
}

var errSnapshotReleased = errors.New("the parked memory's snapshot was released")

// Park copies every region into one new memfd, laid out region after
// region at page-aligned offsets, releases the regions' memory and
// returns the memfd; with no regions it returns no file. The emulator
// runs every call to completion before it returns, so there is no work to
// wait for. On error nothing is released.
//
// A snapshot kept by an earlier Unpark is dropped once the new Park has
// succeeded: Snapshot has one memory to offer, and a snapshot nobody
// released would otherwise stay mapped and go into the next dump. A save
// still reading the old snapshot then fails rather than reading freed
// memory. Park while already parked is refused.
func (d *Device) Park(ctx context.Context) ([]*os.File, error) {
	if d.parked != nil {
		return nil, errors.New("park device memory: it is parked already; unpark it first")
	}
	regs, err := d.MemRegions(ctx)
	if err != nil {
		return nil, fmt.Errorf("park device memory: %w", err)
	}
	if len(regs) == 0 {
		d.parked = &parking{}
		d.dropSnapshot()
		return []*os.File{}, nil
	}
	p := &parking{regions: make([]parkedRegion, len(regs))}
	page := int64(os.Getpagesize())
	var dst, src [][]byte
	for i, r := range regs {
		b, err := d.regionBytes(r)
		if err != nil {
			return nil, fmt.Errorf("park device memory: %w", err)
		}
		p.regions[i] = parkedRegion{MemRegion: r, off: p.size}
		p.size += (int64(r.Size) + page - 1) &^ (page - 1)
		src = append(src, b)
	}
	if files, err := d.parkInPlace(ctx, p, src); err == nil {
		return files, nil
	} else if d.reuse != nil {
		d.log.Debug("the last park's file cannot be brought up to date; copying all of device memory", "err", err)
	}
	d.dropReuse()
	d.LastPark = ParkStats{Copied: p.size}
	fd, err := unix.MemfdCreate("gpuctl-parked", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("park device memory: memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "parked-devmem")
	ok := false
	defer func() {
		if !ok {
			f.Close()
		}
	}()
	// Allocating the file's pages up front turns a host out of memory
	// into an error here rather than a SIGBUS in the copy.
	if err := unix.Fallocate(fd, 0, 0, p.size); err != nil {
		return nil, fmt.Errorf("park device memory: allocate %d bytes of memfd: %w", p.size, err)
	}
	data, err := unix.Mmap(fd, 0, int(p.size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("park device memory: map the memfd: %w", err)
	}
	defer func() { _ = unix.Munmap(data) }()
	for _, r := range p.regions {
		dst = append(dst, data[r.off:r.off+int64(r.Size)])
	}
	copyAll(dst, src)
	if err := d.ReleaseMem(ctx); err != nil {
		// Some regions may be released already: their bytes are in the
		// memfd, so put every region back from it.
		if rerr := d.restoreParked(ctx, p, f, data); rerr != nil {
			return nil, fmt.Errorf("park device memory: release: %w; and putting it back: %v", err, rerr)
		}
		return nil, fmt.Errorf("park device memory: release: %w", err)
	}
	d.parked = p
	d.dropSnapshot()
	ok = true
	return []*os.File{f}, nil
}

// Unpark takes back the files Park returned (one memfd, or none when
// there were no regions) and brings every region back: allocations map
// the memfd's pages copy-on-write, physical allocations get their bytes
// copied back. With keep, the memfd's pages stay mapped read-only as the
// snapshot Snapshot returns until its ReleaseMem.
//
// Unpark keeps no descriptor and closes none: the caller closes files
// after Unpark returns, whether it succeeded or not, and the mappings
// keep the memory alive. A failed Unpark leaves the memory parked, to be
// unparked again with the right files.
func (d *Device) Unpark(ctx context.Context, files []*os.File, keep bool) error {
	p := d.parked
	if p == nil {
		return errors.New("unpark device memory: nothing is parked")
	}
	want := 1
	if len(p.regions) == 0 {
		want = 0
	}
	if len(files) != want {
		return fmt.Errorf("unpark device memory: %d files, Park handed out %d", len(files), want)
	}
	if want == 0 {
		d.parked = nil
		if keep {
			d.keepSnapshot(p, nil)
		}
		return nil
	}
	f := files[0]
	if f == nil {
		return errors.New("unpark device memory: no file")
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("unpark device memory: stat %s: %w", f.Name(), err)
	}
	if st.Size < p.size {
		return fmt.Errorf("unpark device memory: %s holds %d bytes, Park wrote %d", f.Name(), st.Size, p.size)
	}
	// Every region must still be there before any is touched, so that
	// a failure changes nothing.
	for _, r := range p.regions {
		if _, err := d.regionBytes(r.MemRegion); err != nil {
			return fmt.Errorf("unpark device memory: %w", err)
		}
	}
	view, err := unix.Mmap(int(f.Fd()), 0, int(p.size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("unpark device memory: map %s: %w", f.Name(), err)
	}
	if err := d.restoreParked(ctx, p, f, view); err != nil {
		_ = unix.Munmap(view)
		return fmt.Errorf("unpark device memory: %w", err)
	}
	d.parked = nil
	d.keepReuse(f, p)
	if keep {
		d.keepSnapshot(p, view)
	} else {
		_ = unix.Munmap(view)
	}
	return nil
}

// restoreParked brings p's regions back from f, which view maps.
func (d *Device) restoreParked(ctx context.Context, p *parking, f *os.File, view []byte) error {
	var dst, src [][]byte
	for _, r := range p.regions {
		if r.Kind == backend.MemAlloc {
			if err := d.MapMem(ctx, r.MemRegion, f, r.off); err != nil {
				return fmt.Errorf("map parked region %#x back: %w", r.ID, err)
			}
			continue
		}
		b, err := d.regionBytes(r.MemRegion)
		if err != nil {
			return fmt.Errorf("parked region: %w", err)
		}
		dst = append(dst, b)
		src = append(src, view[r.off:r.off+int64(r.Size)])
	}
	copyAll(dst, src)
	return nil
}

// MemSnapshot is the memory as the last Park found it, kept by Unpark; nil
// when there is none.
func (d *Device) MemSnapshot() backend.DeviceMemory {
	if s := d.snap.Load(); s != nil {
		return s
	}
	return nil
}

func (d *Device) keepSnapshot(p *parking, view []byte) {
	s := &snapshot{owner: &d.snap, regions: p.regions, data: view, index: make(map[backend.MemRegion]int, len(p.regions))}
	for i, r := range p.regions {
		s.index[r.MemRegion] = i
	}
	d.dropSnapshot()
	d.snap.Store(s)
}

func (d *Device) dropSnapshot() {
	if s := d.snap.Load(); s != nil {
		_ = s.ReleaseMem(context.Background())
	}
}

// snapshot is the parked memfd mapped read-only (MAP_SHARED: the file's
// own pages, which nothing writes any more). It touches nothing of the
// Device but the pointer that names it, so its reads may run on any
// goroutine while the emulator runs the client's calls.
type snapshot struct {
	owner   *atomic.Pointer[snapshot]
	regions []parkedRegion // not changed after creation
	index   map[backend.MemRegion]int

	// mu is held for reading while bytes of data are read, and for
	// writing to unmap it.
	mu       sync.RWMutex
	data     []byte // nil when there were no regions
	released bool
}

var _ backend.DeviceMemory = (*snapshot)(nil)

func (s *snapshot) MemRegions(context.Context) ([]backend.MemRegion, error) {
	out := make([]backend.MemRegion, len(s.regions))
	for i, r := range s.regions {
		out[i] = r.MemRegion
	}
	return out, nil
}

// bytesOf returns region r's bytes; s.mu must be held.
func (s *snapshot) bytesOf(r backend.MemRegion) ([]byte, error) {
	if s.released {
		return nil, errSnapshotReleased
	}
	i, ok := s.index[r]
	if !ok {
		return nil, fmt.Errorf("no region %d/%#x of %d bytes in the parked memory's snapshot", r.Kind, r.ID, r.Size)
	}
	p := s.regions[i]
	return s.data[p.off : p.off+int64(p.Size)], nil
}

func (s *snapshot) ReadMem(_ context.Context, r backend.MemRegion, off uint64, dst []byte) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, err := s.bytesOf(r)
	if err != nil {
		return err
	}
	if off > uint64(len(b)) || uint64(len(dst)) > uint64(len(b))-off {
		return fmt.Errorf("%d bytes at offset %d run past snapshot region %#x of %d bytes", len(dst), off, r.ID, len(b))
	}
	copy(dst, b[off:])
	return nil
}

func (s *snapshot) HashBlocks(_ context.Context, r backend.MemRegion, block, seed uint64, out []uint64) error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	b, err := s.bytesOf(r)
	if err != nil {
		return err
	}
	return hashBlocks(b, block, seed, out)
}

func (s *snapshot) WriteMem(_ context.Context, r backend.MemRegion, _ uint64, _ []byte) error {
	return fmt.Errorf("write region %#x: the parked memory's snapshot is read-only", r.ID)
}

func (s *snapshot) RestoreMem(context.Context) error {
	return errors.New("restore the parked memory's snapshot: it is read-only")
}

// ReleaseMem unmaps the snapshot and drops it from its device, once it
// has no reads in flight; later reads fail. A second call does nothing.
func (s *snapshot) ReleaseMem(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.released {
		return nil
	}
	s.released = true
	s.owner.CompareAndSwap(s, nil)
	if s.data != nil {
		data := s.data
		s.data = nil
		if err := unix.Munmap(data); err != nil {
			return fmt.Errorf("unmap the parked memory's snapshot: %w", err)
		}
	}
	return nil
}

// copyAll copies each src into its dst on every core, cut in pieces so
// that a few large regions are shared among the cores too.
func copyAll(dst, src [][]byte) {
	const piece = 8 << 20
	type job struct{ d, s []byte }
	var jobs []job
	for i := range dst {
		for lo := 0; lo < len(src[i]); lo += piece {
			hi := min(lo+piece, len(src[i]))
			jobs = append(jobs, job{dst[i][lo:hi], src[i][lo:hi]})
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(jobs); i = int(next.Add(1)) - 1 {
				copy(jobs[i].d, jobs[i].s)
			}
		})
	}
	wg.Wait()
}

// ParkStats says what a Park copied: Reused when it brought the last
// Unpark's file up to date, Copied the bytes it wrote into the file.
type ParkStats struct {
	Reused bool
	Copied int64
}

// parkReuse is the file the last Unpark mapped back (the worker's own
// descriptor of it) and its layout.
type parkReuse struct {
	f  *os.File
	id fileID
	p  *parking
}

// keepReuse keeps a descriptor of f, which Unpark just mapped back with
// layout p, for the next Park. Failing to keep one only costs that Park
// a full copy.
func (d *Device) keepReuse(f *os.File, p *parking) {
	d.dropReuse()
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return
	}
	own := os.NewFile(uintptr(fd), "parked-devmem")
	id, err := fileIDOf(own)
	if err != nil {
		own.Close()
		return
	}
	d.reuse = &parkReuse{f: own, id: id, p: p}
}

// dropReuse closes the worker's descriptor of the last park's file.
func (d *Device) dropReuse() {
	if d.reuse != nil {
		d.reuse.f.Close()
		d.reuse = nil
	}
}

// parkInPlace parks into the last Unpark's file when the regions are
// those it held, every allocation still mapping it where it did: the pages
// the client wrote since (and the physical allocations, which are shared
// memory, whole) are written into it, the regions released and the file
// handed out again. It fails, changing nothing the session can see, when
// the file cannot be reused; the caller then copies everything.
func (d *Device) parkInPlace(ctx context.Context, p *parking, src [][]byte) ([]*os.File, error) {
	ru := d.reuse
	if ru == nil {
		return nil, errors.New("no file kept from the last unpark")
	}
	if len(ru.p.regions) != len(p.regions) || ru.p.size != p.size {
		return nil, errors.New("the regions changed since the last unpark")
	}
	for i, r := range p.regions {
		if ru.p.regions[i] != r {
			return nil, fmt.Errorf("region %#x changed since the last unpark", r.ID)
		}
		if r.Kind != backend.MemAlloc {
			continue
		}
		if a := d.mem.find(r.ID); a == nil || !a.mapped || a.mapFile != ru.id || a.mapOff != r.off {
			return nil, fmt.Errorf("allocation %#x no longer maps the last park's file", r.ID)
		}
	}
	// The file is about to change: no snapshot of it may be read now.
	d.dropSnapshot()
	var copied int64
	for i, r := range p.regions {
		var (
			n   int64
			err error
		)
		if r.Kind == backend.MemAlloc {
			n, err = writeDirty(ru.f, src[i], r.off)
		} else {
			n, err = int64(len(src[i])), pwriteAll(ru.f, src[i], r.off)
		}
		if err != nil {
			return nil, fmt.Errorf("bring region %#x of the last park's file up to date: %w", r.ID, err)
		}
		copied += n
	}
	fd, err := unix.FcntlInt(ru.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("copy the descriptor of the parked memory: %w", err)
	}
	out := os.NewFile(uintptr(fd), "parked-devmem")
	if err := d.ReleaseMem(ctx); err != nil {
		// The file holds every region as it is: put them back from it.
		view, merr := unix.Mmap(int(out.Fd()), 0, int(p.size), unix.PROT_READ, unix.MAP_SHARED)
		if merr == nil {
			merr = d.restoreParked(ctx, p, out, view)
			_ = unix.Munmap(view)
		}
		out.Close()
		if merr != nil {
			return nil, fmt.Errorf("park device memory: release: %w; and putting it back: %v", err, merr)
		}
		return nil, fmt.Errorf("park device memory: release: %w", err)
	}
	d.parked = p
	d.LastPark = ParkStats{Reused: true, Copied: copied}
	return []*os.File{out}, nil
}

// writeDirty writes into f at off the pages of b, a private mapping of f
// at off, that no longer come from the file: those the client wrote
// (copy-on-write made them anonymous) and any of those swapped out. It
// returns the bytes written.
func writeDirty(f *os.File, b []byte, off int64) (int64, error) {
	if len(b) == 0 {
		return 0, nil
	}
	pm, err := procmem.OpenPageMap()
	if err != nil {
		return 0, err
	}
	defer pm.Close()
	page := os.Getpagesize()
	pages := (len(b) + page - 1) / page
	start := uint64(uintptr(unsafe.Pointer(&b[0])) / uintptr(page))
	const batch = 1 << 16 // entries read at once (512 KiB)
	ents := make([]uint64, batch)
	var written int64
	run := -1 // first page of the run of dirty pages being gathered
	flush := func(end int) error {
		if run < 0 {
			return nil
		}
		lo, hi := run*page, min(end*page, len(b))
		run = -1
		written += int64(hi - lo)
		return pwriteAll(f, b[lo:hi], off+int64(lo))
	}
	for i := 0; i < pages; i += batch {
		n := min(batch, pages-i)
		if err := pm.Read(start+uint64(i), ents[:n]); err != nil {
			return written, err
		}
		for j, e := range ents[:n] {
			dirty := e&procmem.PageSwapped != 0 || (e&procmem.PagePresent != 0 && e&procmem.PageFile == 0)
			switch {
			case dirty && run < 0:
				run = i + j
			case !dirty:
				if err := flush(i + j); err != nil {
					return written, err
				}
			}
		}
	}
	return written, flush(pages)
}

// pwriteAll writes all of b into f at off.
func pwriteAll(f *os.File, b []byte, off int64) error {
	for len(b) > 0 {
		n, err := unix.Pwrite(int(f.Fd()), b, off)
		if err != nil {
			return err
		}
		b, off = b[n:], off+int64(n)
	}
	return nil
}
