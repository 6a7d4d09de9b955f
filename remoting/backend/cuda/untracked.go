package cuda

// #include <stdlib.h>
// #include "api.h"
import "C"

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"slices"
	"unsafe"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

// UntrackedState digests the variables of every module the session
// loaded (backend.UntrackedState): what its kernels and copies can change
// on the device besides its allocations, which the worker saves itself.
// It cannot account for the driver's pool allocations, for a module
// whose image it could not read (a compressed fatbin, say), nor for one
// that allocates on the device heap; it says so, and the checkpoint goes
// through the driver.
func (d *Device) UntrackedState(_ context.Context) (digest [32]byte, ok bool, err error) {
	if d.ext != nil && len(d.ext.poolMem) > 0 {
		return digest, false, nil
	}
	h := sha256.New()
	var hdr [8]byte
	for _, ch := range slices.Sorted(maps.Keys(d.ctxs)) {
		c := d.ctxs[ch]
		for _, mh := range slices.Sorted(maps.Keys(c.modules)) {
			m := c.modules[mh]
			if !m.known || m.vars.Heap {
				return digest, false, nil
			}
			for _, name := range m.vars.Globals {
				b, found, err := d.readVar(c, m, name)
				if err != nil {
					return digest, false, err
				}
				if !found {
					return digest, false, nil
				}
				binary.LittleEndian.PutUint64(hdr[:], uint64(len(b)))
				h.Write([]byte(name))
				h.Write(hdr[:])
				h.Write(b)
			}
		}
	}
	h.Sum(digest[:0])
	return digest, true, nil
}

// readVar copies module variable name to the host. It looks the variable
// up itself, not through ModuleGetGlobal, which would also let the
// client copy to and from it without having asked. found is false when
// the driver does not know the name.
func (d *Device) readVar(c *cuCtx, m *module, name string) (b []byte, found bool, err error) {
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var p C.CUdeviceptr
	var n C.size_t
	if r := C.gc_module_global(d.drv.api, c.raw, m.raw, cname, &p, &n); r != 0 {
		return nil, false, nil
	}
	st, err := d.stage(c)
	if err != nil {
		return nil, false, err
	}
	b = make([]byte, 0, int(n))
	var stream C.CUstream // the legacy default stream: after what the session queued
	for off := uint64(0); off < uint64(n); {
		k := min(uint64(n)-off, stageChunk)
		r := C.gc_dtoh(d.drv.api, c.raw, st.buf[0], C.CUdeviceptr(uint64(p)+off), C.size_t(k), stream, st.done[0])
		if err := d.drv.check(r, "cuMemcpyDtoHAsync"); err != nil {
			return nil, false, err
		}
		st.pending[0] = true
		if err := d.wait(c, st, 0); err != nil {
			return nil, false, err
		}
		b = append(b, st.bytes(0, k)...)
		off += k
	}
	return b, true, nil
}

var _ backend.UntrackedState = (*Device)(nil)
