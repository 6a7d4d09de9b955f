package devstore

import (
	"context"
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
	defer k.mu.Unlock()
	delete(k.last, session)
}
