package dispatch

import (
	"context"
	"fmt"
	"io"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// doMemcpyHtoD streams the frame's bulk payload into device memory.
func (s *Session) doMemcpyHtoD(ctx context.Context, x *call, c backend.Ctx, dst backend.DevPtr, n uint64, st backend.Stream) error {
	if n != x.h.Bulk {
		return cu.Errorf(cu.ErrorInvalidValue, "MemcpyHtoD: %d bytes announced, %d bytes of payload", n, x.h.Bulk)
	}
	// The backend must consume all n bytes even when it fails; the loop
	// drains whatever it leaves anyway.
	return s.dev.MemcpyHtoD(ctx, c, dst, &x.bulkIn, n, st)
}

// doMemcpyDtoH streams device memory into the reply. The reply header is
// written when the backend writes its first byte, so that a failure before
// any data gets an ordinary error reply.
func (s *Session) doMemcpyDtoH(ctx context.Context, x *call, c backend.Ctx, src backend.DevPtr, n uint64, st backend.Stream) error {
	if x.h.Bulk != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "MemcpyDtoH: request carries %d bytes of payload", x.h.Bulk)
	}
	if n > wire.MaxBulk {
		return cu.Errorf(cu.ErrorInvalidValue, "MemcpyDtoH: %d bytes exceeds the protocol's bulk limit", n)
	}
	bo := &bulkOut{x: x, n: n}
	err := s.dev.MemcpyDtoH(ctx, c, bo, src, n, st)
	switch {
	case bo.written == n && (bo.started || n == 0) && err == nil:
		if !bo.started {
			return nil // zero-byte copy: an ordinary reply
		}
		return nil
	case !bo.started:
		return err
	default:
		// Part of the data is on the wire and the rest will never be:
		// the connection cannot be resynchronised.
		return fmt.Errorf("%w: MemcpyDtoH of %d bytes stopped after %d: %v", errFatal, n, bo.written, err)
	}
}

type bulkOut struct {
	x       *call
	n       uint64
	written uint64
	started bool
	keep    *deferredEntry // where a deferred copy's reply is kept for replay
}

func (b *bulkOut) Write(p []byte) (int, error) {
	if uint64(len(p)) > b.n-b.written {
		return 0, fmt.Errorf("backend wrote more than the %d bytes requested", b.n)
	}
	if !b.started {
		b.started = true
		b.x.replied = true
		var h [wire.ReplyHeaderSize]byte
		rh := wire.ReplyHeader{Kind: wire.KindReply, Seq: b.x.h.Seq, Executed: b.x.h.Seq, Bulk: b.n}
		rh.Put(h[:])
		if b.x.h.Deferred() {
			b.keep = b.x.s.deferred.start(b.x.h.Seq, h[:], b.n)
		}
		if _, err := b.x.bw.Write(h[:]); err != nil {
			return 0, err
		}
	}
	m, err := b.x.bw.Write(p)
	b.written += uint64(m)
	if b.keep != nil {
		b.keep.add(p[:m])
	}
	return m, err
}

// doModuleLoad reads the module image from the bulk payload.
func (s *Session) doModuleLoad(ctx context.Context, x *call, c backend.Ctx) (backend.Module, error) {
	if x.h.Bulk > wire.MaxImage {
		return 0, cu.Errorf(cu.ErrorInvalidImage, "module image of %d bytes exceeds %d", x.h.Bulk, wire.MaxImage)
	}
	if x.h.Bulk == 0 {
		return 0, cu.Errorf(cu.ErrorInvalidImage, "empty module image")
	}
	img := make([]byte, x.h.Bulk)
	if _, err := io.ReadFull(&x.bulkIn, img); err != nil {
		return 0, fmt.Errorf("%w: read module image: %v", errFatal, err)
	}
	return s.dev.ModuleLoad(ctx, c, img)
}

// maxParamBytes is CUDA's limit on a kernel's parameter buffer.
const maxParamBytes = 32764

// doLaunch builds the launch configuration.
func (s *Session) doLaunch(ctx context.Context, x *call, c backend.Ctx, fn backend.Function,
	gx, gy, gz, bx, by, bz, shared uint32, st backend.Stream, params []byte) error {
	if len(params) > maxParamBytes {
		return cu.Errorf(cu.ErrorInvalidValue, "launch: %d bytes of parameters exceeds %d", len(params), maxParamBytes)
	}
	return s.dev.Launch(ctx, c, fn, backend.LaunchConfig{
		Grid:        [3]uint32{gx, gy, gz},
		Block:       [3]uint32{bx, by, bz},
		SharedBytes: shared,
		Stream:      st,
		Params:      append([]byte(nil), params...), // the args buffer is reused for the next frame
	})
}

// LaunchExCooperative is bit 0 of LaunchEx's flags.
const LaunchExCooperative = 1

// doLaunchEx builds a launch configuration with clusters or the
// cooperative flag.
func (s *Session) doLaunchEx(ctx context.Context, x *call, c backend.Ctx, fn backend.Function,
	gx, gy, gz, bx, by, bz, shared uint32, st backend.Stream, cx, cy, cz, flags uint32, params []byte) error {
	if len(params) > maxParamBytes {
		return cu.Errorf(cu.ErrorInvalidValue, "launch: %d bytes of parameters exceeds %d", len(params), maxParamBytes)
	}
	if flags&^LaunchExCooperative != 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "launch: unknown flags %#x", flags)
	}
	if cx == 0 || cy == 0 || cz == 0 {
		return cu.Errorf(cu.ErrorInvalidValue, "launch: cluster %dx%dx%d has a zero dimension", cx, cy, cz)
	}
	return s.dev.Launch(ctx, c, fn, backend.LaunchConfig{
		Grid:        [3]uint32{gx, gy, gz},
		Block:       [3]uint32{bx, by, bz},
		SharedBytes: shared,
		Stream:      st,
		Params:      append([]byte(nil), params...), // the args buffer is reused for the next frame
		Cluster:     [3]uint32{cx, cy, cz},
		Cooperative: flags&LaunchExCooperative != 0,
	})
}

// doOccupancyClusters asks the device's cluster occupancy for a launch
// shape (a zero cluster dimension: the function's own shape).
func (s *Session) doOccupancyClusters(ctx context.Context, x *call, c backend.Ctx, fn backend.Function,
	gx, gy, gz, bx, by, bz, shared, cx, cy, cz, query uint32) (int32, error) {
	q := backend.ClusterQuery(query)
	if q != backend.ClusterMaxActive && q != backend.ClusterMaxSize {
		return 0, cu.Errorf(cu.ErrorInvalidValue, "cluster occupancy: unknown query %d", query)
	}
	return s.dev.OccupancyClusters(ctx, c, fn, backend.LaunchConfig{
		Grid:        [3]uint32{gx, gy, gz},
		Block:       [3]uint32{bx, by, bz},
		SharedBytes: shared,
		Cluster:     [3]uint32{cx, cy, cz},
	}, q)
}
