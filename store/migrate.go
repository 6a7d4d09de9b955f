package store

import (
	"encoding/binary"

	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// migration moves the schema from version i to i+1 (its index in
// migrations plus one). Each runs in the same transaction that records the
// new version, so a crash leaves the old schema or the new one.
type migration struct {
	name string
	up   func(tx *bolt.Tx) error
}

// migrations is the ordered history of the schema. Append only: a
// released entry never changes. SchemaVersion is len(migrations).
var migrations = []migration{
	{"create the meta, images, chunks, packs and sessions buckets", func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketImages, bucketChunks, bucketPacks, bucketSessions} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	}},
	{"index images by session (bysession/<session>/<image id>)", func(tx *bolt.Tx) error {
		idx, err := tx.CreateBucketIfNotExists(bucketBySession)
		if err != nil {
			return err
		}
		return tx.Bucket(bucketImages).ForEachBucket(func(id []byte) error {
			info := tx.Bucket(bucketImages).Bucket(id).Get(keyInfo)
			return indexSession(idx, sessionOfInfo(info), id)
		})
	}},
}

// SchemaVersion is the schema this build writes.
var SchemaVersion = uint64(len(migrations))

// schemaVersion reads the stored version; a fresh database is version 0.
func schemaVersion(tx *bolt.Tx) uint64 {
	m := tx.Bucket(bucketMeta)
	if m == nil {
		return 0
	}
	v := m.Get(keyVersion)
	if len(v) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(v)
}

// migrate brings db to SchemaVersion, one transaction per step, and
// refuses a database written by a newer build.
func migrate(db *bolt.DB) error {
	return migrateTo(db, SchemaVersion)
}

func migrateTo(db *bolt.DB, target uint64) error {
	for {
		var done bool
		err := db.Update(func(tx *bolt.Tx) error {
			v := schemaVersion(tx)
			if v > uint64(len(migrations)) {
				return errs.New(errs.FailedPrecondition, "", "%s has schema version %d but this gpud knows only up to %d; run a newer gpud", db.Path(), v, len(migrations))
			}
			if v >= target {
				done = true
				return nil
			}
			m, err := tx.CreateBucketIfNotExists(bucketMeta)
			if err != nil {
				return err
			}
			if err := migrations[v].up(tx); err != nil {
				return errs.Wrap(err, errs.Internal, "", "migrate %s to schema %d (%s)", db.Path(), v+1, migrations[v].name)
			}
			return m.Put(keyVersion, binary.BigEndian.AppendUint64(nil, v+1))
		})
		if err != nil {
			return dbErr(err, "migrate schema")
		}
		if done {
			return nil
		}
	}
}
