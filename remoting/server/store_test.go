package server

import (
	"path/filepath"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

func openTestStore(t *testing.T) (*Store, *bbolt.DB) {
	t.Helper()
	db, err := bbolt.Open(filepath.Join(t.TempDir(), "gpud.db"), 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	s, err := OpenStore(db)
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

func TestStoreRoundTrip(t *testing.T) {
	s, db := openTestStore(t)
	recs := []Record{
		{ID: "s-000000000001", SecretHash: []byte{1, 2}, State: Running, Created: time.Unix(100, 0).UTC(), Backend: "emulated", Device: "0"},
		{ID: "s-000000000002", State: Detached, Client: "10.0.0.1:5000", Created: time.Unix(200, 0).UTC()},
	}
	for _, r := range recs {
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get(recs[1].ID)
	if err != nil || got.Client != recs[1].Client || got.State != Detached || !got.Created.Equal(recs[1].Created) {
		t.Fatalf("get: %+v %v", got, err)
	}
	all, err := s.List()
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %v %v", all, err)
	}
	if err := s.Delete(recs[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(recs[0].ID); !errs.IsNotFound(err) {
		t.Fatalf("deleted record: %v", err)
	}
	// A corrupt record is reported as data loss, naming the session.
	_ = db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(sessionsBucket).Put([]byte("s-bad"), []byte(`{"id":"s-bad","state":"flying"}`))
	})
	if _, err := s.Get("s-bad"); !errs.Is(err, errs.DataLoss) {
		t.Fatalf("corrupt record: %v", err)
	}
	if _, err := s.List(); !errs.Is(err, errs.DataLoss) {
		t.Fatalf("list with a corrupt record: %v", err)
	}
}
