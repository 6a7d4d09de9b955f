package store

import (
	"encoding/hex"
	"fmt"

	"github.com/zeebo/blake3"

	"github.com/gpuctl/gpuctl/errs"
)

// Digest is the BLAKE3-256 hash of a chunk's uncompressed content.
type Digest [32]byte

// Sum returns the digest of b. BLAKE3 hashes a 16 KiB chunk 1.6 times as
// fast as SHA-256 with SHA extensions on the same core (AVX-512 versus
// SHA-NI, measured in docs/store.md), and hashing every byte is most of
// what a checkpoint of barely changed memory costs.
func Sum(b []byte) Digest { return blake3.Sum256(b) }

// String is the lowercase hex form used in manifests, logs and the API.
func (d Digest) String() string { return hex.EncodeToString(d[:]) }

// Short is the first 12 hex digits, for messages.
func (d Digest) Short() string { return hex.EncodeToString(d[:6]) }

// MarshalText implements encoding.TextMarshaler (hex).
func (d Digest) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler (hex).
func (d *Digest) UnmarshalText(b []byte) error {
	p, err := ParseDigest(string(b))
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// ParseDigest parses 64 hex digits.
func ParseDigest(s string) (Digest, error) {
	var d Digest
	if len(s) != 2*len(d) {
		return d, errs.New(errs.InvalidArgument, "", "chunk digest %q: want %d hex digits", clip(s), 2*len(d))
	}
	if _, err := hex.Decode(d[:], []byte(s)); err != nil {
		return d, errs.New(errs.InvalidArgument, "", "chunk digest %q: not hex", clip(s))
	}
	return d, nil
}

// chunkSubject names a chunk in errors.
func chunkSubject(d Digest) string { return fmt.Sprintf("chunk %s", d) }

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
