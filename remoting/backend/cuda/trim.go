package cuda

// #include "ext.h"
import "C"

import (
	"context"
	"errors"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

var _ backend.ContextTrimmer = (*Device)(nil)

// The driver reserves, in every context, a stack for every thread the GPU
// can hold at once: CU_LIMIT_STACK_SIZE bytes each (1 KiB by default,
// about 260 MiB of an H200's memory). The driver's checkpoint copies that
// reservation into the process like any other device memory, CRIU dumps
// it, and the restore copies it back: a quarter of a second each way for
// bytes that hold nothing between launches (a thread's stack lives only
// as long as its thread). Only the stack is trimmed: the device heap
// (CU_LIMIT_MALLOC_HEAP_SIZE) holds kernels' allocations across launches,
// and the driver refuses to resize it, or the printf buffer, once a kernel
// used them.

const (
	limitStackSize = 0 // CU_LIMIT_STACK_SIZE
	// trimmedStack is what a trimmed context's stack is set to: the
	// driver rounds smaller values up to its own least.
	trimmedStack = 16
)

// TrimContexts drops every context's per-thread stack to the least the
// driver allows, remembering the size the program set (or the default).
// A context it cannot trim is left as it is; the first failure is
// returned after the others were tried.
func (d *Device) TrimContexts(context.Context) error {
	if len(d.ctxs) == 0 {
		return nil
	}
	x, err := d.extended()
	if err != nil {
		return err
	}
	var errs []error
	for _, c := range d.ctxs {
		if c.stack != 0 {
			continue // trimmed already: keep what the program set
		}
		var v C.size_t
		if err := d.drv.check(C.gc_ctx_get_limit(d.drv.api, x.x, c.raw, limitStackSize, &v), "cuCtxGetLimit (stack, to trim it)"); err != nil {
			errs = append(errs, err)
			continue
		}
		if uint64(v) <= trimmedStack {
			continue
		}
		if err := d.drv.check(C.gc_ctx_set_limit(d.drv.api, x.x, c.raw, limitStackSize, trimmedStack), "cuCtxSetLimit (trim the stack)"); err != nil {
			errs = append(errs, err)
			continue
		}
		c.stack = uint64(v)
	}
	return errors.Join(errs...)
}

// UntrimContexts sets every trimmed context's stack back to what
// TrimContexts found, so that the program reads back what it set and its
// kernels get the stack they had. The driver reserves the memory again
// here, before the session's next launch, rather than in that launch.
func (d *Device) UntrimContexts(context.Context) error {
	var errs []error
	for _, c := range d.ctxs {
		if c.stack == 0 {
			continue
		}
		x, err := d.extended()
		if err != nil {
			return err
		}
		if err := d.drv.check(C.gc_ctx_set_limit(d.drv.api, x.x, c.raw, limitStackSize, C.size_t(c.stack)), "cuCtxSetLimit (set the stack back)"); err != nil {
			errs = append(errs, err)
			continue
		}
		c.stack = 0
	}
	return errors.Join(errs...)
}
