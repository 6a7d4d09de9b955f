package backend

import (
	"context"
	"os"
)

// MemRegion is one range of device memory backed by physical memory: a
// cuMemAlloc or pool allocation, a module variable, or a physical
// allocation of virtual memory management. Kind and ID name it for as
// long as it lives (an address is never handed out twice while a session
// runs), so two saves of one session can tell an unchanged region from a
// new one.
type MemRegion struct {
	Kind uint8  `json:"kind"` // MemAlloc or MemPhysical
	ID   uint64 `json:"id"`   // device address (MemAlloc) or handle (MemPhysical)
	Size uint64 `json:"size"`
}

// MemRegion kinds.
const (
	MemAlloc    uint8 = 0
	MemPhysical uint8 = 1
)

// DeviceMemory is what a backend offers so that the worker can save its
// session's device memory itself, block by block, release the physical
// memory before the process is dumped, and bring it back at the same
// device addresses after a restore. Package devmem drives it; a backend
// without it is checkpointed whole by the driver and CRIU.
//
// Calls come from the worker's call thread while the session is quiesced,
// except ReadMem and HashBlocks, which may also run from other
// goroutines, concurrently with each other, between those calls. A live
// migration's pre-copy also calls MemRegions and ReadMem while the session
// runs, from another goroutine but never during a request (the worker
// holds its requests back meanwhile, dispatch.Session.Between). Work the
// session queued earlier may still be running on the device then (the
// cuda backend's streams), so such a read may see a block half written:
// the worker hashes the bytes it read, not the device's, and a block torn
// that way differs from the device at the freeze and is sent again.
type DeviceMemory interface {
	// MemRegions lists every region, in a stable order.
	MemRegions(ctx context.Context) ([]MemRegion, error)
	// ReadMem copies len(dst) bytes at offset off of region r into dst.
	ReadMem(ctx context.Context, r MemRegion, off uint64, dst []byte) error
	// WriteMem copies src to offset off of region r.
	WriteMem(ctx context.Context, r MemRegion, off uint64, src []byte) error
	// HashBlocks hashes r in blocks of block bytes (the last one may be
	// shorter) with devmem's block hash and seed, into out (one per
	// block). The cuda backend runs it on the device.
	HashBlocks(ctx context.Context, r MemRegion, block uint64, seed uint64, out []uint64) error
	// ReleaseMem drops the physical memory of every region, keeping its
	// device addresses reserved; RestoreMem backs them again (contents
	// undefined until written).
	ReleaseMem(ctx context.Context) error
	RestoreMem(ctx context.Context) error
}

// HostPinner is a DeviceMemory that copies straight between the device
// and host memory it pinned, with no bounce buffer: a ReadMem or WriteMem
// whose host bytes lie within one pinned range is one direct copy.
// Package devmem pins its memory file in parts of PinPart bytes from the
// file's start, each with its own call, from several goroutines at once,
// and cuts its copies at those boundaries.
type HostPinner interface {
	// PinHost pins b until unpin is called; b must stay mapped until
	// then.
	PinHost(ctx context.Context, b []byte) (unpin func(), err error)
}

// PinPart is the size of the parts devmem pins (see HostPinner).
const PinPart = 256 << 20

// MemMapper is a DeviceMemory whose device memory is host memory (the
// emulated device): a reload can map a saved file's pages at a region
// instead of copying them in, which for gigabytes saves the copy and the
// page faults of fresh memory.
type MemMapper interface {
	// MapMem backs region r (a MemAlloc) with the r.Size bytes of f at
	// off, a multiple of the page size, privately: writes go to the
	// region's own pages, never to f. The next ReleaseMem drops the
	// mapping with the rest of the region's memory.
	MapMem(ctx context.Context, r MemRegion, f *os.File, off int64) error
}

// Parker is a DeviceMemory that can take its memory out of the process
// for a dump without copying it to the host while the client waits.
// Park first copies every region into memory of its own (a snapshot; on
// a GPU a device-to-device copy at the memory's own bandwidth), then
// hands the live memory and the snapshot out as files, in an order only
// the backend knows, and drops the process's own hold on both, keeping
// the live addresses reserved: the process is then as small to dump as
// after ReleaseMem, and whoever holds the files keeps the memory alive.
// Unpark takes the files back in that order: the live memory returns at
// its addresses, and the snapshot, when keep is set, at addresses of its
// own, where MemSnapshot reads it while the session runs until its
// ReleaseMem drops it; without keep the snapshot is dropped at once.
//
// Park either parks every region or nothing: on error the memory is as
// it was. A backend that cannot park this time (no room for the
// snapshot, memory that cannot be exported) says so with an error and
// the caller saves the memory the usual way.
type Parker interface {
	Park(ctx context.Context) ([]*os.File, error)
	Unpark(ctx context.Context, files []*os.File, keep bool) error
	// MemSnapshot is the memory as Park found it, for a Tracker's Save
	// (MemRegions lists the regions as they were then, under the same
	// kinds and IDs); nil when there is none. Its ReadMem and HashBlocks
	// may run from any goroutine while the session runs; WriteMem and
	// RestoreMem are refused.
	MemSnapshot() DeviceMemory
}

// UntrackedState is a DeviceMemory that can account for the device
// memory outside MemRegions that a session's kernels and copies can
// write: its modules' variables (on the emulated device they are
// allocations, in MemRegions). A checkpoint reuses the worker's last dump
// only when this digest is what it was at that dump (docs/checkpoint.md,
// "Reusing the process image"): the dump holds that memory, and nothing
// else can hold a change.
type UntrackedState interface {
	// UntrackedState digests that memory, or returns ok false when there
	// is device memory the backend cannot account for: allocations from
	// the driver's own pools, a module whose image it cannot read, or a
	// module that allocates on the device heap. Called while the session
	// is quiesced.
	UntrackedState(ctx context.Context) (digest [32]byte, ok bool, err error)
}
