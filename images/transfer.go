package images

import (
	"context"
	"encoding/json"
	"io"
	"net/http"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
)

// Missing returns the digests in ds that st lacks.
func Missing(ctx context.Context, st *store.Store, ds []store.Digest) ([]store.Digest, error) {
	return st.Missing(ctx, ds)
}

// MissingRequest and MissingReply are the bodies of POST /v1/chunks/missing.
type MissingRequest struct {
	Digests []store.Digest `json:"digests"`
}

// MissingReply lists what the peer lacks.
type MissingReply struct {
	Missing []store.Digest `json:"missing"`
}

// ImportReply is the body POST /v1/images/import answers with.
type ImportReply struct {
	Info
	StoredBytes int64 `json:"stored_bytes"`
}

// Push sends image id to the gpud behind peer: it asks which chunks the
// peer lacks, then streams the manifest with only those chunks; the peer
// verifies everything and commits the image, all or nothing. It returns
// the bytes sent. If the peer collected a chunk between the question and
// the stream, it asks once more.
func Push(ctx context.Context, st *store.Store, id string, peer *control.Client, progress store.Progress) (int64, error) {
	m, err := Get(ctx, st, id)
	if err != nil {
		return 0, err
	}
	refs, _ := m.Refs()
	var sent int64
	for attempt := 0; ; attempt++ {
		var reply MissingReply
		if err := peer.Do(ctx, http.MethodPost, "/v1/chunks/missing", MissingRequest{Digests: refs}, &reply); err != nil {
			return sent, errs.Wrap(err, errs.KindOf(err), errs.Image(id), "ask %s which chunks it lacks", peer.Addr())
		}
		only := make(map[store.Digest]bool, len(reply.Missing))
		for _, d := range reply.Missing {
			only[d] = true
		}
		n, err := pushStream(ctx, st, id, peer, only, progress)
		sent += n
		if errs.IsFailedPrecondition(err) && attempt == 0 {
			continue
		}
		return sent, err
	}
}

func pushStream(ctx context.Context, st *store.Store, id string, peer *control.Client, only map[store.Digest]bool, progress store.Progress) (int64, error) {
	pr, pw := io.Pipe()
	var n int64
	done := make(chan error, 1)
	go func() {
		var err error
		n, err = export(ctx, st, id, pw, only, progress)
		pw.CloseWithError(err)
		done <- err
	}()
	resp, err := peer.Stream(ctx, http.MethodPost, "/v1/images/import", pr, "application/octet-stream")
	_ = pr.CloseWithError(io.ErrClosedPipe)
	exportErr := <-done
	if err != nil {
		return n, errs.Wrap(err, errs.KindOf(err), errs.Image(id), "push to %s", peer.Addr())
	}
	defer resp.Body.Close()
	if exportErr != nil {
		return n, exportErr
	}
	var reply ImportReply
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil || reply.ID != id {
		return n, errs.New(errs.Internal, errs.Image(id), "push to %s: unexpected reply (%v)", peer.Addr(), err)
	}
	return n, nil
}
