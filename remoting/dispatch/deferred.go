package dispatch

import (
	"fmt"

	"github.com/gpuctl/gpuctl/remoting/wire"
)

// A deferred request (wire.FlagDeferred) is a device-to-host copy into the
// client's page-locked memory that the client queues without waiting: its
// reply is read whenever it arrives, and the work queued after it runs on
// the device meanwhile. If that reply is lost with the connection, reading
// device memory again on the resend could return what later kernels wrote
// there, so the session keeps the replies of recent deferred copies, data
// included, and replays them. The client reads replies continuously while
// deferred copies are outstanding, so what a cut connection can lose is
// about what the sockets hold; the budget bounds the worker's memory (and
// what a checkpoint of it carries). A copy larger than deferredKeepMax,
// or one evicted before it was resent, is read again.

// deferredBudget bounds the bytes of deferred replies a session keeps;
// deferredKeepMax is the largest copy kept. Keeping costs a memory copy
// of the data on every deferred copy, not only on the rare resend, and a
// large copy pays it where the transport is the bottleneck (on loopback
// it slowed a 32 MiB pass by a third), so large copies are read again
// instead, as synchronous ones always are.
const (
	deferredBudget  = 16 << 20
	deferredKeepMax = 4 << 20
)

// checkDeferred refuses FlagDeferred where it has no meaning.
func checkDeferred(h wire.RequestHeader) error {
	if !h.Deferred() {
		return nil
	}
	if h.Async() || (h.Op != wire.OpMemcpyDtoH && h.Op != wire.OpMemcpyDtoH3D) {
		return fmt.Errorf("%w: op %s (seq %d) cannot be deferred", wire.ErrProtocol, h.Op, h.Seq)
	}
	return nil
}

type deferredEntry struct {
	seq   uint64
	frame []byte // reply header and data
	want  int    // len(frame) once complete
}

func (e *deferredEntry) add(p []byte) { e.frame = append(e.frame, p...) }

// deferredCache keeps the replies of recent deferred copies, first in
// first out, within deferredBudget bytes.
type deferredCache struct {
	entries []*deferredEntry // oldest first
	bytes   int
}

// start begins keeping the reply of seq: its header now, its n bytes of
// data as they are written. It returns nil when the reply is too large to
// keep.
func (c *deferredCache) start(seq uint64, hdr []byte, n uint64) *deferredEntry {
	if n > deferredKeepMax {
		return nil
	}
	size := len(hdr) + int(n)
	var buf []byte
	for c.bytes+size > deferredBudget && len(c.entries) > 0 {
		old := c.entries[0]
		c.entries[0] = nil
		c.entries = c.entries[1:]
		c.bytes -= old.want
		if cap(old.frame) >= size && buf == nil {
			buf = old.frame[:0] // reuse the evicted entry's memory
		}
	}
	if buf == nil {
		buf = make([]byte, 0, size)
	}
	e := &deferredEntry{seq: seq, frame: append(buf, hdr...), want: size}
	c.entries = append(c.entries, e)
	c.bytes += size
	return e
}

// get returns the complete reply of seq, or nil.
func (c *deferredCache) get(seq uint64) []byte {
	for _, e := range c.entries {
		if e.seq == seq && len(e.frame) == e.want {
			return e.frame
		}
	}
	return nil
}
