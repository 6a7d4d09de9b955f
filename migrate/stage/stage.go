// Package stage is a migration target's staging of device memory: the
// blocks a source pre-copies arrive as chunks (PUT /v1/chunks with
// ?stage=SESSION), which the target checks and decodes anyway; the
// stager keeps their decoded bytes in memory, by digest, per session, so
// that the restore after the freeze fills the worker's memory file from
// memory instead of reading and decoding the whole image out of the store
// while the client waits. Only the blocks that changed since the last
// round (and the chunks the target already held) are read from the store
// then.
//
// Staging is a cache, never the only copy: every staged chunk is also in
// the store (as a pending chunk), so a restore that finds nothing staged,
// or only part of it, reads the rest from the store and is just slower.
// The bytes staged on a host are bounded (Stager.Max); a chunk over the
// bound is not staged. A session's staging goes away when its restore
// takes it, when the source drops it (DELETE /v1/chunks/staged/{id}, sent
// by a migration that failed), or when nothing fed it for Stager.Idle;
// it lives in this process's memory only, so it never leaves anything
// for gc.
package stage

import (
	"log/slog"
	"net/http"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/store"
	"github.com/gpuctl/gpuctl/tenant"
)

// Stager holds the staged device memory of the sessions migrating to
// this host. The zero value is not usable; set Max.
type Stager struct {
	// Max bounds the bytes staged for all sessions together; a chunk
	// that would go over it is left in the store only.
	Max int64
	// Idle drops a session's staging that nothing fed or took for this
	// long (its source died or gave up); zero means 5 minutes.
	Idle time.Duration
	Log  *slog.Logger

	mu     sync.Mutex
	used   int64
	groups map[string]*Group
}

// Group is one session's staged chunks. Once taken from the Stager it
// belongs to its taker, who must Release it.
type Group struct {
	s       *Stager
	session string

	mu      sync.Mutex
	chunks  map[store.Digest][]byte // anonymous mappings, outside Go's heap
	bytes   int64
	skipped int // chunks left out: over the bound
	timer   *time.Timer
	taken   bool
}

func (s *Stager) idle() time.Duration {
	if s.Idle > 0 {
		return s.Idle
	}
	return 5 * time.Minute
}

func (s *Stager) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

// Keep returns what stores a checked chunk's decoded bytes in session's
// staging; the bytes are copied, so the caller may reuse them. Keep on a
// nil Stager returns nil.
func (s *Stager) Keep(session string) func(d store.Digest, raw []byte) {
	if s == nil || ids.CheckSession(session) != nil {
		return nil
	}
	s.mu.Lock()
	if s.groups == nil {
		s.groups = map[string]*Group{}
	}
	g := s.groups[session]
	if g == nil {
		g = &Group{s: s, session: session, chunks: map[store.Digest][]byte{}}
		g.timer = time.AfterFunc(s.idle(), func() { s.expire(g) })
		s.groups[session] = g
	}
	s.mu.Unlock()
	g.timer.Reset(s.idle())
	return g.add
}

func (g *Group) add(d store.Digest, raw []byte) {
	if len(raw) == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.taken || g.chunks[d] != nil {
		return
	}
	n := int64(len(raw))
	s := g.s
	s.mu.Lock()
	ok := s.used+n <= s.Max
	if ok {
		s.used += n
	}
	s.mu.Unlock()
	if !ok {
		g.skipped++
		return
	}
	b, err := unix.Mmap(-1, 0, len(raw), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		s.mu.Lock()
		s.used -= n
		s.mu.Unlock()
		g.skipped++
		return
	}
	copy(b, raw)
	g.chunks[d] = b
	g.bytes += n
}

// Take removes session's staging from the stager and hands it to the
// caller (a restore), or returns nil when nothing is staged for it.
func (s *Stager) Take(session string) *Group {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	g := s.groups[session]
	delete(s.groups, session)
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	g.timer.Stop()
	g.mu.Lock()
	g.taken = true
	g.mu.Unlock()
	return g
}

// Drop releases session's staging, if any; it reports whether there was
// some.
func (s *Stager) Drop(session string) bool {
	g := s.Take(session)
	g.Release()
	return g != nil
}

func (s *Stager) expire(g *Group) {
	s.mu.Lock()
	if s.groups[g.session] != g {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	if s.Drop(g.session) {
		s.log().Info("staged device memory dropped: nothing fed or took it", "session", g.session, "after", s.idle())
	}
}

// Used is the bytes staged on this host now.
func (s *Stager) Used() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}

// Get returns chunk d's bytes, or nil when it is not staged. They stay
// valid until Release.
func (g *Group) Get(d store.Digest) []byte {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.chunks[d]
}

// Stats says what the group holds: chunks, their bytes, and chunks left
// out for the bound.
func (g *Group) Stats() (chunks int, bytes int64, skipped int) {
	if g == nil {
		return 0, 0, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.chunks), g.bytes, g.skipped
}

// Release gives the group's memory back. A nil group is a no-op.
func (g *Group) Release() {
	if g == nil {
		return
	}
	g.mu.Lock()
	g.taken = true
	chunks := g.chunks
	g.chunks = map[store.Digest][]byte{}
	freed := g.bytes
	g.bytes = 0
	g.mu.Unlock()
	for _, b := range chunks {
		_ = unix.Munmap(b)
	}
	g.s.mu.Lock()
	g.s.used -= freed
	g.s.mu.Unlock()
}

// Register adds DELETE /v1/chunks/staged/{id} (one of the chunk routes,
// the administrator's): the source of a migration that failed drops what
// it staged here.
func (s *Stager) Register(mux *http.ServeMux) {
	mux.Handle(api.RouteDropStaged, control.Handle(func(w http.ResponseWriter, r *http.Request) error {
		if err := tenant.RequireAdmin(r.Context(), "dropping a migration's staged memory"); err != nil {
			return err
		}
		id := control.PathID(r)
		if err := ids.CheckSession(id); err != nil {
			return err
		}
		dropped := s.Drop(id)
		control.WriteJSON(w, map[string]bool{"dropped": dropped})
		return nil
	}))
}

// DefaultMax is the default bound: a quarter of the host's memory, or
// 1 GiB when that is unknown.
func DefaultMax() int64 {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return 1 << 30
	}
	return int64(si.Totalram) * int64(si.Unit) / 4
}
