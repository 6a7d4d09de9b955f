package store

import (
	"context"

	bolt "go.etcd.io/bbolt"
)

// Unpend ends the grace of those of ds that no image uses: chunks put
// ahead of a manifest (a live migration's pre-copy) for an image that will
// not come, because the migration failed. The next GC collects them
// instead of keeping them for Options.PendingGrace. Chunks an image uses,
// or that are not in the store, are left alone.
func (s *Store) Unpend(ctx context.Context, ds []Digest) error {
	if len(ds) == 0 {
		return nil
	}
	err := s.update(ctx, func(tx *bolt.Tx) error {
		chunks := tx.Bucket(bucketChunks)
		for _, d := range ds {
			v := chunks.Get(d[:])
			if v == nil {
				continue
			}
			r, ok := decodeChunkRecord(v)
			if !ok || r.Refs > 0 || r.Pending == 0 {
				continue
			}
			r.Pending = 0
			if err := chunks.Put(d[:], r.encode()); err != nil {
				return err
			}
		}
		return nil
	})
	return dbErr(err, "unpend chunks")
}
