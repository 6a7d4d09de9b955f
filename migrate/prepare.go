package migrate

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/restore"
)

// preparing is the target's restore of a frozen session ahead of its
// image (restore.Restorer.Prepare): as soon as CRIU has dumped the
// worker, the dump's files go to the target, which restores the process,
// has the driver restore its GPU state and reloads its device memory from
// the staging, while this host stores the image and pushes it. The
// restore step's Restore of the image then only adopts the worker. Only
// for a target that does not share this host's socket names (the frozen
// worker must stay until the target has the session) and outside a
// cluster (whose registry hands the session over only with its image);
// the target refuses a prepare whose staging is not the freeze's save,
// and kills a prepared worker that the image does not match, so the
// migration then restores from the store as before.
type preparing struct {
	cancel context.CancelFunc
	// sent is closed once the dump is sent (or failed to be): the
	// target is then preparing, and its restore of the image waits for
	// the prepare to end.
	sent  chan struct{}
	wrote bool   // the whole dump went (read after sent)
	nonce string // the checkpoint's (images.Meta.AttachNonce)
	done  chan struct{}
	err   error
}

// startPrepare sends the dump in dir, with meta, to the target's prepare
// route, once gen (precopy.Copier.StagedGen) says what is staged there.
// The files are linked first: the freeze removes dir after its store.
func (s *Service) startPrepare(ctx context.Context, target *control.Client, id, dir string, meta images.Meta, gen func() uint64) *preparing {
	return s.startPrepareWith(ctx, target, id, dir, meta, gen, false)
}

// startPrepareWith is startPrepare; with ahead, dir holds the session's
// last image's dump and meta is that image's, sent before the freeze
// (restore.PrepareHeader.Ahead).
func (s *Service) startPrepareWith(ctx context.Context, target *control.Client, id, dir string, meta images.Meta, gen func() uint64, ahead bool) *preparing {
	ctx, cancel := context.WithCancel(ctx)
	p := &preparing{cancel: cancel, sent: make(chan struct{}), done: make(chan struct{}), nonce: meta.AttachNonce}
	own, err := linkTree(dir)
	if err != nil {
		p.err = errs.Wrap(err, errs.Internal, errs.Session(id), "keep the dump for the target")
		close(p.sent)
		close(p.done)
		return p
	}
	go func() {
		defer close(p.done)
		defer os.RemoveAll(own)
		g := gen()
		if g == 0 {
			p.err = errors.New("no device memory is staged there")
			close(p.sent)
			return
		}
		pr, pw := io.Pipe()
		wrote := make(chan struct{})
		go func() {
			defer close(wrote)
			defer close(p.sent)
			err := restore.WritePrepare(ctx, pw, restore.PrepareHeader{Meta: meta, Gen: g, Ahead: ahead}, own)
			p.wrote = err == nil
			pw.CloseWithError(err)
		}()
		_, p.err = target.PrepareRestore(ctx, id, pr)
		pr.CloseWithError(io.ErrClosedPipe)
		<-wrote // before the files go
	}()
	return p
}

// prepareAhead has the target restore the session, while it still runs
// here, from the dump of its last image (m) and the device memory the
// pre-copy staged there (round gen), and waits for it: when the freeze
// finds the worker still what that dump holds (checkpoint.Reuser), it
// reuses the dump, and the target only copies in the changed blocks and
// takes the protocol state (restore.Restorer.AdoptPrepared). It returns
// the prepare, done, or why there is none.
func (s *Service) prepareAhead(ctx context.Context, target *control.Client, id string, m *images.Manifest, gen uint64) (*preparing, error) {
	work, err := os.MkdirTemp(s.Checkpoint.Pipeline.WorkDir, "ahead-")
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, errs.Session(id), "check out the dump of image %s", m.ID)
	}
	defer os.RemoveAll(work)
	dir := filepath.Join(work, "img")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, errs.Wrap(err, errs.Internal, errs.Session(id), "check out the dump of image %s", m.ID)
	}
	if err := s.Checkpoint.CheckoutProcess(ctx, m, dir); err != nil {
		return nil, errs.Wrap(err, errs.KindOf(err), errs.Image(m.ID), "check out its dump")
	}
	p := s.startPrepareWith(ctx, target, id, dir, m.Meta, func() uint64 { return gen }, true)
	if err := p.wait(); err != nil {
		return nil, err
	}
	return p, nil
}

// whenSent waits until the whole dump has been sent: the target has
// read (nearly) all of it, so its prepare is under way, and its restore
// of the image will wait for it.
func (p *preparing) whenSent() { <-p.sent }

// sentAll says, after whenSent, whether the whole dump went.
func (p *preparing) sentAll() bool { return p.wrote }

// failed says whether the prepare has ended with an error already (a
// target that refused it: the restore then need not wait for one).
func (p *preparing) failed() bool {
	select {
	case <-p.done:
		return p.err != nil
	default:
		return false
	}
}

// wait waits for the prepare and returns its error.
func (p *preparing) wait() error {
	<-p.done
	return p.err
}

// linkTree hard-links dir's files into a new directory beside dir's
// parent (the checkpoint's work directory, which the freeze removes whole
// once the image is stored) and returns that directory.
func linkTree(dir string) (string, error) {
	own, err := os.MkdirTemp(filepath.Dir(filepath.Dir(dir)), "prep-")
	if err != nil {
		return "", err
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Mkdir(filepath.Join(own, rel), 0o700)
		}
		return os.Link(p, filepath.Join(own, rel))
	})
	if err != nil {
		os.RemoveAll(own)
		return "", err
	}
	return own, nil
}
