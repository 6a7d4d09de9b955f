package devstore

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/store"
)

// Keeper is a host's memory of each session's last complete save: the
// base against which the next save copies only changed blocks. It falls
// back to the session's parent image (a session restored here from an
// image knows its hashes, which the worker carried in the image).
type Keeper struct {
	Store *store.Store

	mu   sync.Mutex
	last map[string]*Table
	// mirrors are sessions' last saved device memory, kept in host
	// memory after a checkpoint that resumed the session (see Mirror).
	mirrors map[string]*Snapshot
	// stashes are the last saves of sessions a checkpoint ended here,
	// oldest first, kept for a restore of their image on this host
	// (Stash).
	stashes []*Snapshot
	stashOf []string
}

// Base is the save a new save of session can be relative to, or nil.
func (k *Keeper) Base(ctx context.Context, session, parent string) *Table {
	k.mu.Lock()
	t := k.last[session]
	k.mu.Unlock()
	if t != nil {
		return t
	}
	if parent == "" {
		return nil
	}
	m, err := images.Get(ctx, k.Store, parent)
	if err != nil {
		return nil
	}
	t, err = FromManifest(ctx, k.Store, m)
	if err != nil {
		return nil
	}
	return t
}

// Remember records session's last complete save.
func (k *Keeper) Remember(session string, t *Table) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.last == nil {
		k.last = map[string]*Table{}
	}
	k.last[session] = t
}

// Forget drops what is known of session (it left this host).
func (k *Keeper) Forget(session string) {
	k.mu.Lock()
	m := k.mirrors[session]
	delete(k.mirrors, session)
	delete(k.last, session)
	k.mu.Unlock()
	m.Close()
}

// KeepMirror keeps s, a complete save of session's device memory (every
// block present) that is also the session's last committed one, so that
// the next save copies only the blocks that changed into it: the
// unchanged ones are already there, and the session resumes from a
// complete copy without reading the store. It costs host memory of the
// session's device memory size for as long as the session lives here, so
// a mirror larger than half the host's available memory is dropped.
func (k *Keeper) KeepMirror(session string, s *Snapshot) {
	if s == nil {
		return
	}
	if s.Layout.SentCount() != s.Layout.Blocks || s.Layout.Size > MemAvailable()/2 {
		s.Close()
		return
	}
	k.mu.Lock()
	if k.mirrors == nil {
		k.mirrors = map[string]*Snapshot{}
	}
	old := k.mirrors[session]
	k.mirrors[session] = s
	k.mu.Unlock()
	if old != s {
		old.Close()
	}
}

// TakeMirror hands over session's mirror, if any; the caller closes it.
func (k *Keeper) TakeMirror(session string) *Snapshot {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := k.mirrors[session]
	delete(k.mirrors, session)
	return m
}

// Stash keeps s, the complete save a checkpoint that ended session here
// stored, in host memory: restoring that image on this host (a preempted
// session resumed, a job requeued here) then reloads the worker from it
// without reading the store (TakeStash). Stashes share half of the host's
// available memory, as mirrors may; the oldest go first. Stash takes s.
func (k *Keeper) Stash(session string, s *Snapshot) {
	if s == nil {
		return
	}
	if s.Layout.SentCount() != s.Layout.Blocks {
		s.Close()
		return
	}
	k.mu.Lock()
	var held int64
	for i, o := range k.stashes {
		if k.stashOf[i] == session {
			o.Close()
			k.stashes = slices.Delete(k.stashes, i, i+1)
			k.stashOf = slices.Delete(k.stashOf, i, i+1)
			break
		}
	}
	for _, o := range k.stashes {
		held += o.Layout.Size
	}
	budget := (MemAvailable() + held) / 2
	var drop []*Snapshot
	for len(k.stashes) > 0 && held+s.Layout.Size > budget {
		held -= k.stashes[0].Layout.Size
		drop = append(drop, k.stashes[0])
		k.stashes, k.stashOf = k.stashes[1:], k.stashOf[1:]
	}
	if s.Layout.Size <= budget {
		k.stashes = append(k.stashes, s)
		k.stashOf = append(k.stashOf, session)
	} else {
		drop = append(drop, s)
	}
	k.mu.Unlock()
	for _, o := range drop {
		o.Close()
	}
}

// TakeStash hands over session's stash when it is the save t describes
// (an image's device memory), and drops it otherwise; nil when there is
// none. The caller closes what it gets.
func (k *Keeper) TakeStash(session string, t *Table) *Snapshot {
	k.mu.Lock()
	var s *Snapshot
	for i := range k.stashes {
		if k.stashOf[i] == session {
			s = k.stashes[i]
			k.stashes = slices.Delete(k.stashes, i, i+1)
			k.stashOf = slices.Delete(k.stashOf, i, i+1)
			break
		}
	}
	k.mu.Unlock()
	if s != nil && (t == nil || s.Layout.Gen != t.Gen() || !SameBlocks(s.Layout, t.Layout)) {
		s.Close()
		s = nil
	}
	return s
}

// MemAvailable is the host's MemAvailable, or 0 when unknown.
func MemAvailable() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
					return kb << 10
				}
			}
		}
	}
	return 0
}
