package server

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
)

// Record is what gpud persists about a session, as the opaque value of
// its entry in the sessions bucket of the host store (STATE_DIR/gpud.db).
// The secret itself is never stored, only its SHA-256, which is all a
// resume check needs.
type Record struct {
	ID         string    `json:"id"`
	SecretHash []byte    `json:"secret_sha256"`
	State      State     `json:"state"`
	Client     string    `json:"client,omitempty"`
	Created    time.Time `json:"created"`
	Backend    string    `json:"backend"`
	Device     string    `json:"device"`
	WorkerPID  int       `json:"worker_pid,omitempty"`
	// Image is the image the session was last restored from here.
	Image string `json:"image,omitempty"`
	// StoppedAt is when the session's worker here was released.
	StoppedAt time.Time `json:"stopped_at,omitzero"`
}

// Records is the sessions bucket; *store.Store provides it.
type Records interface {
	PutSession(ctx context.Context, id string, rec []byte) error
	DeleteSession(ctx context.Context, id string) error
	ListSessions(ctx context.Context) ([]store.SessionRecord, error)
}

var _ Records = (*store.Store)(nil)

// Store reads and writes session records.
type Store struct{ r Records }

// NewStore keeps session records in r.
func NewStore(r Records) *Store { return &Store{r: r} }

// Put writes r.
func (s *Store) Put(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return errs.Wrap(s.r.PutSession(context.Background(), r.ID, b), errs.Internal, errs.Session(r.ID), "save session record")
}

// Delete removes the record of id; a missing record is not an error.
func (s *Store) Delete(id string) error {
	return errs.Wrap(s.r.DeleteSession(context.Background(), id), errs.Internal, errs.Session(id), "delete session record")
}

// List reads every record.
func (s *Store) List() ([]Record, error) {
	raw, err := s.r.ListSessions(context.Background())
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(raw))
	for _, e := range raw {
		var r Record
		if err := decodeRecord(e.ID, e.Rec, &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

func decodeRecord(id string, b []byte, r *Record) error {
	if err := json.Unmarshal(b, r); err != nil {
		return errs.Wrap(err, errs.DataLoss, errs.Session(id), "corrupt session record")
	}
	if _, err := parseState(string(r.State)); err != nil {
		return errs.Wrap(err, errs.DataLoss, errs.Session(id), "corrupt session record")
	}
	if r.ID != id {
		return errs.New(errs.DataLoss, errs.Session(id), "record names session %q", r.ID)
	}
	return nil
}

// String is for logs.
func (r Record) String() string { return fmt.Sprintf("%s (%s)", r.ID, r.State) }
