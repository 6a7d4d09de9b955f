package images

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/store"
)

// List returns every image in the store, oldest first.
func List(ctx context.Context, st *store.Store) ([]Info, error) {
	ents, err := st.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Info, 0, len(ents))
	for _, e := range ents {
		var in Info
		if err := json.Unmarshal(e.Info, &in); err != nil {
			return nil, errs.Wrap(err, errs.DataLoss, errs.Image(e.ID), "summary unreadable")
		}
		out = append(out, in)
	}
	slices.SortStableFunc(out, func(a, b Info) int { return a.Created.Compare(b.Created) })
	return out, nil
}

// Get returns an image's manifest, validated.
func Get(ctx context.Context, st *store.Store, id string) (*Manifest, error) {
	if err := ids.CheckImage(id); err != nil {
		return nil, err
	}
	_, body, err := st.GetImage(ctx, id)
	if err != nil {
		return nil, err
	}
	m, err := decodeManifest(body)
	if err != nil {
		return nil, errs.Wrap(err, errs.DataLoss, errs.Image(id), "stored manifest unreadable")
	}
	return m, nil
}

// Stat returns an image's summary.
func Stat(ctx context.Context, st *store.Store, id string) (Info, error) {
	if err := ids.CheckImage(id); err != nil {
		return Info{}, err
	}
	raw, _, err := st.GetImage(ctx, id)
	if err != nil {
		return Info{}, err
	}
	var in Info
	if err := json.Unmarshal(raw, &in); err != nil {
		return Info{}, errs.Wrap(err, errs.DataLoss, errs.Image(id), "summary unreadable")
	}
	return in, nil
}

// Delete removes an image; GC reclaims the chunks no other image uses.
func Delete(ctx context.Context, st *store.Store, id string) error {
	if err := ids.CheckImage(id); err != nil {
		return err
	}
	return st.DeleteImage(ctx, id)
}

// GC reclaims unused chunks and leftovers of failed or crashed writes.
func GC(ctx context.Context, st *store.Store) (store.GCStats, error) { return st.GC(ctx) }

// Damage is a chunk that failed verification and the images that use it.
type Damage struct {
	Chunk  string   `json:"chunk"`
	Images []string `json:"images"`
	Error  string   `json:"error"`
}

// Report is what Verify found.
type Report struct {
	Images  int      `json:"images"`
	Chunks  int      `json:"chunks"`
	Damaged []Damage `json:"damaged,omitempty"`
	// Index is the store's consistency check result; empty when fine.
	Index string `json:"index,omitempty"`
}

// OK reports whether nothing was found wrong.
func (r *Report) OK() bool { return len(r.Damaged) == 0 && r.Index == "" }

// Err is nil for a clean report and otherwise an errs.DataLoss error
// naming the first damaged image and chunk.
func (r *Report) Err() error {
	switch {
	case r.Index != "":
		return errs.New(errs.DataLoss, "", "%s", r.Index)
	case len(r.Damaged) > 0:
		d := r.Damaged[0]
		subj := "no image"
		if len(d.Images) > 0 {
			subj = errs.Image(d.Images[0])
		}
		return errs.New(errs.DataLoss, subj, "chunk %s is damaged (%d damaged chunks in all); delete the affected images or re-import them", d.Chunk, len(r.Damaged))
	}
	return nil
}

// Verify checks image id (every image when id is empty): the index's
// consistency, then every chunk's content against its digest. progress
// gets chunks done out of the total and may be called from several
// goroutines at once.
func Verify(ctx context.Context, st *store.Store, id string, progress store.Progress) (*Report, error) {
	var names []string
	if id != "" {
		if err := ids.CheckImage(id); err != nil {
			return nil, err
		}
		names = []string{id}
	} else {
		ents, err := st.ListImages(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			names = append(names, e.ID)
		}
	}
	rep := &Report{Images: len(names)}
	if err := st.Check(ctx); err != nil {
		if !errs.Is(err, errs.DataLoss) {
			return nil, err
		}
		rep.Index = err.Error()
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
		rep.Damaged = append(rep.Damaged, Damage{Chunk: b.Digest.String(), Images: imgs, Error: b.Err.Error()})
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
