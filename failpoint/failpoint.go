// Package failpoint lets a test stop gpud's code at a named point: fail
// there with an error, or hold there until the test lets it go. A test can
// then force a failure or a race at an exact window (between a commit's
// writes and its index update, between two steps of a migration) instead
// of sleeping and hoping.
//
// Code marks a point with Inject(ctx, name). A test arms points in a Set
// and hands it down in the context with With. There is no global
// registry: a Set reaches only the calls made with its context, so tests
// running in parallel do not see each other's points, and without a Set
// Inject is one context lookup that returns nil.
//
// The points in the tree:
//
//	<pipeline>/<step>    as each step of checkpoint.Run starts:
//	                     checkpoint/quiesce, suspend, detach, dump, store;
//	                     restore/checkout, criu, resume, reattach;
//	                     migrate/precheck, precopy, freeze, migrating,
//	                     push, handover, restore
//	migrate/moved        after the source wrote the client's moved notice;
//	                     an error there stands for a notice that failed
//	precopy/round        as each pre-copy round of a migration starts
//	precopy/store        in a pre-copy round, when its blocks are written
//	                     and not yet indexed
//	images/commit/index  in images.Commit, when every chunk is written and
//	                     the image is not yet indexed
//	dispatch/serve       as a session's dispatch starts serving a
//	                     connection, registered so that a Stop reaches it
//	dispatch/sync        in a session's dispatch, when a synchronous request
//	                     is read and not yet executed (the connection is
//	                     silent while a test holds it there)
//	dispatch/exec        as a synchronous call starts running, with
//	                     keepalives on (a test holds a long call there)
package failpoint

import (
	"context"
	"sync"
)

// Hook runs when an armed point is reached; its error is what Inject
// returns there.
type Hook func(ctx context.Context) error

// Set is the points one test armed, and how often each point was
// reached. The zero value arms none. A Set is safe for concurrent use.
type Set struct {
	mu    sync.Mutex
	hooks map[string]Hook
	hits  map[string]int
	every func(ctx context.Context, name string) error
}

// On arms name with hook, replacing any earlier hook.
func (s *Set) On(name string, hook Hook) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hooks == nil {
		s.hooks = map[string]Hook{}
	}
	s.hooks[name] = hook
}

// OnEvery arms every point that has no hook of its own with hook, which
// is told the point's name: a process armed from outside (gpud's
// GPUD_FAILPOINTS file) decides at each point, by name, what to do.
func (s *Set) OnEvery(hook func(ctx context.Context, name string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.every = hook
}

// Off disarms name.
func (s *Set) Off(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.hooks, name)
}

// Hits is how many times code reached name with this Set in its context,
// armed or not: a test asserts it to know that its point is on the path it
// drives (a misspelt name is never reached).
func (s *Set) Hits(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[name]
}

func (s *Set) reach(name string) Hook {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hits == nil {
		s.hits = map[string]int{}
	}
	s.hits[name]++
	if h, ok := s.hooks[name]; ok || s.every == nil {
		return h
	}
	every := s.every
	return func(ctx context.Context) error { return every(ctx, name) }
}

type setKey struct{}

// With returns ctx carrying s: every Inject under it consults s.
func With(ctx context.Context, s *Set) context.Context {
	return context.WithValue(ctx, setKey{}, s)
}

// Inject marks the point name. It runs the hook a test armed there, if
// any, and returns its error; otherwise it returns nil.
func Inject(ctx context.Context, name string) error {
	s, _ := ctx.Value(setKey{}).(*Set)
	if s == nil {
		return nil
	}
	if h := s.reach(name); h != nil {
		return h(ctx)
	}
	return nil
}

// Fail is a hook that returns err.
func Fail(err error) Hook {
	return func(context.Context) error { return err }
}

// Gate is a hook that holds whoever reaches its point until the test
// releases it: the test waits on Reached, does what must happen in that
// window, then calls Release. A held caller whose context ends returns
// the context's error.
type Gate struct {
	reached  chan struct{}
	released chan struct{}
	once     sync.Once
	free     sync.Once
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{reached: make(chan struct{}), released: make(chan struct{})}
}

// Hook is the gate as a hook for Set.On.
func (g *Gate) Hook(ctx context.Context) error {
	g.once.Do(func() { close(g.reached) })
	select {
	case <-g.released:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// Reached is closed once a caller has reached the gate.
func (g *Gate) Reached() <-chan struct{} { return g.reached }

// Release lets every held caller, and every later one, through.
func (g *Gate) Release() { g.free.Do(func() { close(g.released) }) }
