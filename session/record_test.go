package session

import (
	"context"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
)

// The host store keeps session records.
var _ Records = (*store.Store)(nil)

func openTestStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestRecordsRoundTrip(t *testing.T) {
	raw := openTestStore(t)
	s := records{raw}
	recs := []Record{
		{ID: "s-000000000001", SecretHash: []byte{1, 2}, State: Running, Created: time.Unix(100, 0).UTC(), Backend: "emulated", Device: "0"},
		{ID: "s-000000000002", State: Detached, Client: "10.0.0.1:5000", Created: time.Unix(200, 0).UTC()},
	}
	for _, r := range recs {
		if err := s.put(r); err != nil {
			t.Fatal(err)
		}
	}
	all, err := s.list()
	if err != nil || len(all) != 2 {
		t.Fatalf("list: %v %v", all, err)
	}
	if all[1].Client != recs[1].Client || all[1].State != Detached || !all[1].Created.Equal(recs[1].Created) {
		t.Fatalf("round trip: %+v", all[1])
	}
	if err := s.delete(recs[0].ID); err != nil {
		t.Fatal(err)
	}
	if all, _ := s.list(); len(all) != 1 || all[0].ID != recs[1].ID {
		t.Fatalf("after delete: %+v", all)
	}
	// A corrupt record is reported as data loss, naming the session.
	for _, bad := range []string{`{"id":"s-bad","state":"flying"}`, `{"id":"s-other","state":"running"}`, `not json`} {
		_ = raw.PutSession(context.Background(), "s-bad", []byte(bad))
		if _, err := s.list(); !errs.Is(err, errs.DataLoss) || !strings.Contains(err.Error(), `session "s-bad"`) {
			t.Fatalf("list with corrupt record %s: %v", bad, err)
		}
	}
}

// memRecords is Records in a map.
type memRecords struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (r *memRecords) PutSession(_ context.Context, id string, b []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m[id] = b
	return nil
}

func (r *memRecords) DeleteSession(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.m, id)
	return nil
}

func (r *memRecords) ListSessions(context.Context) (map[string][]byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.m), nil
}

// What a restarted gpud finds: a session that lives in an image is listed
// as stopped again, until its retention ends; one whose worker died with
// the old gpud is forgotten, record and all.
func TestNewManagerLoadsRecords(t *testing.T) {
	mem := &memRecords{m: map[string][]byte{}}
	old := records{mem}
	now := time.Now().UTC()
	for _, r := range []Record{
		{ID: "s-000000000001", State: Stopped, Created: now.Add(-time.Hour), StoppedAt: now.Add(-time.Minute), Image: "img-1"},
		{ID: "s-000000000002", State: Running, Created: now.Add(-time.Hour), WorkerPID: 4242},
		{ID: "s-000000000003", State: Stopped, Created: now.Add(-time.Hour), StoppedAt: now.Add(-StoppedRetention - time.Minute)},
	} {
		if err := old.put(r); err != nil {
			t.Fatal(err)
		}
	}
	m, err := NewManager(Config{Host: "h", Records: mem})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Shutdown(context.Background())
	list := m.List(context.Background())
	if len(list) != 2 || list[0].ID != "s-000000000001" || list[0].State != Stopped || list[0].Host != "h" {
		t.Fatalf("listed %+v, want the two stopped sessions", list)
	}
	if _, ok := mem.m["s-000000000002"]; ok {
		t.Error("the record of a session whose worker died was kept")
	}
	if img, err := m.LastImage(context.Background(), "s-000000000001"); err != nil || img != "img-1" {
		t.Errorf("last image %q %v", img, err)
	}
	// The one past its retention goes at once (its timer's floor is 1 s).
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := m.Get("s-000000000003"); errs.IsNotFound(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a stopped session past its retention is still listed")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, ok := mem.m["s-000000000003"]; ok {
		t.Error("its record was kept")
	}
	// A corrupt record stops gpud with data loss rather than guessing.
	mem.m["s-bad"] = []byte("not json")
	if _, err := NewManager(Config{Records: mem}); !errs.Is(err, errs.DataLoss) {
		t.Fatalf("corrupt record: %v", err)
	}
}
