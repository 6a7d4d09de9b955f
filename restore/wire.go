package restore

import (
	"archive/tar"
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpuctl/gpuctl/images"
)

// PrepareHeader is the first entry of a prepared restore's stream
// (PUT /v1/chunks/staged/{id}/restore): what the image will say of the
// session, and the save whose device memory is staged for it. The dump's
// files follow, as they lie in its directory.
type PrepareHeader struct {
	Meta images.Meta `json:"meta"`
	Gen  uint64      `json:"gen"`
	// Ahead: the files and Meta are the session's last image's, sent
	// before the freeze, and Gen a pre-copy round (Restorer.Prepare).
	Ahead bool `json:"ahead,omitempty"`
}

const headerName = "prepare.json"

// maxPrepareFiles bounds what a prepared restore writes to disk: its
// device memory is staged, so the dump is the worker's host memory.
const maxPrepareFiles = 8 << 30

// WritePrepare writes h and the files of dir (regular files and
// directories) to w as a prepared restore's stream.
func WritePrepare(ctx context.Context, w io.Writer, h PrepareHeader, dir string) error {
	// Large writes: the dump is tens of MB, and it is in the downtime.
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	hj, err := json.Marshal(h)
	if err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: headerName, Mode: 0o600, Size: int64(len(hj)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(hj); err != nil {
		return err
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Mode: 0o700, Typeflag: tar.TypeDir})
		case info.Mode().IsRegular():
		default:
			return fmt.Errorf("%s: not a regular file", rel)
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := tw.WriteHeader(&tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), Size: info.Size(), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// readPrepare reads a prepared restore's header from r; files then
// writes the rest of the stream into a directory.
func readPrepare(r io.Reader) (PrepareHeader, func(dir string) error, error) {
	var h PrepareHeader
	tr := tar.NewReader(bufio.NewReaderSize(r, 1<<20))
	th, err := tr.Next()
	if err != nil || th.Name != headerName || th.Size > 64<<20 {
		return h, nil, errors.New("the stream does not start with its header: " + headerName)
	}
	if err := json.NewDecoder(tr).Decode(&h); err != nil {
		return h, nil, fmt.Errorf("%s: %w", headerName, err)
	}
	files := func(dir string) error {
		root, err := os.OpenRoot(dir)
		if err != nil {
			return err
		}
		defer root.Close()
		var total int64
		for {
			th, err := tr.Next()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("the dump's files: %w", err)
			}
			switch th.Typeflag {
			case tar.TypeDir:
				if err := root.Mkdir(filepath.Clean(th.Name), 0o700); err != nil {
					return err
				}
				continue
			case tar.TypeReg:
			default:
				return fmt.Errorf("the dump's files: %s is not a regular file", th.Name)
			}
			if total += th.Size; total > maxPrepareFiles {
				return fmt.Errorf("the dump's files are over %d bytes", int64(maxPrepareFiles))
			}
			f, err := root.OpenFile(th.Name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("the dump's file %s: %w", th.Name, err)
			}
		}
	}
	return h, files, nil
}
