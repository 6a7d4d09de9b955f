package images

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
)

// Checkout writes image id's files into dstDir, which must be empty or
// absent, for a restore to read. Every chunk is checked against its digest
// as it is read; a damaged chunk fails the checkout with an errs.DataLoss
// error naming the image and the chunk, and leaves dstDir empty. Zero
// chunks become holes. All writes go through an os.Root on dstDir, so
// nothing lands outside it whatever the manifest says.
func Checkout(ctx context.Context, st *store.Store, id, dstDir string) (*Manifest, error) {
	return CheckoutExcept(ctx, st, id, dstDir, nil)
}

// CheckoutExcept is Checkout without the top-level files skip names (a
// restore reads saved device memory straight from the store, not from a
// file). The manifest returned lists every file.
func CheckoutExcept(ctx context.Context, st *store.Store, id, dstDir string, skip func(path string) bool) (*Manifest, error) {
	m, err := Get(ctx, st, id)
	if err != nil {
		return nil, err
	}
	// Hold the chunks, then make sure the image still exists: from here on
	// a concurrent `images rm` and gc cannot pull chunks from under us.
	refs, _ := m.Refs()
	defer st.Hold(refs)()
	if _, err := Stat(ctx, st, id); err != nil {
		return nil, err
	}
	subj := errs.Image(id)
	if err := os.MkdirAll(dstDir, 0o700); err != nil {
		return nil, errs.Wrap(err, errs.FailedPrecondition, subj, "create %s", dstDir)
	}
	if ents, err := os.ReadDir(dstDir); err != nil || len(ents) > 0 {
		return nil, errs.New(errs.FailedPrecondition, subj, "checkout directory %s is not empty", dstDir)
	}
	root, err := os.OpenRoot(dstDir)
	if err != nil {
		return nil, errs.Wrap(err, errs.FailedPrecondition, subj, "open %s", dstDir)
	}
	defer root.Close()
	out := m
	if skip != nil {
		cp := *m
		cp.Files = nil
		for _, f := range m.Files {
			if !skip(f.Path) {
				cp.Files = append(cp.Files, f)
			}
		}
		out = &cp
	}
	if err := checkout(ctx, st, out, root); err != nil {
		// Leave nothing half-written for a restore to pick up.
		for _, f := range m.Files {
			if filepath.Dir(f.Path) == "." {
				_ = os.RemoveAll(filepath.Join(dstDir, f.Path))
			}
		}
		return nil, err
	}
	return m, nil
}

// checkoutRun bounds how many bytes of consecutive chunks one worker
// looks up in one transaction, reads, verifies and writes with a single
// pwrite. Buffered writes to one file serialize on its inode lock, so
// many workers each writing a 16 KiB chunk spend their time queueing in
// the kernel; a few large writes, one at a time per file, keep the lock
// cheap while the reads, decompression and hashing of other runs go on in
// parallel. Each worker keeps one buffer of this size.
const checkoutRun = 2 << 20

// outFile is a file being checked out; mu lets one write at a time reach
// the kernel, where they would serialize anyway.
type outFile struct {
	f  *os.File
	mu sync.Mutex
}

func checkout(ctx context.Context, st *store.Store, m *Manifest, root *os.Root) error {
	subj := errs.Image(m.ID)
	// A run is consecutive non-zero chunks of one file, written at off.
	type run struct {
		out    *outFile
		off    int64
		size   int64
		chunks []Chunk
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	runs := make(chan run, 2*st.Workers())
	var wg sync.WaitGroup
	for range st.Workers() {
		wg.Go(func() {
			var (
				buf  []byte
				ds   []store.Digest
				dsts [][]byte
			)
			for r := range runs {
				if ctx.Err() != nil {
					continue
				}
				if int64(cap(buf)) < r.size {
					buf = make([]byte, r.size)
				}
				b := buf[:r.size]
				ds, dsts = ds[:0], dsts[:0]
				pos := int64(0)
				for _, c := range r.chunks {
					ds = append(ds, c.Digest)
					dsts = append(dsts, b[pos:pos+c.Size])
					pos += c.Size
				}
				err := st.ReadChunksTo(ctx, ds, dsts)
				if err == nil {
					r.out.mu.Lock()
					_, werr := r.out.f.WriteAt(b, r.off)
					r.out.mu.Unlock()
					if werr != nil {
						err = errs.Wrap(werr, errs.ResourceExhausted, "", "write %s", r.out.f.Name())
					}
				}
				if err != nil {
					cancel(errs.Wrap(err, errs.KindOf(err), subj, "cannot check out; the image is damaged or the disk failed"))
				}
			}
		})
	}
	send := func(r run) {
		select {
		case runs <- r:
		case <-ctx.Done():
		}
	}
	var files []*os.File
	var feedErr error
	for _, mf := range m.Files {
		if feedErr = context.Cause(ctx); feedErr != nil {
			break
		}
		p := filepath.FromSlash(mf.Path)
		switch mf.Type {
		case TypeDir:
			feedErr = root.Mkdir(p, mf.Mode|0o700)
		case TypeSymlink:
			feedErr = root.Symlink(mf.Link, p)
		case TypeFile:
			var f *os.File
			if f, feedErr = root.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); feedErr != nil {
				break
			}
			files = append(files, f)
			if feedErr = f.Truncate(mf.Size); feedErr != nil {
				break
			}
			// Zero chunks end a run and stay holes.
			out := &outFile{f: f}
			cur := run{out: out}
			var off int64
			for i, c := range mf.Chunks {
				if cur.size > 0 && (c.Zero || cur.size+c.Size > checkoutRun) {
					send(cur)
					cur = run{out: out}
				}
				if !c.Zero {
					if cur.size == 0 {
						cur.off, cur.chunks = off, mf.Chunks[i:i]
					}
					cur.chunks = cur.chunks[:len(cur.chunks)+1]
					cur.size += c.Size
				}
				off += c.Size
			}
			if cur.size > 0 {
				send(cur)
			}
		}
		if feedErr != nil {
			feedErr = errs.Wrap(feedErr, errs.FailedPrecondition, subj, "check out %s", mf.Path)
		}
	}
	close(runs)
	wg.Wait()
	var closeErr error
	for _, f := range files {
		closeErr = errors.Join(closeErr, f.Close())
	}
	if feedErr != nil {
		return feedErr
	}
	if err := context.Cause(ctx); err != nil {
		return err
	}
	if closeErr != nil {
		return errs.Wrap(closeErr, errs.Internal, subj, "close checked-out files")
	}
	for _, mf := range m.Files {
		if mf.Type != TypeSymlink {
			if err := root.Chmod(filepath.FromSlash(mf.Path), mf.Mode); err != nil {
				return errs.Wrap(err, errs.Internal, subj, "chmod %s", mf.Path)
			}
		}
	}
	return nil
}
