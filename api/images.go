package api

import (
	"time"

	"github.com/gpuctl/gpuctl/errs"
)

// Image is the summary of a stored image: one entry of GET /v1/images.
type Image struct {
	ID        string    `json:"id"`
	Session   string    `json:"session"`
	Parent    string    `json:"parent,omitempty"` // the session's previous image
	Created   time.Time `json:"created"`
	Host      string    `json:"host,omitempty"` // where it was checkpointed
	Backend   string    `json:"backend,omitempty"`
	Bytes     int64     `json:"bytes"`     // logical size
	NewBytes  int64     `json:"new_bytes"` // stored bytes its commit added
	Files     int       `json:"files"`
	Chunks    int       `json:"chunks"` // distinct non-zero chunks
	ZeroBytes int64     `json:"zero_bytes"`
	// Tenant owns the image (gpud --tenants); absent for the
	// administrator's.
	Tenant string `json:"tenant,omitempty"`
}

// ImageDetail is the reply to GET /v1/images/{id}: the summary and the
// manifest without its chunk lists.
type ImageDetail struct {
	Image
	Version     int    `json:"version"`        // of the manifest format
	GPUs        []GPU  `json:"gpus,omitempty"` // the GPUs the session used, as GET /v1/host reports GPUs
	Driver      string `json:"driver,omitempty"`
	CRIU        string `json:"criu,omitempty"`
	Kernel      string `json:"kernel,omitempty"`
	AttachNonce string `json:"attach_nonce,omitempty"`
	// Epoch is the session's epoch the image was taken at (0: not
	// recorded); a host where the session reached a later one refuses to
	// restore it.
	Epoch    uint64            `json:"epoch,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	Chunking string            `json:"chunking"`
	FileList []ImageFile       `json:"file_list"`
}

// ImageFile is one entry of an image's directory.
type ImageFile struct {
	Path   string `json:"path"` // slash-separated, relative to the image root
	Type   string `json:"type"` // FileRegular, FileDir or FileSymlink
	Mode   string `json:"mode"` // permission bits, four octal digits
	Size   int64  `json:"size"`
	Link   string `json:"link,omitempty"` // a symlink's target
	Chunks int    `json:"chunks"`
}

// The types of an ImageFile.
const (
	FileRegular = "file"
	FileDir     = "dir"
	FileSymlink = "symlink"
)

// RemoveImageReply is the reply to DELETE /v1/images/{id}.
type RemoveImageReply struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	Bytes   int64  `json:"bytes"`
	Deleted bool   `json:"deleted"`
}

// ImportReply is the reply to POST /v1/images/import, whose body is an
// export stream (docs/image-format.md).
type ImportReply struct {
	Image
	StoredBytes int64 `json:"stored_bytes"` // new bytes the import added to the store
}

// VerifyRequest is the body of POST /v1/images/verify; an empty ID (or an
// empty body) verifies every image.
type VerifyRequest struct {
	ID string `json:"id,omitempty"`
}

// VerifyReport is the reply to POST /v1/images/verify.
type VerifyReport struct {
	Images  int            `json:"images"`
	Chunks  int            `json:"chunks"`
	Damaged []DamagedChunk `json:"damaged,omitempty"`
	// Index is the store's consistency check result; empty when fine.
	Index string `json:"index,omitempty"`
}

// DamagedChunk is a chunk that failed verification, and the images that
// use it.
type DamagedChunk struct {
	Chunk  string   `json:"chunk"`
	Images []string `json:"images"`
	Error  string   `json:"error"`
}

// OK reports whether nothing was found wrong.
func (r *VerifyReport) OK() bool { return len(r.Damaged) == 0 && r.Index == "" }

// Err is nil for a clean report and otherwise an errs.DataLoss error
// naming the first damaged image and chunk.
func (r *VerifyReport) Err() error {
	switch {
	case r.Index != "":
		return errs.New(errs.DataLoss, "", "%s", r.Index)
	case len(r.Damaged) > 0:
		d := r.Damaged[0]
		subj := "no image"
		if len(d.Images) > 0 {
			subj = errs.Image(d.Images[0])
		}
		return errs.New(errs.DataLoss, subj, "chunk %s is damaged (%d damaged chunks in all); delete the affected images or re-import them", d.Chunk, len(r.Damaged))
	}
	return nil
}

// VerifyEvent is one line of POST /v1/images/verify?progress=1, which
// answers with newline-delimited JSON: progress lines (Done of Total
// chunks), then one line with the Report or the Error.
type VerifyEvent struct {
	Done   int64         `json:"done,omitempty"`
	Total  int64         `json:"total,omitempty"`
	Report *VerifyReport `json:"report,omitempty"`
	Error  *ErrorBody    `json:"error,omitempty"`
}

// GCReply is the reply to POST /v1/images/gc: what the collection
// reclaimed.
type GCReply struct {
	ChunksRemoved  int   `json:"chunks_removed"`
	PacksRemoved   int   `json:"packs_removed"`
	PacksRewritten int   `json:"packs_rewritten"`
	OrphanFiles    int   `json:"orphan_files"` // left by crashed or failed writes
	BytesFreed     int64 `json:"bytes_freed"`
}
