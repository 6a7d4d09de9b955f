package session

import (
	"fmt"

	"github.com/gpuctl/gpuctl/errs"
)

// State is where a session is in its life; docs/architecture.md describes
// each one.
type State string

const (
	Running       State = "running"
	Quiescing     State = "quiescing"
	Checkpointing State = "checkpointing"
	Migrating     State = "migrating"
	Detached      State = "detached"
	Stopped       State = "stopped"
	// Preempted: the worker was released to give its device memory to a
	// session of higher priority (or on request); the session waits in
	// its image until gpud resumes it.
	Preempted State = "preempted"
)

// States lists every state, for tests and metrics.
var States = []State{Running, Quiescing, Checkpointing, Migrating, Detached, Stopped, Preempted}

// transitions is the session state machine: transitions[from][to] is
// true when a session may move from one state to the other. Anything not
// listed is refused with a FailedPrecondition error.
var transitions = map[State]map[State]bool{
	// A client disconnects (detached), a checkpoint begins (quiescing), or
	// the worker dies (stopped).
	Running: {Detached: true, Quiescing: true, Stopped: true},
	// The client comes back (running), the grace period ends or the worker
	// dies (stopped), or a checkpoint begins with no client attached.
	Detached: {Running: true, Stopped: true, Quiescing: true},
	// Quiesced: dump it, or give up and resume.
	Quiescing: {Checkpointing: true, Running: true, Detached: true, Stopped: true},
	// Dumped: resume in place (leave-running), hand it to another host, or
	// release the worker, or release it as preempted.
	Checkpointing: {Running: true, Detached: true, Migrating: true, Stopped: true, Preempted: true},
	// The target restored it (stopped here) or the migration failed and
	// the session resumes here.
	Migrating: {Stopped: true, Running: true, Detached: true},
	// A stopped session comes back only by a restore, which creates it
	// afresh in the running or detached state.
	Stopped: {},
	// A preempted session comes back by a restore here (which creates it
	// afresh), or is stopped here once it was resumed on another host.
	Preempted: {Stopped: true},
}

// CanTransition reports whether from -> to is allowed.
func CanTransition(from, to State) bool { return transitions[from][to] }

// checkTransition returns a FailedPrecondition error naming the session
// when from -> to is not allowed.
func checkTransition(id string, from, to State) error {
	if CanTransition(from, to) {
		return nil
	}
	return errs.New(errs.FailedPrecondition, errs.Session(id), "cannot go from %s to %s", from, to)
}

// Valid reports whether s is a known state.
func (s State) Valid() bool {
	_, ok := transitions[s]
	return ok
}

func (s State) String() string { return string(s) }

// parseState is the inverse of String, for records read back from disk.
func parseState(s string) (State, error) {
	st := State(s)
	if !st.Valid() {
		return "", fmt.Errorf("unknown session state %q", s)
	}
	return st, nil
}
