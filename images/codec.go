package images

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/gpuctl/gpuctl/errs"
)

// encodeManifest is JSON, zstd-compressed: the chunk lists of a large image
// are megabytes of hex.
func encodeManifest(m *Manifest) ([]byte, error) {
	js, err := json.Marshal(m)
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, errs.Image(m.ID), "encode manifest")
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "", "zstd")
	}
	defer enc.Close()
	return enc.EncodeAll(js, nil), nil
}

// decodeManifest decodes and validates a manifest from any source, never
// inflating more than maxManifestBytes.
func decodeManifest(b []byte) (*Manifest, error) { return decodeManifestLimit(b, maxManifestBytes) }

func decodeManifestLimit(b []byte, limit int) (*Manifest, error) {
	dec, err := zstd.NewReader(bytes.NewReader(b), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(64<<20))
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "manifest is not zstd")
	}
	defer dec.Close()
	js, err := io.ReadAll(io.LimitReader(dec, int64(limit)+1))
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "manifest does not decompress")
	}
	if len(js) > limit {
		return nil, errs.New(errs.InvalidArgument, "", "manifest inflates past %d bytes; refusing it", limit)
	}
	var v struct {
		Version int    `json:"version"`
		ID      string `json:"id"`
	}
	if err := json.Unmarshal(js, &v); err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "manifest is not valid JSON")
	}
	if v.Version != ManifestVersion {
		return nil, errs.New(errs.InvalidArgument, errs.Image(v.ID), "manifest version %d; this gpud reads version %d", v.Version, ManifestVersion)
	}
	var m Manifest
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "manifest is not valid JSON")
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return &m, nil
}
