package devstore

import (
	"context"
	"os"
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
	if s.Layout.SentCount() != s.Layout.Blocks || s.Layout.Size > memAvailable()/2 {
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

// memAvailable is the host's MemAvailable, or 0 when unknown.
func memAvailable() int64 {
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
