package store

import (
	"context"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// The sessions bucket holds gpud's session records for package session,
// which owns their form (session.Record): to the store each is an opaque
// value under its session id, kept in the same database as the images.

// PutSession creates or replaces a session's record.
func (s *Store) PutSession(ctx context.Context, id string, rec []byte) error {
	if id == "" {
		return errs.New(errs.InvalidArgument, "", "session id is empty")
	}
	return dbErr(s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).Put([]byte(id), rec)
	}), "put session")
}

// GetSession returns a session's record, or an errs.NotFound error.
func (s *Store) GetSession(ctx context.Context, id string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketSessions).Get([]byte(id))
		if v == nil {
			return errs.New(errs.NotFound, errs.Session(id), "no record on this host")
		}
		out = slices.Clone(v)
		return nil
	})
	return out, dbErr(err, "get session")
}

// DeleteSession removes a session's record; deleting a missing one is not
// an error, so cleanup paths can call it unconditionally.
func (s *Store) DeleteSession(ctx context.Context, id string) error {
	return dbErr(s.update(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).Delete([]byte(id))
	}), "delete session")
}

// ListSessions returns every session record by session id.
func (s *Store) ListSessions(ctx context.Context) (map[string][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketSessions).ForEach(func(k, v []byte) error {
			out[string(k)] = slices.Clone(v)
			return nil
		})
	})
	return out, dbErr(err, "list sessions")
}
