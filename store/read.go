package store

import (
	"bytes"
	"context"
	"errors"
	"os"

	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// has reports whether d is indexed.
func (s *Store) has(d Digest) (bool, error) {
	var ok bool
	err := s.view(func(tx *bolt.Tx) error {
		ok = tx.Bucket(bucketChunks).Get(d[:]) != nil
		return nil
	})
	return ok, dbErr(err, "look up chunk")
}

// Missing returns the digests in ds that the store does not hold, in the
// order given, without duplicates.
func (s *Store) Missing(ctx context.Context, ds []Digest) ([]Digest, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Digest
	seen := make(map[Digest]bool, len(ds))
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChunks)
		for _, d := range ds {
			if !seen[d] && b.Get(d[:]) == nil {
				out = append(out, d)
			}
			seen[d] = true
		}
		return nil
	})
	return out, dbErr(err, "look up chunks")
}

// ChunkInfo describes a stored chunk.
type ChunkInfo struct {
	Digest  Digest
	Raw     int  // uncompressed size
	Stored  int  // bytes in the pack
	Refs    int  // images that use it
	Encoded bool // zstd rather than raw
}

// Stat returns what the index says about d.
func (s *Store) Stat(ctx context.Context, d Digest) (ChunkInfo, error) {
	r, err := s.lookup(ctx, d)
	if err != nil {
		return ChunkInfo{}, err
	}
	return ChunkInfo{Digest: d, Raw: int(r.Raw), Stored: int(r.Stored), Refs: int(r.Refs), Encoded: r.Enc == encZstd}, nil
}

// StatAll is Stat for several chunks, in one read transaction.
func (s *Store) StatAll(ctx context.Context, ds []Digest) ([]ChunkInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rs, err := s.lookupAll(ds)
	if err != nil {
		return nil, err
	}
	out := make([]ChunkInfo, len(ds))
	for i, r := range rs {
		out[i] = ChunkInfo{Digest: ds[i], Raw: int(r.Raw), Stored: int(r.Stored), Refs: int(r.Refs), Encoded: r.Enc == encZstd}
	}
	return out, nil
}

func (s *Store) lookup(ctx context.Context, d Digest) (chunkRecord, error) {
	if err := ctx.Err(); err != nil {
		return chunkRecord{}, err
	}
	var r chunkRecord
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketChunks).Get(d[:])
		if v == nil {
			return errs.New(errs.NotFound, chunkSubject(d), "not in the store")
		}
		var ok bool
		r, ok = decodeChunkRecord(v)
		return must(ok, "%s has a bad record", chunkSubject(d))
	})
	return r, dbErr(err, "look up chunk")
}

// ReadChunk returns d's content, decompressed and checked against d. A
// chunk whose bytes do not match is an errs.DataLoss error naming it.
func (s *Store) ReadChunk(ctx context.Context, d Digest) ([]byte, error) {
	raw, _, _, err := s.readChunk(ctx, d)
	return raw, err
}

// readChunk returns d's content, its record and its stored payload, for
// senders that pass chunks on without recompressing.
func (s *Store) readChunk(ctx context.Context, d Digest) (raw []byte, r chunkRecord, payload []byte, err error) {
	r, err = s.lookup(ctx, d)
	if err != nil {
		return nil, r, nil, err
	}
	payload, err = s.readPayload(r)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrClosed) {
		// gc rewrote the pack between the look-up and the read.
		if r, err = s.lookup(ctx, d); err != nil {
			return nil, r, nil, err
		}
		payload, err = s.readPayload(r)
	}
	if err != nil {
		return nil, r, nil, errs.Wrap(err, errs.DataLoss, chunkSubject(d), "read")
	}
	raw, err = s.decode(d, r.Enc, r.Raw, payload)
	return raw, r, payload, err
}

// ReadChunkTo reads d's content into dst, which must be exactly as long
// as the chunk, and checks it against d like ReadChunk does. A stored-raw
// chunk is read straight into dst and a compressed one decoded into it,
// so callers that assemble large buffers save an allocation and a copy
// per chunk. On error dst holds garbage.
func (s *Store) ReadChunkTo(ctx context.Context, d Digest, dst []byte) error {
	r, err := s.lookup(ctx, d)
	if err != nil {
		return err
	}
	err = s.readInto(r, d, dst)
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrClosed) {
		// gc rewrote the pack between the look-up and the read.
		if r, err = s.lookup(ctx, d); err != nil {
			return err
		}
		err = s.readInto(r, d, dst)
	}
	if err != nil {
		var e *errs.Error
		if errors.As(err, &e) {
			return err
		}
		return errs.Wrap(err, errs.DataLoss, chunkSubject(d), "read")
	}
	return nil
}

// ReadChunksTo is ReadChunkTo for several chunks, looked up in one read
// transaction: dsts[i] receives ds[i]. Readers of many small chunks at
// once (a checkout on many cores) would otherwise open a transaction per
// chunk, and every one takes the database's lock twice.
func (s *Store) ReadChunksTo(ctx context.Context, ds []Digest, dsts [][]byte) error {
	if len(ds) != len(dsts) {
		return errs.New(errs.Internal, "", "%d digests for %d buffers", len(ds), len(dsts))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	rs, err := s.lookupAll(ds)
	if err != nil {
		return err
	}
	for i, d := range ds {
		err := s.readInto(rs[i], d, dsts[i])
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrClosed) {
			// gc rewrote the pack since the look-up: look it up again.
			err = s.ReadChunkTo(ctx, d, dsts[i])
		}
		if err != nil {
			var e *errs.Error
			if errors.As(err, &e) {
				return err
			}
			return errs.Wrap(err, errs.DataLoss, chunkSubject(d), "read")
		}
	}
	return nil
}

// lookupAll is lookup for several digests in one read transaction.
func (s *Store) lookupAll(ds []Digest) ([]chunkRecord, error) {
	rs := make([]chunkRecord, len(ds))
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChunks)
		for i, d := range ds {
			v := b.Get(d[:])
			if v == nil {
				return errs.New(errs.NotFound, chunkSubject(d), "not in the store")
			}
			var ok bool
			if rs[i], ok = decodeChunkRecord(v); !ok {
				return must(false, "%s has a bad record", chunkSubject(d))
			}
		}
		return nil
	})
	return rs, dbErr(err, "look up chunks")
}

func (s *Store) readInto(r chunkRecord, d Digest, dst []byte) error {
	if int(r.Raw) != len(dst) {
		return errs.New(errs.DataLoss, chunkSubject(d), "the index says %d bytes, the image %d", r.Raw, len(dst))
	}
	switch r.Enc {
	case encRaw:
		if int(r.Stored) != len(dst) {
			return errs.New(errs.DataLoss, chunkSubject(d), "stored raw in %d bytes, index says %d", r.Stored, r.Raw)
		}
		if err := s.readPayloadInto(r, dst); err != nil {
			return err
		}
	case encZstd:
		payload, err := s.readPayload(r)
		if err != nil {
			return err
		}
		out, err := s.dec.DecodeAll(payload, dst[:0])
		if err != nil {
			return errs.Wrap(err, errs.DataLoss, chunkSubject(d), "decompress")
		}
		if len(out) != len(dst) {
			return errs.New(errs.DataLoss, chunkSubject(d), "content is %d bytes, index says %d", len(out), r.Raw)
		}
		if &out[0] != &dst[0] { // cannot happen with room for exactly len(dst), but cheap to be sure
			copy(dst, out)
		}
	default:
		return errs.New(errs.DataLoss, chunkSubject(d), "unknown encoding %d", r.Enc)
	}
	if Sum(dst) != d {
		return errs.New(errs.DataLoss, chunkSubject(d), "content does not match its digest")
	}
	return nil
}

func (s *Store) readPayload(r chunkRecord) ([]byte, error) {
	buf := make([]byte, r.Stored)
	return buf, s.readPayloadInto(r, buf)
}

// readPayloadInto reads r's payload into buf, which is r.Stored long.
func (s *Store) readPayloadInto(r chunkRecord, buf []byte) error {
	s.packsMu.RLock()
	f := s.files[r.Pack]
	s.packsMu.RUnlock()
	if f == nil {
		s.packsMu.Lock()
		if f = s.files[r.Pack]; f == nil {
			var err error
			if f, err = os.Open(s.packPath(r.Pack)); err != nil {
				s.packsMu.Unlock()
				return err
			}
			s.files[r.Pack] = f
		}
		s.packsMu.Unlock()
	}
	s.packsMu.RLock()
	defer s.packsMu.RUnlock()
	if f = s.files[r.Pack]; f == nil { // gc closed it meanwhile
		return os.ErrNotExist
	}
	_, err := f.ReadAt(buf, int64(r.Offset))
	return err
}

// decode turns a stored payload back into content, never producing more
// than the decoder's limit (2×MaxChunkSize), and checks the length and
// the digest.
func (s *Store) decode(d Digest, enc uint8, raw uint32, payload []byte) ([]byte, error) {
	var out []byte
	switch enc {
	case encRaw:
		out = payload
	case encZstd:
		var err error
		out, err = s.dec.DecodeAll(payload, make([]byte, 0, raw))
		if err != nil {
			return nil, errs.Wrap(err, errs.DataLoss, chunkSubject(d), "decompress")
		}
	default:
		return nil, errs.New(errs.DataLoss, chunkSubject(d), "unknown encoding %d", enc)
	}
	if len(out) != int(raw) {
		return nil, errs.New(errs.DataLoss, chunkSubject(d), "content is %d bytes, index says %d", len(out), raw)
	}
	if Sum(out) != d {
		return nil, errs.New(errs.DataLoss, chunkSubject(d), "content does not match its digest")
	}
	return out, nil
}

// roundTrip checks that payload decodes to exactly data, whose digest the
// caller computed: comparing bytes proves the same as re-hashing, for less.
// The decoded copy goes into *scratch, which is grown as needed.
func (s *Store) roundTrip(d Digest, data, payload []byte, scratch *[]byte) error {
	out, err := s.dec.DecodeAll(payload, (*scratch)[:0])
	*scratch = out[:0]
	if err != nil || !bytes.Equal(out, data) {
		return errs.New(errs.Internal, chunkSubject(d), "compression round trip does not give the content back (%v)", err)
	}
	return nil
}

// closePack forgets an open pack file; callers hold packsMu.
func (s *Store) closePackLocked(id Digest) {
	if f := s.files[id]; f != nil {
		_ = f.Close()
		delete(s.files, id)
	}
}
