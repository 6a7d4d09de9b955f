package dispatch

import (
	"errors"
	"fmt"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/cu"
)

// State is a session's protocol state as data: what a checkpoint that
// reuses an earlier dump of the worker stores beside that dump, so that
// the worker restored from it goes on from this checkpoint's call, not
// from the dump's (docs/checkpoint.md, "Reusing the process image").
type State struct {
	Executed  uint64 `json:"executed"`
	Boundary  bool   `json:"boundary,omitempty"`
	ReadAhead []byte `json:"read_ahead,omitempty"`
	MaxFrame  uint32 `json:"max_frame,omitempty"`
	// Pending are the failures of asynchronous work not yet reported,
	// by context.
	Pending []PendingError `json:"pending,omitempty"`
	// Replies and Deferred are the cached replies, oldest first.
	Replies  []CachedReply `json:"replies,omitempty"`
	Deferred []CachedReply `json:"deferred,omitempty"`
}

// PendingError is one context's unreported asynchronous failure.
type PendingError struct {
	Ctx    uint64    `json:"ctx"`
	Code   cu.Result `json:"code"`
	Detail string    `json:"detail,omitempty"`
}

// CachedReply is one reply frame kept for a resend.
type CachedReply struct {
	Seq   uint64 `json:"seq"`
	Frame []byte `json:"frame"`
}

// Changes counts the requests executed so far that may have changed the
// worker's host state (ops not marked spec.Op.Keeps), and the kernel
// launches. Together with the backend's account of what kernels can write
// (backend.UntrackedState), they tell whether the worker is, but for its
// device memory and this protocol state, what it was when last dumped.
func (s *Session) Changes() (changes, launches uint64) {
	return s.changes.Load(), s.launches.Load()
}

// count records what an executed request may have changed.
func (s *Session) count(x *call) {
	switch {
	case x.h.Op.Launches():
		s.launches.Add(1)
	case !x.h.Op.Keeps():
		s.changes.Add(1)
	}
}

// ExportState returns the session's protocol state. Call it while no
// Serve runs (the worker quiesced).
func (s *Session) ExportState() State {
	st := State{Executed: s.executed.Load(), Boundary: s.boundary, MaxFrame: s.maxFrame,
		ReadAhead: append([]byte(nil), s.readAhead...)}
	for c, err := range s.pending {
		pe := PendingError{Ctx: uint64(c), Code: cu.Code(err)}
		var ce *cu.Error
		if errors.As(err, &ce) {
			pe.Detail = ce.Detail
		} else {
			pe.Detail = err.Error()
		}
		st.Pending = append(st.Pending, pe)
	}
	for i := range replyCacheSize {
		seq := s.cache.order[(s.cache.next+i)%replyCacheSize]
		if seq != 0 {
			st.Replies = append(st.Replies, CachedReply{Seq: seq, Frame: append([]byte(nil), s.cache.m[seq]...)})
		}
	}
	for _, e := range s.deferred.entries {
		if len(e.frame) == e.want {
			st.Deferred = append(st.Deferred, CachedReply{Seq: e.seq, Frame: append([]byte(nil), e.frame...)})
		}
	}
	return st
}

// ImportState replaces the session's protocol state with st, which
// ExportState returned for this session. Call it while no Serve runs.
// The counts of Changes are left as they are: the state is what the
// worker held, not a change of it.
func (s *Session) ImportState(st State) error {
	if len(st.Replies) > replyCacheSize {
		return fmt.Errorf("protocol state holds %d cached replies, more than %d", len(st.Replies), replyCacheSize)
	}
	var deferred deferredCache
	for _, r := range st.Deferred {
		if len(r.Frame) > deferredKeepMax+64 || deferred.bytes+len(r.Frame) > deferredBudget {
			return fmt.Errorf("protocol state's deferred replies exceed %d bytes", deferredBudget)
		}
		deferred.entries = append(deferred.entries, &deferredEntry{seq: r.Seq, frame: r.Frame, want: len(r.Frame)})
		deferred.bytes += len(r.Frame)
	}
	s.executed.Store(st.Executed)
	s.boundary = st.Boundary
	s.readAhead = st.ReadAhead
	if st.MaxFrame != 0 {
		s.maxFrame = st.MaxFrame
	}
	s.pending = make(map[backend.Ctx]error, len(st.Pending))
	for _, p := range st.Pending {
		s.pending[backend.Ctx(p.Ctx)] = &cu.Error{Code: p.Code, Detail: p.Detail}
	}
	s.cache = replyCache{}
	for _, r := range st.Replies {
		s.cache.put(r.Seq, r.Frame)
	}
	s.deferred = deferred
	return nil
}
