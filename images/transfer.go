package images

import (
	"context"
	"io"
	"net"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
	"github.com/gpuctl/gpuctl/tenant"
)

// Missing returns the digests in ds that st lacks. It is the
// administrator's alone (the host token, which peers migrate with): to a
// tenant it would tell which content other tenants' images hold.
func Missing(ctx context.Context, st *store.Store, ds []store.Digest) ([]store.Digest, error) {
	if err := tenant.RequireAdmin(ctx, "asking the store which chunks it holds"); err != nil {
		return nil, err
	}
	return st.Missing(ctx, ds)
}

// Digests cross the API as api.Digest, the same 32 bytes.
func digests(ds []api.Digest) []store.Digest {
	out := make([]store.Digest, len(ds))
	for i, d := range ds {
		out[i] = store.Digest(d)
	}
	return out
}

func apiDigests(ds []store.Digest) []api.Digest {
	out := make([]api.Digest, len(ds))
	for i, d := range ds {
		out[i] = api.Digest(d)
	}
	return out
}

// Push sends image id to the gpud behind peer: it asks which chunks the
// peer lacks, then streams the manifest with only those chunks; the peer
// verifies everything and commits the image, all or nothing. It returns
// the bytes sent. If the peer collected a chunk between the question and
// the stream, it asks once more.
func Push(ctx context.Context, st *store.Store, id string, peer *control.Client, progress store.Progress) (int64, error) {
	// Read once: a large image's manifest takes tens of milliseconds to
	// decode, and the push is in a migration's downtime.
	m, body, err := getEncoded(ctx, st, id)
	if err != nil {
		return 0, err
	}
	refs, _ := m.Refs()
	var sent int64
	for attempt := 0; ; attempt++ {
		missing, err := peer.MissingChunks(ctx, apiDigests(refs))
		if err != nil {
			return sent, errs.Wrap(err, errs.KindOf(err), errs.Image(id), "ask %s which chunks it lacks", peer.Addr())
		}
		only := make(map[store.Digest]bool, len(missing))
		for _, d := range missing {
			only[store.Digest(d)] = true
		}
		n, err := pushStream(ctx, st, m, body, peer, only, progress)
		sent += n
		if errs.IsFailedPrecondition(err) && attempt == 0 {
			continue
		}
		return sent, err
	}
}

func pushStream(ctx context.Context, st *store.Store, m *Manifest, body []byte, peer *control.Client, only map[store.Digest]bool, progress store.Progress) (int64, error) {
	id := m.ID
	pr, pw := io.Pipe()
	var n int64
	done := make(chan error, 1)
	go func() {
		var err error
		n, err = exportOf(ctx, st, m, body, pw, only, progress)
		pw.CloseWithError(err)
		done <- err
	}()
	reply, err := peer.Import(ctx, pr, -1, nil)
	_ = pr.CloseWithError(io.ErrClosedPipe)
	exportErr := <-done
	if err != nil {
		return n, errs.Wrap(err, errs.KindOf(err), errs.Image(id), "push to %s", peer.Addr())
	}
	if exportErr != nil {
		return n, exportErr
	}
	if reply.ID != id {
		return n, errs.New(errs.Internal, errs.Image(id), "push to %s: unexpected reply (image %q)", peer.Addr(), reply.ID)
	}
	return n, nil
}

// PushTo is POST /v1/images/{id}/push: it sends image id to the gpud at
// addr with Push, through dial (the host's token and peer TLS). It is the
// administrator's: it writes into another host's store. A receiver that
// holds the image already is sent nothing and says so.
func PushTo(ctx context.Context, st *store.Store, id, addr string, dial func(string) *control.Client) (*api.PushImageReply, error) {
	if err := tenant.RequireAdmin(ctx, "pushing an image to another host"); err != nil {
		return nil, err
	}
	if dial == nil {
		return nil, errs.New(errs.FailedPrecondition, errs.Image(id), "this host does not push images to others")
	}
	if _, _, err := net.SplitHostPort(addr); err != nil || addr == "" {
		return nil, errs.New(errs.InvalidArgument, errs.Image(id), "push to %q: want the receiving gpud's --api HOST:PORT", addr)
	}
	info, err := Stat(ctx, st, id)
	if err != nil {
		return nil, err
	}
	rep := &api.PushImageReply{ID: id, To: addr, Bytes: info.Bytes}
	peer := dial(addr)
	if _, err := peer.Image(ctx, id); err == nil {
		rep.AlreadyHeld = true
		return rep, nil
	}
	rep.SentBytes, err = Push(ctx, st, id, peer, nil)
	if errs.IsAlreadyExists(err) {
		rep.AlreadyHeld, err = true, nil // it arrived meanwhile
	}
	if err != nil {
		return nil, err
	}
	return rep, nil
}

// Chunks lists image id's distinct non-zero chunks with their sizes: all
// of them, or max of them evenly spread over the image. It is the
// administrator's, as Missing is: a placement asks it of the image's host
// and Missing of the others.
func Chunks(ctx context.Context, st *store.Store, id string, max int) (*api.ImageChunksReply, error) {
	if err := tenant.RequireAdmin(ctx, "listing an image's chunks"); err != nil {
		return nil, err
	}
	m, err := Get(ctx, st, id)
	if err != nil {
		return nil, err
	}
	refs, sizes := m.Refs()
	rep := &api.ImageChunksReply{Total: len(refs), Digests: []api.Digest{}, Bytes: []int64{}}
	step := 1.0
	if max > 0 && len(refs) > max {
		step = float64(len(refs)) / float64(max)
	}
	for f := 0.0; int(f) < len(refs); f += step {
		d := refs[int(f)]
		rep.Digests = append(rep.Digests, api.Digest(d))
		rep.Bytes = append(rep.Bytes, sizes[d])
	}
	return rep, nil
}
