package api

import (
	"encoding/hex"

	"github.com/gpuctl/gpuctl/errs"
)

// Digest names a chunk by the BLAKE3-256 hash of its content; it travels
// as 64 lowercase hex digits, as store.Digest writes it.
type Digest [32]byte

// String is the hex form.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// MarshalText implements encoding.TextMarshaler (hex).
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (hex).
func (d *Digest) UnmarshalText(b []byte) error {
	if len(b) != 2*len(d) {
		return errs.New(errs.InvalidArgument, "", "chunk digest %q: want %d hex digits", clip(string(b)), 2*len(d))
	}
	if _, err := hex.Decode(d[:], b); err != nil {
		return errs.New(errs.InvalidArgument, "", "chunk digest %q: not hex", clip(string(b)))
	}
	return nil
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// MissingChunksRequest is the body of POST /v1/chunks/missing: the chunks
// of an image a host is about to send.
type MissingChunksRequest struct {
	Digests []Digest `json:"digests"`
}

// MissingChunksReply lists the requested chunks the receiver lacks.
type MissingChunksReply struct {
	Missing []Digest `json:"missing"`
}

// PutChunksReply is the reply to PUT /v1/chunks, whose body is a chunk
// stream (docs/image-format.md): the chunks received ahead of their
// manifest.
type PutChunksReply struct {
	Chunks      int64 `json:"chunks"`
	StoredBytes int64 `json:"stored_bytes"`
}

// ImageChunksMax is the most digests GET /v1/images/{id}/chunks returns:
// a larger image answers with an evenly spread sample of its chunks, which
// estimates a host's share of it as well as the full list would.
const ImageChunksMax = 4096

// ImageChunksReply is the reply to GET /v1/images/{id}/chunks: the
// image's distinct non-zero chunks (all of them, or a sample of at most
// ImageChunksMax), each with its size, and how many it has in all.
type ImageChunksReply struct {
	Total   int      `json:"total"`
	Digests []Digest `json:"digests"`
	Bytes   []int64  `json:"bytes"`
}

// PushImageRequest is the body of POST /v1/images/{id}/push: the host
// sends the image to another gpud, only the chunks that one lacks, as
// replication does. It is the administrator's (the host token, which the
// hosts of a cluster share).
type PushImageRequest struct {
	// To is the receiving gpud's control API address, HOST:PORT.
	To string `json:"to"`
}

// PushImageReply is the reply to POST /v1/images/{id}/push.
type PushImageReply struct {
	ID string `json:"id"`
	To string `json:"to"`
	// SentBytes are the chunk bytes the receiver lacked and was sent;
	// Bytes is the image's logical size. AlreadyHeld: the receiver had
	// the image already and nothing was sent.
	SentBytes   int64 `json:"sent_bytes"`
	Bytes       int64 `json:"bytes"`
	AlreadyHeld bool  `json:"already_held,omitempty"`
}
