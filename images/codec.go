package images

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"

	"github.com/klauspost/compress/zstd"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
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
	var m *Manifest
	switch v.Version {
	case ManifestVersion:
		m = new(Manifest)
		if err := decodeStrict(js, m); err != nil {
			return nil, err
		}
	case 1:
		var old manifestV1
		if err := decodeStrict(js, &old); err != nil {
			return nil, err
		}
		if m, err = old.upgrade(); err != nil {
			return nil, err
		}
	default:
		return nil, errs.New(errs.InvalidArgument, errs.Image(v.ID), "manifest version %d; this gpud reads versions 1 to %d", v.Version, ManifestVersion)
	}
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return m, nil
}

// decodeStrict refuses fields the format does not have: a manifest is
// either understood completely or not at all.
func decodeStrict(js []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(js))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return errs.Wrap(err, errs.InvalidArgument, "", "manifest is not valid JSON")
	}
	return nil
}

// labelV1GPUs is the label in which version 1 manifests carried the full
// records of the session's GPUs (index, memory, PCI bus), as a JSON list,
// because their gpus field held only models and UUIDs.
const labelV1GPUs = "gpuctl.gpus"

// manifestV1 is a version 1 manifest: the same as version 2 except that
// each GPU is {model, uuid} and there is no owner. Its GPUs field hides
// Meta.GPUs when decoding, and its Tenant field Meta.Tenant, so that a
// version 1 manifest naming a tenant is caught rather than taken.
type manifestV1 struct {
	Manifest
	GPUs []struct {
		Model string `json:"model"`
		UUID  string `json:"uuid"`
	} `json:"gpus,omitempty"`
	Tenant json.RawMessage `json:"tenant,omitempty"`
}

// upgrade returns the manifest in the current version. The GPUs come from
// the gpuctl.gpus label when it is there (every gpud that wrote version 1
// set it), which then leaves the labels; otherwise from models and UUIDs,
// numbered in order. The image is the administrator's.
func (v *manifestV1) upgrade() (*Manifest, error) {
	if v.Tenant != nil {
		return nil, errs.New(errs.InvalidArgument, errs.Image(v.ID), "manifest version 1 has no tenant field; owned images are version 2")
	}
	m := v.Manifest
	m.Version = ManifestVersion
	m.GPUs = nil
	raw, ok := m.Labels[labelV1GPUs]
	if !ok {
		for i, g := range v.GPUs {
			m.GPUs = append(m.GPUs, backend.GPU{Index: i, Name: g.Model, UUID: g.UUID})
		}
		return &m, nil
	}
	if err := json.Unmarshal([]byte(raw), &m.GPUs); err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, errs.Image(m.ID), "label %s is not a list of GPUs", labelV1GPUs)
	}
	m.Labels = maps.Clone(m.Labels)
	delete(m.Labels, labelV1GPUs)
	if len(m.Labels) == 0 {
		m.Labels = nil
	}
	return &m, nil
}
