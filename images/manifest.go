// Package images is the checkpoint image: its manifest, how a directory of
// CRIU and GPU state becomes one (Commit) and comes back (Checkout), the
// one-file export format, the transfer of images between hosts, and the
// control-API routes for all of it. Bytes live in package store.
package images

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/store"
	"github.com/gpuctl/gpuctl/tenant"
)

// ManifestVersion is the manifest format this build writes. It reads this
// one and version 1, which it upgrades as it decodes (see manifestV1).
const ManifestVersion = 2

// Limits on what a manifest may describe, so that a hostile import cannot
// make a host allocate or write without bound.
const (
	// A manifest costs about 75 bytes of JSON per 16 KiB chunk (0.5% of
	// the image), so 1 GiB of JSON describes an image of about 200 GiB.
	maxManifestBytes = 1 << 30 // decoded JSON
	maxFiles         = 1 << 16
	maxPathLen       = 1024
	maxImageBytes    = 1 << 42 // 4 TiB of logical content
)

// Meta is what an image records about where it came from: the one model
// of those facts. The checkpoint pipeline fills it in, Commit stores it in
// the manifest with the files, and the restore pipeline reads it back on
// any host to check compatibility and reattach the worker.
type Meta struct {
	ID      string `json:"id"`      // empty: Commit picks "img-" + 12 hex digits
	Session string `json:"session"` // the session id, kept across migrations
	Parent  string `json:"parent,omitempty"`

	Host    string `json:"host"`    // gpud --name of the source host
	Backend string `json:"backend"` // "cuda" or "emulated"
	// GPUs are the GPUs the session's worker saw, the session's own GPU
	// first (cuda.ManifestGPUs), as the source host reported them: a
	// restore matches model and memory, and maps every UUID.
	GPUs   []backend.GPU `json:"gpus,omitempty"`
	Driver string        `json:"driver,omitempty"` // driver version on the source
	CRIU   string        `json:"criu,omitempty"`   // CRIU version on the source
	Kernel string        `json:"kernel,omitempty"` // kernel release on the source

	// AttachNonce names the abstract socket a restored worker dials
	// (@gpuctl-attach-<nonce>); any host restoring the image listens there.
	AttachNonce string `json:"attach_nonce,omitempty"`
	// Epoch is the session's epoch the dumped worker served under: a host
	// where the session has reached a later epoch refuses to restore the
	// image (docs/checkpoint.md, "Fencing"). 0: not recorded.
	Epoch uint64 `json:"epoch,omitempty"`
	// ProcessOf is the image whose dump of the worker (its CRIU files)
	// this image holds, reused because the worker changed nothing but
	// its device memory and its protocol state since (docs/checkpoint.md,
	// "Reusing the process image"); AttachNonce is then that dump's. The
	// protocol state is in WorkerStateFile. Empty: the image's own dump.
	ProcessOf string `json:"process_of,omitempty"`

	// Labels decorate an image: the session's labels (api.Labels), which
	// a restore gives back to the session; nothing gpuctl needs to
	// restore it lives here.
	Labels map[string]string `json:"labels,omitempty"`
	// Priority is the session's priority, which a restore gives back.
	Priority int32 `json:"priority,omitempty"`

	// Tenant owns the image, and the session restored from it (gpud
	// --tenants); empty for the administrator. An export, an import and
	// a migration keep it.
	Tenant string `json:"tenant,omitempty"`
}

// Manifest describes one image completely.
type Manifest struct {
	Version int `json:"version"`
	Meta
	Created  time.Time `json:"created"`
	Chunking string    `json:"chunking"` // how files were cut, for the record
	Files    []File    `json:"files"`
}

// File types in a manifest: the values of api.ImageFile's type.
const (
	TypeFile    = api.FileRegular
	TypeDir     = api.FileDir
	TypeSymlink = api.FileSymlink
)

// File is one entry of the image directory.
type File struct {
	Path   string      `json:"path"` // slash-separated, relative to the image root
	Type   string      `json:"type"`
	Mode   fs.FileMode `json:"mode"` // permission bits only
	Size   int64       `json:"size"`
	Link   string      `json:"link,omitempty"` // symlink target, relative, inside the image
	Chunks []Chunk     `json:"chunks,omitempty"`
}

// Chunk is a piece of a file: Size bytes that are either all zero (stored
// as nothing) or the chunk Digest.
type Chunk struct {
	Size   int64
	Zero   bool
	Digest store.Digest
}

// MarshalJSON writes [size] for a zero chunk and [size,"digest"] otherwise:
// a 1 GiB image has ~65,000 chunks, so the form matters.
func (c Chunk) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, 2+20+3+64)
	b = append(b, '[')
	b = strconv.AppendInt(b, c.Size, 10)
	if !c.Zero {
		b = append(b, ',', '"')
		b = hex.AppendEncode(b, c.Digest[:])
		b = append(b, '"')
	}
	return append(b, ']'), nil
}

// UnmarshalJSON reads the form MarshalJSON writes. That exact form is
// parsed by hand: an 8 GiB image lists about 14,000 chunks, and decoding
// each through encoding/json three times made a manifest's decode most of
// a migration's push (it is decoded by the push, the target's import and
// its restore). Anything else valid goes the general way.
func (c *Chunk) UnmarshalJSON(b []byte) error {
	if parseChunk(b, c) {
		return nil
	}
	var v []json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil || len(v) < 1 || len(v) > 2 {
		return fmt.Errorf("chunk %s: want [size] or [size, digest]", clipJSON(b))
	}
	if err := json.Unmarshal(v[0], &c.Size); err != nil {
		return fmt.Errorf("chunk %s: bad size", clipJSON(b))
	}
	c.Zero = len(v) == 1
	if !c.Zero {
		var s string
		if err := json.Unmarshal(v[1], &s); err != nil {
			return fmt.Errorf("chunk %s: bad digest", clipJSON(b))
		}
		d, err := store.ParseDigest(s)
		if err != nil {
			return err
		}
		c.Digest = d
	}
	return nil
}

// parseChunk parses [SIZE] or [SIZE,"DIGEST"] with no spaces, SIZE at
// most 18 digits, DIGEST in hex; it reports false for anything else,
// which the caller then parses in full (and refuses with a reason).
func parseChunk(b []byte, c *Chunk) bool {
	if len(b) < 3 || b[0] != '[' || b[len(b)-1] != ']' {
		return false
	}
	b = b[1 : len(b)-1]
	var size int64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		size = size*10 + int64(b[i]-'0')
	}
	if i == 0 || i > 18 || (b[0] == '0' && i > 1) {
		return false
	}
	if i == len(b) {
		*c = Chunk{Size: size, Zero: true}
		return true
	}
	var d store.Digest
	rest := b[i:]
	if len(rest) != 3+hex.EncodedLen(len(d)) || rest[0] != ',' || rest[1] != '"' || rest[len(rest)-1] != '"' {
		return false
	}
	if _, err := hex.Decode(d[:], rest[2:len(rest)-1]); err != nil {
		return false
	}
	*c = Chunk{Size: size, Digest: d}
	return true
}

func clipJSON(b []byte) string {
	if len(b) > 100 {
		return string(b[:100]) + "..."
	}
	return string(b)
}

// Bytes is the image's logical size: the sum of its files' sizes.
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// Refs returns the image's distinct non-zero chunks, in first-use order,
// with each one's size.
func (m *Manifest) Refs() ([]store.Digest, map[store.Digest]int64) {
	// Sized ahead: a 32 GiB image lists 32,768 chunks, and growing the
	// map and the slice was most of the cost (this runs in a migration's
	// downtime, on both hosts).
	n := 0
	for _, f := range m.Files {
		n += len(f.Chunks)
	}
	sizes := make(map[store.Digest]int64, n)
	out := make([]store.Digest, 0, n)
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			if c.Zero {
				continue
			}
			if _, ok := sizes[c.Digest]; !ok {
				out = append(out, c.Digest)
				sizes[c.Digest] = c.Size
			}
		}
	}
	return out, sizes
}

// Validate checks everything a restore relies on, so that a manifest from
// an import or a peer can be trusted as far as its shape goes: version,
// id, paths (relative, clean, no "..", unique, parents present as dirs),
// symlinks that stay inside the image, sizes that add up and stay in
// bounds. The error names the image and the offending file.
func (m *Manifest) Validate() error {
	subj := errs.Image(m.ID)
	if m.Version != ManifestVersion {
		return errs.New(errs.InvalidArgument, subj, "manifest version %d; this gpud works with version %d (decoding upgrades older ones)", m.Version, ManifestVersion)
	}
	if err := ids.CheckImage(m.ID); err != nil {
		return err
	}
	if m.Tenant != "" {
		if err := tenant.ValidName(m.Tenant); err != nil {
			return errs.Wrap(err, errs.InvalidArgument, subj, "owner")
		}
	}
	if len(m.Files) > maxFiles {
		return errs.New(errs.InvalidArgument, subj, "%d files, at most %d allowed", len(m.Files), maxFiles)
	}
	types := map[string]string{".": TypeDir}
	var total int64
	for _, f := range m.Files {
		bad := func(format string, args ...any) error {
			return errs.New(errs.InvalidArgument, subj, "file %q: %s", clipPath(f.Path), fmt.Sprintf(format, args...))
		}
		if err := checkPath(f.Path); err != nil {
			return bad("%v", err)
		}
		if _, dup := types[f.Path]; dup {
			return bad("listed twice")
		}
		if types[path.Dir(f.Path)] != TypeDir {
			return bad("its parent directory is not listed before it")
		}
		types[f.Path] = f.Type
		if f.Mode&^fs.ModePerm != 0 {
			return bad("mode %v has bits other than permissions", f.Mode)
		}
		switch f.Type {
		case TypeDir:
			if f.Size != 0 || len(f.Chunks) != 0 || f.Link != "" {
				return bad("a directory with content")
			}
		case TypeSymlink:
			if err := checkLink(f.Path, f.Link); err != nil {
				return bad("%v", err)
			}
			if f.Size != 0 || len(f.Chunks) != 0 {
				return bad("a symlink with content")
			}
		case TypeFile:
			if f.Link != "" {
				return bad("a regular file with a link target")
			}
			var sum int64
			for i, c := range f.Chunks {
				limit := int64(store.MaxChunkSize)
				if c.Zero {
					limit = 1 << 30
				}
				if c.Size <= 0 || c.Size > limit {
					return bad("chunk %d has size %d, outside 1..%d", i, c.Size, limit)
				}
				sum += c.Size
				if sum > maxImageBytes {
					return bad("larger than %d bytes", int64(maxImageBytes))
				}
			}
			if sum != f.Size {
				return bad("size %d but its chunks add up to %d", f.Size, sum)
			}
			total += f.Size
			if total > maxImageBytes {
				return errs.New(errs.InvalidArgument, subj, "larger than %d bytes in all", int64(maxImageBytes))
			}
		default:
			return bad("unknown type %q", f.Type)
		}
	}
	// One digest must mean one size everywhere.
	sizes := map[store.Digest]int64{}
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			if c.Zero {
				continue
			}
			if s, ok := sizes[c.Digest]; ok && s != c.Size {
				return errs.New(errs.InvalidArgument, subj, "chunk %s is listed with sizes %d and %d", c.Digest, s, c.Size)
			}
			sizes[c.Digest] = c.Size
		}
	}
	return nil
}

func checkPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("empty path")
	case len(p) > maxPathLen:
		return fmt.Errorf("path longer than %d bytes", maxPathLen)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("absolute path; image paths are relative to the image")
	case strings.ContainsAny(p, "\x00\\"):
		return fmt.Errorf("NUL or backslash in path")
	case path.Clean(p) != p:
		return fmt.Errorf("path is not in clean form (%q)", path.Clean(p))
	case p == ".." || strings.HasPrefix(p, "../") || strings.Contains(p, "/../") || strings.HasSuffix(p, "/.."):
		return fmt.Errorf("path leaves the image (..)")
	}
	return nil
}

// checkLink allows only relative symlinks that resolve inside the image.
func checkLink(p, target string) error {
	switch {
	case target == "":
		return fmt.Errorf("symlink without a target")
	case strings.HasPrefix(target, "/"):
		return fmt.Errorf("symlink to absolute path %q points out of the image", clipPath(target))
	case len(target) > maxPathLen || strings.ContainsAny(target, "\x00"):
		return fmt.Errorf("bad symlink target")
	}
	r := path.Join(path.Dir(p), target)
	if r == ".." || strings.HasPrefix(r, "../") {
		return fmt.Errorf("symlink to %q points out of the image", clipPath(target))
	}
	return nil
}

func clipPath(p string) string {
	if len(p) > 120 {
		return p[:120] + "..."
	}
	return p
}

// info is the image's summary, as listings show it and as the store
// keeps it next to the manifest.
func (m *Manifest) info(newBytes int64, chunks int) api.Image {
	var zero int64
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			if c.Zero {
				zero += c.Size
			}
		}
	}
	return api.Image{ID: m.ID, Session: m.Session, Parent: m.Parent, Created: m.Created, Host: m.Host, Backend: m.Backend,
		Bytes: m.Bytes(), NewBytes: newBytes, Files: len(m.Files), Chunks: chunks, ZeroBytes: zero, Tenant: m.Tenant}
}
