package store

import (
	"context"
	"errors"
	"os"

	"github.com/gpuctl/gpuctl/errs"
)

// Frame is a chunk in its stored form, for moving chunks between stores
// without recompressing them.
type Frame struct {
	Digest  Digest
	Raw     int  // uncompressed size
	Zstd    bool // Payload is one zstd frame; otherwise it is the content
	Payload []byte
}

// ReadFrame returns d in its stored form after checking that it decodes to
// d.
func (s *Store) ReadFrame(ctx context.Context, d Digest) (Frame, error) {
	_, r, payload, err := s.readChunk(ctx, d)
	if err != nil {
		return Frame{}, err
	}
	// The payload that was just checked, not a second read of it.
	return Frame{Digest: d, Raw: int(r.Raw), Zstd: r.Enc == encZstd, Payload: payload}, nil
}

// ReadFrames is ReadFrame for several chunks, looked up in one read
// transaction, for senders streaming many small chunks on many cores.
func (s *Store) ReadFrames(ctx context.Context, ds []Digest) ([]Frame, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs, err := s.lookupAll(ds)
	if err != nil {
		return nil, err
	}
	fs := make([]Frame, len(ds))
	for i, d := range ds {
		payload, err := s.readPayload(rs[i])
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrClosed) {
			// gc rewrote the pack since the look-up: look it up again.
			if fs[i], err = s.ReadFrame(ctx, d); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, errs.Wrap(err, errs.DataLoss, chunkSubject(d), "read")
		}
		if _, err := s.decode(d, rs[i].Enc, rs[i].Raw, payload); err != nil {
			return nil, err
		}
		fs[i] = Frame{Digest: d, Raw: int(rs[i].Raw), Zstd: rs[i].Enc == encZstd, Payload: payload}
	}
	return fs, nil
}

// DecodeFrame checks a frame from outside (an import, a peer) and returns
// its content: the size must be in range, the payload must decode to
// exactly Raw bytes, and those must hash to Digest. The error is an
// errs.InvalidArgument naming the chunk.
func (s *Store) DecodeFrame(f Frame) ([]byte, error) {
	if f.Raw <= 0 || f.Raw > MaxChunkSize {
		return nil, errs.New(errs.InvalidArgument, chunkSubject(f.Digest), "size %d is outside 1..%d", f.Raw, MaxChunkSize)
	}
	enc := uint8(encRaw)
	if f.Zstd {
		enc = encZstd
	}
	raw, err := s.decode(f.Digest, enc, uint32(f.Raw), f.Payload)
	if err != nil {
		return nil, &errs.Error{Kind: errs.InvalidArgument, Err: err}
	}
	return raw, nil
}

// PutFrame stores a frame that DecodeFrame accepted, keeping its payload
// as it is. It returns the bytes added (0 if the store had the chunk).
func (in *Ingest) PutFrame(ctx context.Context, f Frame) (int64, error) {
	if _, err := in.s.DecodeFrame(f); err != nil {
		return 0, err
	}
	enc := uint8(encRaw)
	if f.Zstd {
		enc = encZstd
	}
	return in.put(ctx, f.Digest, f.Raw, enc, f.Payload)
}

// PutFrames is PutFrame for several frames: each is checked, then all are
// looked up in one read transaction and only the missing ones written. A
// receiver handling a stream of small chunks on many cores would
// otherwise open a transaction per chunk. It returns the bytes added.
func (in *Ingest) PutFrames(ctx context.Context, fs []Frame) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	ds := make([]Digest, len(fs))
	for i, f := range fs {
		if _, err := in.s.DecodeFrame(f); err != nil {
			return 0, err
		}
		ds[i] = f.Digest
	}
	skip, err := in.present(ds)
	if err != nil {
		return 0, err
	}
	var added int64
	for i, f := range fs {
		if skip[i] {
			continue
		}
		enc := uint8(encRaw)
		if f.Zstd {
			enc = encZstd
		}
		// appendChunk skips a digest written meanwhile, including a
		// repeat earlier in fs.
		n, err := in.appendChunk(f.Digest, f.Raw, enc, f.Payload)
		if err != nil {
			return 0, err
		}
		added += n
	}
	return added, nil
}
