package session

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

// Record is what gpud persists about a session, as JSON: the value of the
// session's entry in Records. The secret itself is never stored, only its
// SHA-256, which is all a resume check needs.
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
	// Tenant owns the session: the tenant whose token created it, or
	// whose image it was restored from; empty for the administrator.
	Tenant string `json:"tenant,omitempty"`
	// Epoch is the session's epoch on this host: the one worker allowed
	// to serve it is the one gpud last handed this number. It grows when
	// a worker goes on past an image of it (checkpoint --leave-running, a
	// failed migration resuming here), when an image is restored, and
	// when the session moves to another host.
	Epoch uint64 `json:"epoch,omitempty"`
	// Priority and Labels are what the client gave its session (see
	// api.Labels); they come back from its images on a restore.
	Priority int32      `json:"priority,omitempty"`
	Labels   api.Labels `json:"labels,omitempty"`
	// PreemptedBytes is the device memory a preempted session held: what
	// must be free before it is resumed.
	PreemptedBytes uint64 `json:"preempted_bytes,omitempty"`
	// PreemptedAt orders preempted sessions of one priority.
	PreemptedAt time.Time `json:"preempted_at,omitzero"`
	// PreemptedBy says who preempted it: "memory" (gpud, for a session of
	// higher priority; gpud resumes it) or "request" (gpuctl preempt; it
	// waits for gpuctl resume).
	PreemptedBy string `json:"preempted_by,omitempty"`
}

// Records is where session records persist: one opaque value per session
// id, which only this package reads. gpud keeps them in the sessions
// bucket of its host store (store.Store), in the same bbolt file as the
// images (STATE_DIR/gpud.db); each write is one bbolt transaction.
type Records interface {
	PutSession(ctx context.Context, id string, rec []byte) error
	// DeleteSession removes id's record; a missing one is not an error.
	DeleteSession(ctx context.Context, id string) error
	ListSessions(ctx context.Context) (map[string][]byte, error)
}

// records encodes and decodes Records' values; a nil Records keeps
// nothing.
type records struct{ r Records }

// put writes rec.
func (s records) put(rec Record) error {
	if s.r == nil {
		return nil
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return errs.Wrap(s.r.PutSession(context.Background(), rec.ID, b), errs.Internal, errs.Session(rec.ID), "save session record")
}

// delete removes the record of id.
func (s records) delete(id string) error {
	if s.r == nil {
		return nil
	}
	return errs.Wrap(s.r.DeleteSession(context.Background(), id), errs.Internal, errs.Session(id), "delete session record")
}

// list reads every record, in id order.
func (s records) list() ([]Record, error) {
	if s.r == nil {
		return nil, nil
	}
	raw, err := s.r.ListSessions(context.Background())
	if err != nil {
		return nil, err
	}
	out := make([]Record, 0, len(raw))
	for id, b := range raw {
		var r Record
		if err := decodeRecord(id, b, &r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
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
