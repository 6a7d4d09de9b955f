package server

import (
	"encoding/json"
	"fmt"
	"time"

	"go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// sessionsBucket is the top-level bucket of the host's bbolt database
// (DIR/gpud.db, shared with the image store) that holds session records:
//
//	sessions/
//	    <session id> -> Record as JSON
var sessionsBucket = []byte("sessions")

// Record is what gpud persists about a session. The secret itself is never
// stored, only its SHA-256, which is all a resume check needs.
type Record struct {
	ID         string    `json:"id"`
	SecretHash []byte    `json:"secret_sha256"`
	State      State     `json:"state"`
	Client     string    `json:"client,omitempty"`
	Created    time.Time `json:"created"`
	Backend    string    `json:"backend"`
	Device     string    `json:"device"`
	WorkerPID  int       `json:"worker_pid,omitempty"`
}

// Store keeps session records in a bucket of a bbolt database that others
// may share.
type Store struct{ db *bbolt.DB }

// OpenStore makes sure the sessions bucket exists in db.
func OpenStore(db *bbolt.DB) (*Store, error) {
	err := db.Update(func(tx *bbolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists(sessionsBucket)
		return err
	})
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "", "create the sessions bucket")
	}
	return &Store{db: db}, nil
}

// Put writes r.
func (s *Store) Put(r Record) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(sessionsBucket).Put([]byte(r.ID), b) })
	return errs.Wrap(err, errs.Internal, errs.Session(r.ID), "save session record")
}

// Delete removes the record of id; a missing record is not an error.
func (s *Store) Delete(id string) error {
	err := s.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(sessionsBucket).Delete([]byte(id)) })
	return errs.Wrap(err, errs.Internal, errs.Session(id), "delete session record")
}

// Get reads the record of id.
func (s *Store) Get(id string) (Record, error) {
	var r Record
	err := s.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(sessionsBucket).Get([]byte(id))
		if b == nil {
			return errs.New(errs.NotFound, errs.Session(id), "no such session")
		}
		return decodeRecord(id, b, &r)
	})
	return r, err
}

// List reads every record.
func (s *Store) List() ([]Record, error) {
	var out []Record
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(sessionsBucket).ForEach(func(k, v []byte) error {
			var r Record
			if err := decodeRecord(string(k), v, &r); err != nil {
				return err
			}
			out = append(out, r)
			return nil
		})
	})
	return out, err
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
