package backend

import "context"

// TPCLayouts answers what NVIDIA's driver hands cuBLASLt through a private
// export table (docs/export-tables.md, table 1734dc26 slot 4): for each
// TPC of the context's device, in the driver's logical order, the GPC it
// belongs to and its index within that GPC. Both slices have one byte per
// TPC. A backend that cannot say returns cu.ErrorNotSupported, which is
// also what the driver answers on GPUs that keep no such table.
type TPCLayouts interface {
	TPCLayout(ctx context.Context, c Ctx) (gpc, local []byte, err error)
}

// StreamIDs answers cuStreamGetId: a stream's unique number in the
// process that owns the device. s may be 1 (CU_STREAM_LEGACY) or 2
// (CU_STREAM_PER_THREAD) besides a stream handle.
type StreamIDs interface {
	StreamGetID(ctx context.Context, c Ctx, s Stream) (uint64, error)
}

// MemHandleRetainer takes one more reference to a physical allocation
// (backend.VirtualMemory's MemRelease drops it), for a handle a client
// imports from a shareable handle it exported.
type MemHandleRetainer interface {
	MemHandleRetain(ctx context.Context, h MemHandle) error
}
