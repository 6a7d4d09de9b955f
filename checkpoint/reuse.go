package checkpoint

import (
	"context"
	"io"
	"os"
	"path/filepath"

	"github.com/gpuctl/gpuctl/devmem"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
)

// Reusing the process image: a checkpoint whose worker is still what the
// session's last image holds the dump of, but for its device memory and
// its protocol state (Reuser), stores those two with that image's dump
// and neither suspends the driver nor runs CRIU. The session pauses for
// the save of what changed on the device, no more (docs/checkpoint.md).

// lastDump is the session's last image (the one that holds base, its
// last save) when a checkpoint may reuse its dump: it is in this host's
// store and names the nonce of its dump.
func (p *Pipeline) lastDump(ctx context.Context, req Request, base *devstore.Table) *images.Manifest {
	if base == nil || base.Image == "" {
		return nil
	}
	m, err := images.Get(ctx, p.Mem.Store, base.Image)
	if err != nil || m.AttachNonce == "" || m.Session != req.Session {
		return nil
	}
	return m
}

// reuseDump asks the worker whether image last's dump still describes
// it; if so it writes the worker's protocol state into dir as StateFile
// and returns true. A worker that cannot tell is dumped as usual.
func (p *Pipeline) reuseDump(ctx context.Context, w Reuser, req Request, last *images.Manifest, dir string) (bool, error) {
	f, reason, err := w.ReuseDump(ctx, last.AttachNonce)
	if err != nil {
		p.log().Info("the worker could not say whether its last dump still describes it; dumping it", "session", req.Session, "err", err)
		return false, nil
	}
	if f == nil {
		p.log().Debug("the worker's last dump is stale; dumping it", "session", req.Session, "image", last.ID, "why", reason)
		return false, nil
	}
	defer f.Close()
	if err := writeState(f, filepath.Join(dir, StateFile)); err != nil {
		return false, errs.Wrap(err, errs.Internal, errs.Session(req.Session), "write the worker's protocol state")
	}
	return true, nil
}

// writeState copies the protocol state in f, from its start, to path.
func writeState(f *os.File, path string) error {
	out, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, io.NewSectionReader(f, 0, 1<<40)); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// reusedFiles lists the dump's files of image last, as it holds them,
// for the new image: every file but its device memory and its protocol
// state, which the new checkpoint stores afresh.
func reusedFiles(last *images.Manifest) ([]images.MemFile, error) {
	return images.ReuseFiles(last, func(path string) bool {
		return path != devmem.DataFile && path != devmem.LayoutFile && path != StateFile
	})
}
