package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

// errNoDevMem answers a memory save on a backend that cannot save its own
// memory; gpud then checkpoints the worker whole.
var errNoDevMem = errors.New("this backend does not save device memory itself")

func (w *worker) devMem() (backend.DeviceMemory, error) {
	dm, ok := w.dev.(backend.DeviceMemory)
	if !ok {
		return nil, errNoDevMem
	}
	if w.mem == nil {
		w.mem = devmem.NewTracker()
	}
	return dm, nil
}

// memSave runs a save on the call thread; the worker is quiesced, so
// nothing else uses the device. into is the memfd gpud passed to save
// into, if any.
//
// A save of the snapshot a park kept (req.Snapshot) runs instead on the
// control goroutine while the session is served: it reads only the
// snapshot. It drops the snapshot whether it succeeds or not.
func (w *worker) memSave(req *devmem.SaveRequest, into *os.File) (*os.File, *devmem.Saved, error) {
	if req == nil {
		req = &devmem.SaveRequest{}
	}
	if w.serving != nil && !req.Snapshot {
		return nil, nil, errors.New("memsave: the worker is serving a client; quiesce it first")
	}
	dm, err := w.devMem()
	if err != nil {
		return nil, nil, err
	}
	req.Into = into
	var (
		f  *os.File
		sv devmem.Saved
	)
	if req.Snapshot {
		if w.snapTimer != nil {
			w.snapTimer.Stop()
			w.snapTimer = nil
		}
		req.Release = true
		f, sv, err = w.mem.Save(context.Background(), dm, *req)
		if err != nil {
			if p, ok := dm.(backend.Parker); ok {
				if s := p.MemSnapshot(); s != nil {
					_ = s.ReleaseMem(context.Background())
				}
			}
			return nil, nil, fmt.Errorf("save the snapshot of device memory: %w", err)
		}
		return f, &sv, nil
	}
	w.thread.run(func() { f, sv, err = w.mem.Save(context.Background(), dm, *req) })
	if err != nil {
		return nil, nil, err
	}
	return f, &sv, nil
}

// memPark parks the quiesced session's device memory; the descriptors
// returned hold it.
func (w *worker) memPark() ([]*os.File, *devmem.Parked, error) {
	if w.serving != nil {
		return nil, nil, errors.New("mempark: the worker is serving a client; quiesce it first")
	}
	dm, err := w.devMem()
	if err != nil {
		return nil, nil, err
	}
	var (
		files []*os.File
		pk    devmem.Parked
	)
	w.thread.run(func() { files, pk, err = w.mem.Park(context.Background(), dm) })
	if err != nil {
		return nil, nil, err
	}
	return files, &pk, nil
}

// memUnpark maps parked memory back from files, before the session is
// resumed.
func (w *worker) memUnpark(req *devmem.UnparkRequest, files []*os.File) error {
	if w.serving != nil {
		return errors.New("memunpark: the worker is serving a client; quiesce it first")
	}
	dm, err := w.devMem()
	if err != nil {
		return err
	}
	if req == nil {
		req = &devmem.UnparkRequest{}
	}
	w.thread.run(func() { err = w.mem.Unpark(context.Background(), dm, files, *req) })
	if err == nil && req.Keep {
		// The snapshot holds the session's size on the device until a
		// save of it (which gpud asks for at once) drops it; one that
		// never comes (gpud failed before it, or went away) must not
		// keep it there for good.
		p, _ := dm.(backend.Parker)
		if w.snapTimer != nil {
			w.snapTimer.Stop()
		}
		w.snapTimer = time.AfterFunc(snapshotTTL, func() {
			if s := p.MemSnapshot(); s != nil {
				w.log.Warn("dropping the snapshot of device memory no save came for", "after", snapshotTTL)
				_ = s.ReleaseMem(context.Background())
			}
		})
	}
	return err
}

// snapshotTTL is how long a kept snapshot waits for its save.
const snapshotTTL = 30 * time.Second

func (w *worker) memReload(f *os.File, at *[2]int64) error {
	if f == nil || at == nil {
		return errors.New("memreload: no memory file or layout offset passed")
	}
	if w.serving != nil {
		return errors.New("memreload: the worker is serving a client; quiesce it first")
	}
	dm, err := w.devMem()
	if err != nil {
		return err
	}
	t0 := time.Now()
	w.thread.run(func() { err = w.mem.Reload(context.Background(), dm, f, at[0], at[1]) })
	took := time.Since(t0)
	if err != nil {
		return fmt.Errorf("reload device memory: %w", err)
	}
	st := w.mem.LastReload
	ms := func(ns int64) string { return fmt.Sprintf("%.1f", float64(ns)/1e6) }
	w.log.Info("device memory reloaded", "bytes", st.Bytes, "copied", st.Copied, "took_ms", ms(took.Nanoseconds()),
		"layout_ms", ms(st.LayoutNS), "regions_ms", ms(st.RegionsNS), "back_ms", ms(st.BackNS), "map_ms", ms(st.MapNS), "scan_ms", ms(st.ScanNS),
		"pin_ms", ms(st.PinNS), "copy_ms", ms(st.CopyNS), "unpin_ms", ms(st.UnpinNS), "untrim_ms", ms(st.UntrimNS))
	return nil
}

// memPatch brings the quiesced worker's device memory, an earlier save,
// to the save in f by copying the blocks want marks.
func (w *worker) memPatch(f *os.File, at *[2]int64, want []byte) error {
	if f == nil || at == nil {
		return errors.New("mempatch: no memory file or layout offset passed")
	}
	if w.serving != nil {
		return errors.New("mempatch: the worker is serving a client; quiesce it first")
	}
	dm, err := w.devMem()
	if err != nil {
		return err
	}
	t0 := time.Now()
	w.thread.run(func() { err = w.mem.Patch(context.Background(), dm, f, at[0], at[1], want) })
	if err != nil {
		return fmt.Errorf("patch device memory: %w", err)
	}
	st := w.mem.LastReload
	w.log.Info("device memory patched", "bytes", st.Bytes, "copied", st.Copied, "took_ms", fmt.Sprintf("%.1f", float64(time.Since(t0).Nanoseconds())/1e6))
	return nil
}

// memPrecopy runs a pre-copy round from the control goroutine while the
// session may be serving: the tracker reads device memory between the
// session's requests (dispatch.Session.Between), never during one.
func (w *worker) memPrecopy(req *devmem.PrecopyRequest, into *os.File) (*os.File, *devmem.Saved, error) {
	dm, err := w.devMem()
	if err != nil {
		return nil, nil, err
	}
	if req == nil {
		req = &devmem.PrecopyRequest{}
	}
	req.Into = into
	f, sv, err := w.mem.Precopy(context.Background(), dm, w.sess.Between, *req)
	if err != nil {
		return nil, nil, fmt.Errorf("pre-copy device memory: %w", err)
	}
	return f, &sv, nil
}
