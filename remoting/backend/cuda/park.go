package cuda

// #include "vmm.h"
import "C"

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// Parking (backend.Parker) takes a checkpoint that leaves the session
// running without copying its device memory to the host while the client
// waits. Physical memory made exportable lives as long as a handle or an
// exported descriptor of it does, in any process: the worker copies each
// chunk into a new one on the device (a snapshot; 8 GiB in ~7 ms on the
// H200), hands both out as descriptors, which gpud holds, and releases
// its own handles. The driver's checkpoint and CRIU then see a small
// process, as after ReleaseMem, and the memory stays on the GPU. Unpark
// maps the chunks back at their addresses, with no copy, and the
// snapshot at addresses of its own; the worker copies the snapshot to
// the host while the session runs again.

var _ backend.Parker = (*Device)(nil)

// parkState is what Park handed out: for chunk i, descriptor 2i is the
// live memory and 2i+1 the snapshot.
type parkState struct {
	chunks []parkedChunk
}

type parkedChunk struct {
	base   uint64 // the live chunk's address
	ch     *vmmChunk
	shadow uint64 // the snapshot's addresses, reserved while parked
}

// exportable says whether new chunks are made so that Park can hand them
// out.
func (d *Device) exportable() C.int {
	if d.vmm == nil || d.vmm.noExport {
		return 0
	}
	return 1
}

// Park snapshots every chunk on the device and hands out the chunks and
// their snapshots (see parkState for the order). The save tools are freed
// and the chunks released as by ReleaseMem; the session's memory lives in
// the descriptors until Unpark.
func (d *Device) Park(ctx context.Context) ([]*os.File, error) {
	if d.vmm == nil || d.vmm.off {
		return nil, cu.Errorf(cu.ErrorNotSupported, "the session's device memory is the driver's own, not mapped by the worker")
	}
	if d.vmm.noExport {
		return nil, cu.Errorf(cu.ErrorNotSupported, "this driver or GPU cannot hand device memory out as a file descriptor")
	}
	if d.vmm.parked != nil {
		return nil, cu.Errorf(cu.ErrorIllegalState, "device memory is parked already")
	}
	d.dropSnapshot()
	regs, err := d.MemRegions(ctx) // drains every context
	if err != nil {
		return nil, err
	}
	for _, r := range regs {
		if !d.vmm.chunks[r.ID].backed {
			return nil, cu.Errorf(cu.ErrorIllegalState, "device memory chunk %#x is released", r.ID)
		}
	}
	if len(regs) > 0 {
		// The snapshot holds the session's size again until it is saved
		// (about a second for 8 GiB): leave other sessions room.
		var free, total C.size_t
		if err := d.drv.check(C.gc_mem_info(d.drv.api, regs0ctx(d, regs).raw, &free, &total), "cuMemGetInfo (room for a snapshot)"); err != nil {
			return nil, err
		}
		need := totalSize(regs)
		headroom := max(uint64(1<<30), uint64(total)/10)
		if uint64(free) < need+headroom {
			return nil, cu.Errorf(cu.ErrorOutOfMemory, "no room on the GPU for a snapshot of %d bytes of device memory: %d free, and %d kept free for other sessions", need, uint64(free), headroom)
		}
	}
	ps := &parkState{}
	var shadows []C.CUmemGenericAllocationHandle
	freeShadows := func() {
		for i, pc := range ps.chunks {
			C.gc_vmm_free(d.drv.api, d.ext.x, pc.ch.ctx.raw, C.CUdeviceptr(pc.shadow), C.size_t(pc.ch.size), shadows[i], 1)
		}
	}
	touched := map[*cuCtx]bool{}
	for _, r := range regs {
		ch := d.vmm.chunks[r.ID]
		var (
			va C.CUdeviceptr
			h  C.CUmemGenericAllocationHandle
		)
		if err := d.drv.check(C.gc_vmm_map(d.drv.api, d.ext.x, ch.ctx.raw, C.size_t(ch.size), C.int(d.dev), 1, &va, &h), "cuMemCreate (snapshot of device memory)"); err != nil {
			freeShadows()
			d.syncAll(touched)
			return nil, fmt.Errorf("no room on the GPU for a snapshot of %d bytes of device memory: %w", totalSize(regs), err)
		}
		ps.chunks = append(ps.chunks, parkedChunk{base: r.ID, ch: ch, shadow: uint64(va)})
		shadows = append(shadows, h)
		touched[ch.ctx] = true
		if err := d.drv.check(C.gc_dtod(d.drv.api, ch.ctx.raw, va, C.CUdeviceptr(r.ID), C.size_t(ch.size), nil), "cuMemcpyDtoDAsync (snapshot of device memory)"); err != nil {
			d.syncAll(touched)
			freeShadows()
			return nil, err
		}
	}
	if err := d.syncAll(touched); err != nil {
		freeShadows()
		return nil, err
	}
	files := make([]*os.File, 0, 2*len(ps.chunks))
	for i, pc := range ps.chunks {
		live, err := d.export(pc.ch, pc.ch.handle)
		if err == nil {
			files = append(files, live)
			var snap *os.File
			snap, err = d.export(pc.ch, shadows[i])
			files = append(files, snap)
		}
		if err != nil {
			closeFiles(files)
			freeShadows()
			return nil, err
		}
	}
	// From here the descriptors hold the memory.
	for _, c := range d.ctxs {
		d.freeTools(c, false)
	}
	released := make([]bool, len(ps.chunks)) // the snapshot's chunk i is
	for i, pc := range ps.chunks {
		err := d.drv.check(C.gc_vmm_unback(d.drv.api, d.ext.x, pc.ch.ctx.raw, C.CUdeviceptr(pc.base), C.size_t(pc.ch.size), pc.ch.handle), "cuMemUnmap/cuMemRelease (park device memory)")
		if err == nil {
			pc.ch.backed = false
			err = d.drv.check(C.gc_vmm_unback(d.drv.api, d.ext.x, pc.ch.ctx.raw, C.CUdeviceptr(pc.shadow), C.size_t(pc.ch.size), shadows[i]), "cuMemUnmap/cuMemRelease (park the snapshot)")
			released[i] = err == nil
		}
		if err == nil {
			continue
		}
		// Put back what left: the descriptors still hold it.
		d.vmm.parked = ps
		if uerr := d.unparkLive(files); uerr != nil {
			err = fmt.Errorf("%w; and mapping the parked memory back: %v", err, uerr)
		}
		d.vmm.parked = nil
		for j, pj := range ps.chunks {
			if released[j] {
				d.unreserve(pj.ch.ctx, pj.shadow, pj.ch.size)
			} else {
				C.gc_vmm_free(d.drv.api, d.ext.x, pj.ch.ctx.raw, C.CUdeviceptr(pj.shadow), C.size_t(pj.ch.size), shadows[j], 1)
			}
		}
		closeFiles(files)
		return nil, err
	}
	for _, pc := range ps.chunks {
		pc.ch.dropFD() // handed out (a copy); none may be open in the dump
	}
	d.vmm.parked = ps
	return files, nil
}

// export hands out h, a handle of ch's or of its snapshot, as a
// descriptor; for ch's own handle when it was imported by an unpark, a
// copy of the descriptor kept then (vmmChunk.fd).
func (d *Device) export(ch *vmmChunk, h C.CUmemGenericAllocationHandle) (*os.File, error) {
	if h == ch.handle && ch.fd != nil {
		fd, err := unix.FcntlInt(ch.fd.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("copy the descriptor of device memory chunk: %w", err)
		}
		return os.NewFile(uintptr(fd), ch.fd.Name()), nil
	}
	var fd C.int
	if err := d.drv.check(C.gc_vmm_export(d.drv.api, d.ext.x, ch.ctx.raw, h, &fd), "cuMemExportToShareableHandle (park device memory)"); err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), "devmem"), nil
}

func closeFiles(fs []*os.File) {
	for _, f := range fs {
		if f != nil {
			f.Close()
		}
	}
}

// regs0ctx is the context of the first region's chunk.
func regs0ctx(d *Device, regs []backend.MemRegion) *cuCtx {
	return d.vmm.chunks[regs[0].ID].ctx
}

func totalSize(regs []backend.MemRegion) uint64 {
	var n uint64
	for _, r := range regs {
		n += r.Size
	}
	return n
}

// syncAll waits for the work queued in the contexts of touched.
func (d *Device) syncAll(touched map[*cuCtx]bool) error {
	var first error
	for c := range touched {
		if err := d.drv.check(C.gc_ctx_synchronize(d.drv.api, c.raw), "cuCtxSynchronize (snapshot of device memory)"); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (d *Device) unreserve(c *cuCtx, va, size uint64) {
	if err := d.drv.check(C.gc_vmm_unreserve(d.drv.api, d.ext.x, c.raw, C.CUdeviceptr(va), C.size_t(size)), "cuMemAddressFree (snapshot)"); err != nil {
		d.log.Warn("freeing a snapshot's device addresses", "addr", fmt.Sprintf("%#x", va), "err", err)
	}
}

// unparkLive maps every parked chunk not yet back at its address from
// its descriptor (files in Park's order).
func (d *Device) unparkLive(files []*os.File) error {
	for i, pc := range d.vmm.parked.chunks {
		if pc.ch.backed {
			continue
		}
		var h C.CUmemGenericAllocationHandle
		r := C.gc_vmm_import(d.drv.api, d.ext.x, pc.ch.ctx.raw, C.CUdeviceptr(pc.base), C.size_t(pc.ch.size), C.int(d.dev), C.int(files[2*i].Fd()), &h)
		if err := d.drv.check(r, fmt.Sprintf("cuMemImportFromShareableHandle/cuMemMap (unpark device memory at %#x)", pc.base)); err != nil {
			return err
		}
		pc.ch.handle, pc.ch.backed = h, true
		// The next park hands out a copy of this descriptor (vmmChunk.fd).
		if fd, err := unix.FcntlInt(files[2*i].Fd(), unix.F_DUPFD_CLOEXEC, 0); err == nil {
			pc.ch.fd = os.NewFile(uintptr(fd), "devmem")
		} else {
			d.log.Warn("keeping a descriptor of unparked device memory; the next checkpoint copies it instead of parking", "err", err)
		}
	}
	return nil
}

// Unpark maps the parked chunks back from files (Park's, in its order;
// the caller keeps and closes them) and, with keep, the snapshot too.
// When the live memory is back but the snapshot cannot be mapped, the
// session can run on: Unpark logs why and MemSnapshot is nil.
func (d *Device) Unpark(ctx context.Context, files []*os.File, keep bool) error {
	if d.vmm == nil || d.vmm.parked == nil {
		if len(files) == 0 {
			if keep && d.vmm != nil {
				d.setSnapshot(&snapshot{d: d})
			}
			return nil
		}
		return cu.Errorf(cu.ErrorIllegalState, "no device memory is parked, yet %d descriptors came back", len(files))
	}
	ps := d.vmm.parked
	if len(files) != 2*len(ps.chunks) {
		return cu.Errorf(cu.ErrorInvalidValue, "%d descriptors came back for %d parked chunks; want %d", len(files), len(ps.chunks), 2*len(ps.chunks))
	}
	if err := d.unparkLive(files); err != nil {
		return err // parked still: a retry maps the rest
	}
	d.vmm.parked = nil
	if !keep {
		for _, pc := range ps.chunks {
			d.unreserve(pc.ch.ctx, pc.shadow, pc.ch.size)
		}
		return nil
	}
	s := &snapshot{d: d, at: make(map[uint64]shadowChunk, len(ps.chunks))}
	for i, pc := range ps.chunks {
		sc := shadowChunk{ctx: pc.ch.ctx, va: pc.shadow, size: pc.ch.size}
		if s.err == nil {
			r := C.gc_vmm_import(d.drv.api, d.ext.x, pc.ch.ctx.raw, C.CUdeviceptr(pc.shadow), C.size_t(pc.ch.size), C.int(d.dev), C.int(files[2*i+1].Fd()), &sc.handle)
			if err := d.drv.check(r, "cuMemImportFromShareableHandle/cuMemMap (the snapshot)"); err != nil {
				s.err = err
				d.log.Warn("the session's memory is back but its snapshot is not; this checkpoint cannot be stored", "err", err)
			} else {
				sc.mapped = true
			}
		}
		s.regs = append(s.regs, backend.MemRegion{Kind: backend.MemAlloc, ID: pc.base, Size: pc.ch.size})
		s.at[pc.base] = sc
	}
	if s.err != nil {
		_ = s.ReleaseMem(ctx)
		return nil
	}
	d.setSnapshot(s)
	return nil
}

// forgetParked drops what a dump made while parked remembers of the
// parked memory: restored elsewhere (or on this host, from an image),
// the worker gets its memory from the image.
func (d *Device) forgetParked() {
	ps := d.vmm.parked
	if ps == nil {
		return
	}
	d.vmm.parked = nil
	for _, pc := range ps.chunks {
		// The reservation may not have survived the restore; a failure
		// only means there was nothing to free.
		C.gc_vmm_unreserve(d.drv.api, d.ext.x, pc.ch.ctx.raw, C.CUdeviceptr(pc.shadow), C.size_t(pc.ch.size))
	}
}

// MemSnapshot returns the snapshot the last Unpark kept, or nil.
func (d *Device) MemSnapshot() backend.DeviceMemory {
	if d.vmm == nil {
		return nil
	}
	d.vmm.mu.Lock()
	defer d.vmm.mu.Unlock()
	if d.vmm.snap == nil {
		return nil
	}
	return d.vmm.snap
}

func (d *Device) setSnapshot(s *snapshot) {
	d.vmm.mu.Lock()
	d.vmm.snap = s
	d.vmm.mu.Unlock()
}

// dropSnapshot frees a snapshot no one saved (its save failed).
func (d *Device) dropSnapshot() {
	d.vmm.mu.Lock()
	s := d.vmm.snap
	d.vmm.mu.Unlock()
	if s != nil {
		_ = s.ReleaseMem(context.Background())
	}
}

// snapshot is the session's device memory as Park found it, read while
// the session runs (backend.Parker.MemSnapshot).
type snapshot struct {
	d    *Device
	regs []backend.MemRegion
	at   map[uint64]shadowChunk // by the live chunk's address
	err  error                  // why a chunk could not be mapped

	mu   sync.RWMutex // reads hold it shared, ReleaseMem exclusively
	gone bool
}

type shadowChunk struct {
	ctx    *cuCtx
	va     uint64
	size   uint64
	handle C.CUmemGenericAllocationHandle
	mapped bool
}

func (s *snapshot) MemRegions(context.Context) ([]backend.MemRegion, error) {
	return slices.Clone(s.regs), nil
}

// span looks r up and holds the snapshot against a release until done is
// called: a copy or a hash in flight must not read freed device memory.
func (s *snapshot) span(r backend.MemRegion, off uint64, n int) (sc shadowChunk, done func(), err error) {
	s.mu.RLock()
	sc, ok := s.at[r.ID]
	if s.gone || !ok || !sc.mapped || r.Kind != backend.MemAlloc || sc.size != r.Size {
		s.mu.RUnlock()
		return shadowChunk{}, nil, cu.Errorf(cu.ErrorInvalidValue, "no snapshot of device memory region %d/%#x of %d bytes", r.Kind, r.ID, r.Size)
	}
	if off > r.Size || uint64(n) > r.Size-off {
		s.mu.RUnlock()
		return shadowChunk{}, nil, cu.Errorf(cu.ErrorInvalidValue, "%d bytes at offset %d run past region %#x of %d bytes", n, off, r.ID, r.Size)
	}
	return sc, s.mu.RUnlock, nil
}

func (s *snapshot) ReadMem(ctx context.Context, r backend.MemRegion, off uint64, dst []byte) error {
	sc, done, err := s.span(r, off, len(dst))
	if err != nil {
		return err
	}
	defer done()
	return s.d.copyAt(ctx, sc.ctx, sc.va+off, dst, false)
}

func (s *snapshot) HashBlocks(ctx context.Context, r backend.MemRegion, block, seed uint64, out []uint64) error {
	sc, done, err := s.span(r, 0, 0)
	if err != nil {
		return err
	}
	defer done()
	return s.d.hashAt(ctx, sc.ctx, sc.va, sc.size, block, seed, out)
}

func (s *snapshot) WriteMem(context.Context, backend.MemRegion, uint64, []byte) error {
	return cu.Errorf(cu.ErrorNotPermitted, "a snapshot of device memory is read-only")
}

func (s *snapshot) RestoreMem(context.Context) error {
	return cu.Errorf(cu.ErrorNotPermitted, "a snapshot of device memory cannot be backed again")
}

// ReleaseMem frees the snapshot's memory and addresses, and the save
// tools it used, so that the next dump carries none of them.
func (s *snapshot) ReleaseMem(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone {
		return nil
	}
	s.gone = true
	d := s.d
	var first error
	ctxs := map[*cuCtx]bool{}
	for _, sc := range s.at {
		mapped := C.int(0)
		if sc.mapped {
			mapped = 1
		}
		err := d.drv.check(C.gc_vmm_free(d.drv.api, d.ext.x, sc.ctx.raw, C.CUdeviceptr(sc.va), C.size_t(sc.size), sc.handle, mapped), "cuMemUnmap/cuMemRelease (snapshot)")
		if err != nil && first == nil {
			first = err
		}
		ctxs[sc.ctx] = true
	}
	for c := range ctxs {
		d.freeTools(c, false)
	}
	d.vmm.mu.Lock()
	if d.vmm.snap == s {
		d.vmm.snap = nil
	}
	d.vmm.mu.Unlock()
	return first
}
