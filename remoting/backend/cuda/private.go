package cuda

// #include "private.h"
import "C"

import (
	"context"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

// TPCLayout asks the driver's private table for the TPC layout of c's
// device (backend.TPCLayouts).
func (d *Device) TPCLayout(_ context.Context, h backend.Ctx) (gpc, local []byte, err error) {
	c, err := d.ctx(h)
	if err != nil {
		return nil, nil, err
	}
	var g, l [256]C.uchar
	var n C.uint
	if err := d.drv.check(C.gc_tpc_layout(d.drv.api, c.raw, &g[0], &l[0], &n), "export table 1734dc26 slot 4"); err != nil {
		return nil, nil, err
	}
	gpc, local = make([]byte, n), make([]byte, n)
	for i := range gpc {
		gpc[i], local[i] = byte(g[i]), byte(l[i])
	}
	return gpc, local, nil
}

// StreamGetID answers cuStreamGetId from the driver.
func (d *Device) StreamGetID(_ context.Context, h backend.Ctx, s backend.Stream) (uint64, error) {
	c, raw, err := d.ctxStream(h, s)
	if err != nil {
		return 0, err
	}
	var id C.ulonglong
	if err := d.drv.check(C.gc_stream_get_id(d.drv.api, c.raw, raw, &id), "cuStreamGetId"); err != nil {
		return 0, err
	}
	return uint64(id), nil
}

// MemHandleRetain takes one more reference to a physical allocation; the
// driver's handle is released with the last (MemRelease).
func (d *Device) MemHandleRetain(_ context.Context, h backend.MemHandle) error {
	_, vh, err := d.handle(h)
	if err != nil {
		return err
	}
	vh.refs++
	return nil
}
