package store

import (
	"context"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// ImageEntry is an image as the index holds it.
type ImageEntry struct {
	ID   string
	Info []byte // opaque JSON from package images
}

// ListImages returns every committed image in id order.
func (s *Store) ListImages(ctx context.Context) ([]ImageEntry, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []ImageEntry
	err := s.view(func(tx *bolt.Tx) error {
		images := tx.Bucket(bucketImages)
		return images.ForEachBucket(func(id []byte) error {
			out = append(out, ImageEntry{ID: string(id), Info: slices.Clone(images.Bucket(id).Get(keyInfo))})
			return nil
		})
	})
	return out, dbErr(err, "list images")
}

// ImagesOfSession returns the ids of a session's images, oldest id first.
func (s *Store) ImagesOfSession(ctx context.Context, session string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []string
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketBySession).Bucket([]byte(session))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, _ []byte) error {
			out = append(out, string(k))
			return nil
		})
	})
	return out, dbErr(err, "list images of session")
}

// ImageNotFound is the error for an image the store does not hold. Those
// who must answer as if an image were missing (one a tenant may not see)
// return it too, so that the two cannot be told apart.
func ImageNotFound(id string) error {
	return errs.New(errs.NotFound, errs.Image(id), "not in this host's store; `gpuctl images ls` lists what is")
}

// GetImage returns an image's info and manifest as committed.
func (s *Store) GetImage(ctx context.Context, id string) (info, manifest []byte, err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	err = s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketImages).Bucket([]byte(id))
		if b == nil {
			return ImageNotFound(id)
		}
		info, manifest = slices.Clone(b.Get(keyInfo)), slices.Clone(b.Get(keyManifest))
		return nil
	})
	return info, manifest, dbErr(err, "get image")
}

// ImageRefs returns the distinct chunks an image uses, sorted.
func (s *Store) ImageRefs(ctx context.Context, id string) ([]Digest, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []Digest
	err := s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketImages).Bucket([]byte(id))
		if b == nil {
			return errs.New(errs.NotFound, errs.Image(id), "not in this host's store")
		}
		var err error
		out, err = splitRefs(id, b.Get(keyRefs))
		return err
	})
	return out, dbErr(err, "get image refs")
}

func splitRefs(id string, flat []byte) ([]Digest, error) {
	if len(flat)%32 != 0 {
		return nil, must(false, "%s has a refs list of %d bytes", errs.Image(id), len(flat))
	}
	out := make([]Digest, len(flat)/32)
	for i := range out {
		copy(out[i][:], flat[i*32:])
	}
	return out, nil
}

// DeleteImage removes an image and drops one reference from each chunk it
// used. The chunks' space comes back at the next GC.
func (s *Store) DeleteImage(ctx context.Context, id string) error {
	err := s.update(ctx, func(tx *bolt.Tx) error {
		images, chunks := tx.Bucket(bucketImages), tx.Bucket(bucketChunks)
		b := images.Bucket([]byte(id))
		if b == nil {
			return ImageNotFound(id)
		}
		refs, err := splitRefs(id, b.Get(keyRefs))
		if err != nil {
			return err
		}
		for _, d := range refs {
			r, ok := decodeChunkRecord(chunks.Get(d[:]))
			if !ok || r.Refs == 0 {
				return must(false, "%s of %s has no reference to drop", chunkSubject(d), errs.Image(id))
			}
			r.Refs--
			if err := chunks.Put(d[:], r.encode()); err != nil {
				return err
			}
		}
		if session := sessionOfInfo(b.Get(keyInfo)); session != "" {
			idx := tx.Bucket(bucketBySession)
			if sb := idx.Bucket([]byte(session)); sb != nil {
				if err := sb.Delete([]byte(id)); err != nil {
					return err
				}
				if k, _ := sb.Cursor().First(); k == nil {
					if err := idx.DeleteBucket([]byte(session)); err != nil {
						return err
					}
				}
			}
		}
		return images.DeleteBucket([]byte(id))
	})
	return dbErr(err, "delete image")
}
