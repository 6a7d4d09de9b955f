package images

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/store"
	"github.com/gpuctl/gpuctl/tenant"
)

// The functions here answer the principal in ctx (package tenant): a
// tenant sees and acts on its own images only, and one of another's is
// answered as one the store does not hold (store.ImageNotFound). gpud's
// own work, with no principal, acts as the administrator.

// visible checks that the caller in ctx may see an image of owner.
func visible(ctx context.Context, id, owner string) error {
	if !tenant.FromContext(ctx).Owns(owner) {
		return store.ImageNotFound(id)
	}
	return nil
}

// List returns the images in the store the caller may see, oldest first.
func List(ctx context.Context, st *store.Store) ([]api.Image, error) {
	ents, err := st.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(ents))
	for _, e := range ents {
		var in api.Image
		if err := json.Unmarshal(e.Info, &in); err != nil {
			return nil, errs.Wrap(err, errs.DataLoss, errs.Image(e.ID), "summary unreadable")
		}
		if visible(ctx, in.ID, in.Tenant) == nil {
			out = append(out, in)
		}
	}
	slices.SortStableFunc(out, func(a, b api.Image) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Get returns an image's manifest, validated.
func Get(ctx context.Context, st *store.Store, id string) (*Manifest, error) {
	m, _, err := getEncoded(ctx, st, id)
	return m, err
}

// getEncoded is Get that also returns the manifest as stored, encoded as
// encodeManifest encodes it (every stored manifest was written by record,
// in the current version): an export sends those bytes as they are.
func getEncoded(ctx context.Context, st *store.Store, id string) (*Manifest, []byte, error) {
	if err := ids.CheckImage(id); err != nil {
		return nil, nil, err
	}
	_, body, err := st.GetImage(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	m, err := decodeManifest(body)
	if err != nil {
		return nil, nil, errs.Wrap(err, errs.DataLoss, errs.Image(id), "stored manifest unreadable")
	}
	if err := visible(ctx, id, m.Tenant); err != nil {
		return nil, nil, err
	}
	return m, body, nil
}

// Stat returns an image's summary.
func Stat(ctx context.Context, st *store.Store, id string) (api.Image, error) {
	if err := ids.CheckImage(id); err != nil {
		return api.Image{}, err
	}
	raw, _, err := st.GetImage(ctx, id)
	if err != nil {
		return api.Image{}, err
	}
	var in api.Image
	if err := json.Unmarshal(raw, &in); err != nil {
		return api.Image{}, errs.Wrap(err, errs.DataLoss, errs.Image(id), "summary unreadable")
	}
	if err := visible(ctx, id, in.Tenant); err != nil {
		return api.Image{}, err
	}
	return in, nil
}

// Delete removes an image; GC reclaims the chunks no other image uses.
func Delete(ctx context.Context, st *store.Store, id string) error {
	// Stat checks the id (package ids) and that the caller may see the
	// image: a tenant cannot remove another's.
	if _, err := Stat(ctx, st, id); err != nil {
		return err
	}
	return st.DeleteImage(ctx, id)
}

// GC reclaims unused chunks and leftovers of failed or crashed writes.
// It is the administrator's alone: it works on the whole store, and what
// it reclaims would tell a tenant about others' images.
func GC(ctx context.Context, st *store.Store) (api.GCReply, error) {
	if err := tenant.RequireAdmin(ctx, "garbage collection"); err != nil {
		return api.GCReply{}, err
	}
	s, err := st.GC(ctx)
	return api.GCReply{ChunksRemoved: s.ChunksRemoved, PacksRemoved: s.PacksRemoved, PacksRewritten: s.PacksRewritten,
		OrphanFiles: s.OrphanFiles, BytesFreed: s.BytesFreed}, err
}

// Verify checks image id (every image the caller may see when id is
// empty): the index's consistency, then every chunk's content against its
// digest. The index covers every image, so a tenant's report leaves it
// out. progress gets chunks done out of the total and may be called from
// several goroutines at once.
func Verify(ctx context.Context, st *store.Store, id string, progress store.Progress) (*api.VerifyReport, error) {
	var names []string
	if id != "" {
		if _, err := Stat(ctx, st, id); err != nil { // the id's check and the caller's view
			return nil, err
		}
		names = []string{id}
	} else {
		list, err := List(ctx, st)
		if err != nil {
			return nil, err
		}
		for _, in := range list {
			names = append(names, in.ID)
		}
	}
	rep := &api.VerifyReport{Images: len(names)}
	if tenant.FromContext(ctx).IsAdmin() {
		if err := st.Check(ctx); err != nil {
			if !errs.Is(err, errs.DataLoss) {
				return nil, err
			}
			rep.Index = err.Error()
		}
	}
	users := map[store.Digest][]string{}
	var all []store.Digest
	for _, i := range names {
		refs, err := st.ImageRefs(ctx, i)
		if errs.IsNotFound(err) && id == "" {
			rep.Images-- // removed since the listing
			continue
		}
		if err != nil {
			return nil, err
		}
		for _, d := range refs {
			if _, ok := users[d]; !ok {
				all = append(all, d)
			}
			users[d] = append(users[d], i)
		}
	}
	rep.Chunks = len(all)
	if all == nil {
		all = []store.Digest{} // nil would mean every chunk
	}
	release := st.Hold(all)
	defer release()
	bad, err := st.Verify(ctx, all, progress)
	if err != nil {
		return nil, err
	}
	for _, b := range bad {
		imgs := users[b.Digest]
		if errs.IsNotFound(b.Err) {
			// Gone from the index: damage only if an image that uses it
			// still exists (it may have been removed and collected
			// between the listing and the hold).
			imgs = stillThere(ctx, st, imgs)
			if len(imgs) == 0 {
				continue
			}
		}
		rep.Damaged = append(rep.Damaged, api.DamagedChunk{Chunk: b.Digest.String(), Images: imgs, Error: b.Err.Error()})
	}
	return rep, nil
}

func stillThere(ctx context.Context, st *store.Store, list []string) []string {
	var out []string
	for _, id := range list {
		if _, _, err := st.GetImage(ctx, id); err == nil {
			out = append(out, id)
		}
	}
	return out
}
