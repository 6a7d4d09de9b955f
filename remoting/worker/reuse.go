package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/dispatch"
)

// A checkpoint of a session whose worker changed nothing since its last
// dump but its device memory (which the worker saves itself) and its
// protocol state (which it hands over) stores the device memory and the
// protocol state only and keeps the earlier dump: no driver checkpoint,
// no CRIU, a pause of a few milliseconds (docs/checkpoint.md, "Reusing
// the process image"). A restore then puts the protocol state into the
// worker restored from the dump (importState).
//
// "Changed nothing" is judged from what the worker saw: every request
// executed since the dump is of an op that keeps the host state
// (spec.Op.Keeps) or a kernel launch, and the device memory outside the
// session's allocations that those can write (its modules' variables)
// digests as it did then (backend.UntrackedState). A backend that cannot
// account for that memory never reuses.

// stateMark is what the worker was at one quiesce.
type stateMark struct {
	changes, launches uint64
	digest            [32]byte
	// ok: the backend accounted for all of its device memory outside
	// the session's allocations.
	ok bool
}

// mark takes the worker's stateMark; the session is quiesced.
func (w *worker) mark() stateMark {
	var m stateMark
	m.changes, m.launches = w.sess.Changes()
	u, isU := w.dev.(backend.UntrackedState)
	if !isU {
		return m
	}
	var err error
	w.thread.run(func() { m.digest, m.ok, err = u.UntrackedState(context.Background()) })
	if err != nil {
		w.log.Info("the device memory outside the session's allocations could not be read; the next checkpoint dumps the worker", "err", err)
		m.ok = false
	}
	return m
}

// reuse answers whether the quiesced worker is, but for its device
// memory and protocol state, what it was when dumped for nonce. If it is,
// it returns that protocol state in a memfd; otherwise reason says why
// not.
func (w *worker) reuse(nonce string) (f *os.File, reason string, err error) {
	if w.serving != nil {
		return nil, "", errors.New("reuse: the worker is serving; quiesce first")
	}
	q, d := w.quiesced, w.dumped
	switch {
	case w.dumpNonce == "" || w.dumpNonce != nonce:
		return nil, "the worker's last dump is not the one of the session's last image", nil
	case !q.ok || !d.ok:
		return nil, "the backend cannot account for all of the session's device memory (pool allocations, a module image it cannot read, or the device heap)", nil
	case q.changes != d.changes:
		return nil, fmt.Sprintf("%d calls since the last dump may have changed the worker", q.changes-d.changes), nil
	case q.digest != d.digest:
		return nil, "the session's module variables changed since the last dump", nil
	}
	b, err := json.Marshal(w.sess.ExportState())
	if err != nil {
		return nil, "", fmt.Errorf("reuse: encode the protocol state: %w", err)
	}
	f, err = devmem.MemfdWith("gpuctl-state", b)
	if err != nil {
		return nil, "", fmt.Errorf("reuse: %w", err)
	}
	w.log.Debug("the last dump still describes the worker", "launches_since", q.launches-d.launches)
	return f, "", nil
}

// importState puts the protocol state f holds (a reuse's, stored with an
// image) into this worker, restored from the dump that image reuses, and
// moves it to the image's epoch.
func (w *worker) importState(f *os.File, epoch uint64) error {
	if f == nil {
		return errors.New("import: no protocol state passed")
	}
	if w.serving != nil {
		return errors.New("import: the worker is serving; a protocol state goes only into a worker just restored")
	}
	if epoch < w.epoch {
		return fmt.Errorf("import: the image's epoch %d is older than the worker's %d", epoch, w.epoch)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxStateBytes+1))
	if err != nil {
		return fmt.Errorf("import: read the protocol state: %w", err)
	}
	if len(b) > maxStateBytes {
		return fmt.Errorf("import: the protocol state is over %d bytes", maxStateBytes)
	}
	var st dispatch.State
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("import: decode the protocol state: %w", err)
	}
	if err := w.sess.ImportState(st); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	w.epoch = epoch
	return nil
}

// maxStateBytes bounds a protocol state: its cached replies (at most 16
// MiB of deferred copies and 1,024 others) in JSON.
const maxStateBytes = 64 << 20
