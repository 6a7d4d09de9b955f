package control

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

// The typed calls: one method per route of package api. A reply is
// decoded into its api type; an error keeps the kind gpud gave it.

// Progress is told how much of a transfer is done: bytes (or chunks, for
// a verify) out of total, which is -1 when unknown. Calls come one at a
// time, but an upload's may come from the goroutine that sends the body
// rather than the caller's.
type Progress func(done, total int64)

// Host is GET /v1/host: the host's name, backend, GPUs and addresses.
func (c *Client) Host(ctx context.Context) (*api.Host, error) {
	var h api.Host
	if err := c.do(ctx, http.MethodGet, api.HostPath, nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// Sessions is GET /v1/sessions, oldest first; never nil.
func (c *Client) Sessions(ctx context.Context) ([]api.Session, error) {
	var list []api.Session
	if err := c.do(ctx, http.MethodGet, api.SessionsPath, nil, &list); err != nil {
		return nil, err
	}
	if list == nil {
		list = []api.Session{}
	}
	return list, nil
}

// Session is GET /v1/sessions/{id}.
func (c *Client) Session(ctx context.Context, id string) (*api.Session, error) {
	return call[api.Session](ctx, c, "session", id, http.MethodGet, api.SessionPath(id), nil)
}

// Checkpoint is POST /v1/sessions/{id}/checkpoint: the session goes into
// an image in the host's store.
func (c *Client) Checkpoint(ctx context.Context, id string, req api.CheckpointRequest) (*api.CheckpointReply, error) {
	return call[api.CheckpointReply](ctx, c, "session", id, http.MethodPost, api.SessionCheckpointPath(id), req)
}

// Restore is POST /v1/images/{id}/restore: the image becomes a live
// session on the host, waiting for its client.
func (c *Client) Restore(ctx context.Context, image string) (*api.RestoreReply, error) {
	return call[api.RestoreReply](ctx, c, "image", image, http.MethodPost, api.ImageRestorePath(image), nil)
}

// RestorePrepared is Restore of an image whose session's restore the
// caller prepared there (PrepareRestore): the target waits for that
// prepare first, and adopts what it prepared when it is the image's.
func (c *Client) RestorePrepared(ctx context.Context, image, session, nonce string) (*api.RestoreReply, error) {
	if err := need("session", session); err != nil {
		return nil, err
	}
	path := api.ImageRestorePath(image) + "?" + api.PreparedParam + "=" + url.QueryEscape(session) + "&" + api.NonceParam + "=" + url.QueryEscape(nonce)
	return call[api.RestoreReply](ctx, c, "image", image, http.MethodPost, path, nil)
}

// Migrate is POST /v1/sessions/{id}/migrate: the host moves the session to
// req.To.
func (c *Client) Migrate(ctx context.Context, id string, req api.MigrateRequest) (*api.MigrateReply, error) {
	return call[api.MigrateReply](ctx, c, "session", id, http.MethodPost, api.SessionMigratePath(id), req)
}

// Preempt is POST /v1/sessions/{id}/preempt: the session is checkpointed
// and its device memory given back; it waits in its image (preempted).
func (c *Client) Preempt(ctx context.Context, id string, req api.PreemptRequest) (*api.PreemptReply, error) {
	return call[api.PreemptReply](ctx, c, "session", id, http.MethodPost, api.SessionPreemptPath(id), req)
}

// Resume is POST /v1/sessions/{id}/resume: a preempted session runs again,
// on this host or on req.On.
func (c *Client) Resume(ctx context.Context, id string, req api.ResumeRequest) (*api.ResumeReply, error) {
	return call[api.ResumeReply](ctx, c, "session", id, http.MethodPost, api.SessionResumePath(id), req)
}

// Images is GET /v1/images, oldest first; never nil.
func (c *Client) Images(ctx context.Context) ([]api.Image, error) {
	var list []api.Image
	if err := c.do(ctx, http.MethodGet, api.ImagesPath, nil, &list); err != nil {
		return nil, err
	}
	if list == nil {
		list = []api.Image{}
	}
	return list, nil
}

// Image is GET /v1/images/{id}: the image's summary and manifest.
func (c *Client) Image(ctx context.Context, id string) (*api.ImageDetail, error) {
	return call[api.ImageDetail](ctx, c, "image", id, http.MethodGet, api.ImagePath(id), nil)
}

// RemoveImage is DELETE /v1/images/{id}; GC then reclaims its space.
func (c *Client) RemoveImage(ctx context.Context, id string) (*api.RemoveImageReply, error) {
	return call[api.RemoveImageReply](ctx, c, "image", id, http.MethodDelete, api.ImagePath(id), nil)
}

// Export is GET /v1/images/{id}/export: it streams the image's one-file
// export into w and returns the bytes written. progress (may be nil)
// follows the stream against its announced length. A stream that breaks
// off is an errs.Unavailable error; w then holds a partial export.
func (c *Client) Export(ctx context.Context, id string, w io.Writer, progress Progress) (int64, error) {
	if err := need("image", id); err != nil {
		return 0, err
	}
	resp, err := c.stream(ctx, http.MethodGet, api.ImageExportPath(id), nil, "")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	n, err := io.Copy(w, counting(resp.Body, resp.ContentLength, progress))
	if err != nil {
		return n, errs.Wrap(err, errs.Unavailable, errs.Image(id), "export stream broke off after %d bytes; try again", n)
	}
	return n, nil
}

// Import is POST /v1/images/import: it streams an export from r into the
// host's store, which verifies it and commits the image, all or nothing.
// size (-1 when unknown) and progress (may be nil) only report progress.
func (c *Client) Import(ctx context.Context, r io.Reader, size int64, progress Progress) (*api.ImportReply, error) {
	return streamDecode[api.ImportReply](ctx, c, http.MethodPost, api.ImportPath, counting(r, size, progress), "decode import reply")
}

// Verify is POST /v1/images/verify: every chunk of one image, or of all,
// checked against its digest. With progress set the host streams how many
// chunks it has checked (VerifyEvent lines) until the report. A report of
// damage is returned as it is; its Err says what is wrong.
func (c *Client) Verify(ctx context.Context, req api.VerifyRequest, progress Progress) (*api.VerifyReport, error) {
	if progress == nil {
		var rep api.VerifyReport
		if err := c.do(ctx, http.MethodPost, api.VerifyPath, req, &rep); err != nil {
			return nil, err
		}
		return &rep, nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	resp, err := c.stream(ctx, http.MethodPost, api.VerifyProgressPath, bytes.NewReader(body), "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.VerifyEvent
		if err := dec.Decode(&ev); err != nil {
			return nil, errs.Wrap(err, errs.Unavailable, errs.Host(c.addr), "verify stream broke off; run it again")
		}
		switch {
		case ev.Error != nil:
			return nil, ev.Error.Err()
		case ev.Report != nil:
			return ev.Report, nil
		case ev.Total > 0:
			progress(ev.Done, ev.Total)
		}
	}
}

// GC is POST /v1/images/gc: the host reclaims chunks no image uses and the
// leftovers of failed writes.
func (c *Client) GC(ctx context.Context) (*api.GCReply, error) {
	var res api.GCReply
	if err := c.do(ctx, http.MethodPost, api.GCPath, nil, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// MissingChunks is POST /v1/chunks/missing: which of ds the host lacks.
// A migration asks it before sending an image.
func (c *Client) MissingChunks(ctx context.Context, ds []api.Digest) ([]api.Digest, error) {
	if ds == nil {
		ds = []api.Digest{}
	}
	var res api.MissingChunksReply
	if err := c.do(ctx, http.MethodPost, api.MissingChunksPath, api.MissingChunksRequest{Digests: ds}, &res); err != nil {
		return nil, err
	}
	return res.Missing, nil
}

// ImageChunks is GET /v1/images/{id}/chunks: the image's chunks (a
// sample of a large one), for asking other hosts how much of it they hold.
func (c *Client) ImageChunks(ctx context.Context, id string) (*api.ImageChunksReply, error) {
	return call[api.ImageChunksReply](ctx, c, "image", id, http.MethodGet, api.ImageChunksPath(id), nil)
}

// PushImage is POST /v1/images/{id}/push: the host sends image id to the
// gpud at to (HOST:PORT), only the chunks that one lacks.
func (c *Client) PushImage(ctx context.Context, id, to string) (*api.PushImageReply, error) {
	return call[api.PushImageReply](ctx, c, "image", id, http.MethodPost, api.ImagePushPath(id), api.PushImageRequest{To: to})
}

// PutChunks is PUT /v1/chunks: a chunk stream from r, stored ahead of the
// manifest that will use it.
func (c *Client) PutChunks(ctx context.Context, r io.Reader) (*api.PutChunksReply, error) {
	return streamDecode[api.PutChunksReply](ctx, c, http.MethodPut, api.ChunksPath, r, "decode chunk upload reply")
}

// need refuses an empty id before it becomes an empty path segment; the
// host validates the rest of its form.
func need(what, id string) error {
	if id == "" {
		return errs.New(errs.InvalidArgument, "", "no %s id given", what)
	}
	return nil
}

// counting reports the bytes read through r to progress.
func counting(r io.Reader, total int64, progress Progress) io.Reader {
	if progress == nil || r == nil {
		return r
	}
	if total < 0 {
		total = -1
	}
	return &progressReader{r: r, total: total, progress: progress}
}

type progressReader struct {
	r        io.Reader
	done     int64
	total    int64
	progress Progress
}

func (p *progressReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if n > 0 {
		p.done += int64(n)
		p.progress(p.done, p.total)
	}
	return n, err
}

// PutChunksStaged is PutChunks whose chunks the target also keeps in
// memory for session's restore (PUT /v1/chunks?stage=SESSION); with
// memory, only there, not in its store (api.MemoryParam).
func (c *Client) PutChunksStaged(ctx context.Context, session string, r io.Reader, memory bool) (*api.PutChunksReply, error) {
	if err := need("session", session); err != nil {
		return nil, err
	}
	path := api.ChunksPath + "?" + api.StageParam + "=" + url.QueryEscape(session) + memoryQuery(memory, "&")
	return streamDecode[api.PutChunksReply](ctx, c, http.MethodPut, path, r, "decode chunk upload reply")
}

// DropStaged is DELETE /v1/chunks/staged/{id}: the target lets go of what
// it staged for session's restore.
func (c *Client) DropStaged(ctx context.Context, session string) error {
	if err := need("session", session); err != nil {
		return err
	}
	return c.do(ctx, http.MethodDelete, api.StagedChunksSessionPath(session), nil, nil)
}

// PrepareRestore is PUT /v1/chunks/staged/{id}/restore: the target
// restores session from r (the dump's files as a tar stream, the
// restore's header first) and the device memory staged for it, ahead of
// its image, and answers the steps it ran.
func (c *Client) PrepareRestore(ctx context.Context, session string, r io.Reader) (*api.RestoreReply, error) {
	if err := need("session", session); err != nil {
		return nil, err
	}
	return streamDecode[api.RestoreReply](ctx, c, http.MethodPut, api.StagedChunksSessionPath(session)+"/restore", r, "decode prepared restore reply")
}

// StageTable is PUT /v1/chunks/staged/{id}: a pre-copy round's table
// (the layout of session's device memory and each block's chunk), which
// the target lays its staging out by before the round's chunks arrive;
// memory asks it to stage the whole table in memory (api.MemoryParam).
func (c *Client) StageTable(ctx context.Context, session string, table any, memory bool) error {
	if err := need("session", session); err != nil {
		return err
	}
	return c.do(ctx, http.MethodPut, api.StagedChunksSessionPath(session)+memoryQuery(memory, "?"), table, nil)
}

// AdoptPrepared is POST /v1/chunks/staged/{id}/adopt: the target takes
// over the session it prepared from its staged memory, with no image.
func (c *Client) AdoptPrepared(ctx context.Context, session string, req api.AdoptRequest) (*api.RestoreReply, error) {
	return call[api.RestoreReply](ctx, c, "session", session, http.MethodPost, api.StagedChunksSessionPath(session)+"/adopt", req)
}

func memoryQuery(memory bool, sep string) string {
	if !memory {
		return ""
	}
	return sep + api.MemoryParam + "=1"
}

// call checks the id of the request's subject (kind names it in the
// error), makes the request and decodes its reply: the shape of most
// routes that act on one session or image.
func call[T any](ctx context.Context, c *Client, kind, id, method, path string, body any) (*T, error) {
	if err := need(kind, id); err != nil {
		return nil, err
	}
	var res T
	if err := c.do(ctx, method, path, body, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// streamDecode sends body (a stream, not JSON) and decodes the host's JSON
// reply; what names the decoding in its error.
func streamDecode[T any](ctx context.Context, c *Client, method, path string, body io.Reader, what string) (*T, error) {
	resp, err := c.stream(ctx, method, path, body, "application/octet-stream")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res T
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return nil, errs.Wrap(err, errs.Internal, errs.Host(c.addr), "%s", what)
	}
	return &res, nil
}
