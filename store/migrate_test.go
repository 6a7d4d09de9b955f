package store

import (
	"context"
	"encoding/binary"
	"path/filepath"
	"strings"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// openRaw opens a bare bbolt file for building old schemas by hand.
func openRaw(t *testing.T) *bolt.DB {
	t.Helper()
	db, err := bolt.Open(filepath.Join(t.TempDir(), "gpud.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestMigrations(t *testing.T) {
	if len(migrations) != 2 {
		t.Fatalf("%d migrations but this test covers 2: add a case for the new one", len(migrations))
	}
	tests := []struct {
		name  string
		from  uint64
		setup func(tx *bolt.Tx) error
		check func(t *testing.T, tx *bolt.Tx)
	}{
		{"1: create buckets", 0, nil, func(t *testing.T, tx *bolt.Tx) {
			for _, b := range [][]byte{bucketMeta, bucketImages, bucketChunks, bucketPacks, bucketSessions} {
				if tx.Bucket(b) == nil {
					t.Errorf("bucket %s missing", b)
				}
			}
		}},
		{"2: index images by session", 1, func(tx *bolt.Tx) error {
			for id, info := range map[string]string{"img-a": `{"session":"s-1"}`, "img-b": `{"session":"s-1"}`, "img-c": `{"session":"s-2"}`, "img-d": `{}`} {
				b, err := tx.Bucket(bucketImages).CreateBucket([]byte(id))
				if err != nil {
					return err
				}
				if err := b.Put(keyInfo, []byte(info)); err != nil {
					return err
				}
			}
			return nil
		}, func(t *testing.T, tx *bolt.Tx) {
			want := map[string]string{"s-1": "img-a,img-b", "s-2": "img-c"}
			idx := tx.Bucket(bucketBySession)
			n := 0
			_ = idx.ForEachBucket(func(sess []byte) error {
				n++
				var ids []string
				_ = idx.Bucket(sess).ForEach(func(k, _ []byte) error { ids = append(ids, string(k)); return nil })
				if strings.Join(ids, ",") != want[string(sess)] {
					t.Errorf("session %s: %v", sess, ids)
				}
				return nil
			})
			if n != len(want) {
				t.Errorf("%d sessions indexed, want %d", n, len(want))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := openRaw(t)
			if err := migrateTo(db, tt.from); err != nil {
				t.Fatal(err)
			}
			if tt.setup != nil {
				if err := db.Update(tt.setup); err != nil {
					t.Fatal(err)
				}
			}
			if err := migrateTo(db, tt.from+1); err != nil {
				t.Fatal(err)
			}
			_ = db.View(func(tx *bolt.Tx) error {
				if v := schemaVersion(tx); v != tt.from+1 {
					t.Errorf("version %d after migration, want %d", v, tt.from+1)
				}
				tt.check(t, tx)
				return nil
			})
		})
	}
}

func TestNewerSchemaIsRefused(t *testing.T) {
	dir := t.TempDir()
	s := openAt(t, dir, Options{})
	if err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersion, binary.BigEndian.AppendUint64(nil, SchemaVersion+1))
	}); err != nil {
		t.Fatal(err)
	}
	err := migrate(s.db)
	if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "newer gpud") {
		t.Fatalf("got %v", err)
	}
	// Put it back so the cleanup check sees a current schema.
	_ = s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyVersion, binary.BigEndian.AppendUint64(nil, SchemaVersion))
	})
	_ = context.Background()
}
