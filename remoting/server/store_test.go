package server

import (
	"context"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
)

func openTestStore(t *testing.T) (*Store, *store.Store) {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return NewStore(st), st
}

func TestStoreRoundTrip(t *testing.T) {
	s, raw := openTestStore(t)
	recs := []Record{
		{ID: "s-000000000001", SecretHash: []byte{1, 2}, State: Running, Created: time.Unix(100, 0).UTC(), Backend: "emulated", Device: "0"},
		{ID: "s-000000000002", State: Detached, Client: "10.0.0.1:5000", Created: time.Unix(200, 0).UTC()},
	}
	for _, r := range recs {
		if err := s.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.List()
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %v %v", all, err)
	}
	if all[1].Client != recs[1].Client || all[1].State != Detached || !all[1].Created.Equal(recs[1].Created) {
		t.Fatalf("round trip: %+v", all[1])
	}
	if err := s.Delete(recs[0].ID); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.List(); len(all) != 1 || all[0].ID != recs[1].ID {
		t.Fatalf("after delete: %+v", all)
	}
	// A corrupt record is reported as data loss, naming the session.
	for _, bad := range []string{`{"id":"s-bad","state":"flying"}`, `{"id":"s-other","state":"running"}`, `not json`} {
		_ = raw.PutSession(context.Background(), "s-bad", []byte(bad))
		if _, err := s.List(); !errs.Is(err, errs.DataLoss) {
			t.Fatalf("list with corrupt record %s: %v", bad, err)
		}
	}
}
