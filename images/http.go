package images

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
)

// RouteOptions tune the routes.
type RouteOptions struct {
	Logger *slog.Logger // nil: slog.Default()
	// Known reports whether this host has a tenant of that name; an
	// import of an image of an unknown tenant is refused. Nil knows none.
	Known func(tenant string) bool
	// Stage, when set, gives PUT /v1/chunks?stage=SESSION the function
	// that keeps each received chunk's content for that session's
	// restore (package migrate/stage); nil keeps nothing.
	Stage func(session string) func(store.Digest, []byte)
	// StageMemory, when set, gives PUT /v1/chunks?stage=SESSION&memory=1
	// the function that stages each chunk for that session in memory
	// only, or an error when nothing is laid out to take them.
	StageMemory func(session string) (func(store.Digest, []byte), error)
	// Dial returns a client of another gpud's control API (the host's
	// token and peer TLS), for POST /v1/images/{id}/push; nil refuses
	// pushes.
	Dial func(addr string) *control.Client
	// InUse refuses the removal of an image a session here still needs
	// (one that waits in it, preempted); nil: none does.
	InUse func(ctx context.Context, image string) error
	// Imported and Removed are told of each image the store gained by an
	// import (a push, a replica, a migration's image) or lost by a
	// removal, after the fact; nil: nobody is.
	Imported func(ctx context.Context, info api.Image)
	Removed  func(ctx context.Context, image string)
}

// detail is the reply to GET /v1/images/{id}: the manifest without the
// chunk lists, which only the store needs.
func detail(info api.Image, m *Manifest) api.ImageDetail {
	d := api.ImageDetail{Image: info, Version: m.Version, Driver: m.Driver, CRIU: m.CRIU, Kernel: m.Kernel,
		AttachNonce: m.AttachNonce, Epoch: m.Epoch, Labels: m.Labels, Chunking: m.Chunking, FileList: make([]api.ImageFile, len(m.Files))}
	d.GPUs = m.GPUs
	for i, f := range m.Files {
		d.FileList[i] = api.ImageFile{Path: f.Path, Type: f.Type, Mode: fmt.Sprintf("%04o", uint32(f.Mode)), Size: f.Size, Link: f.Link, Chunks: len(f.Chunks)}
	}
	return d
}

func verifyStreaming(w http.ResponseWriter, r *http.Request, st *store.Store, id string, log *slog.Logger) error {
	if id != "" {
		// A missing image is an ordinary error response, before the 200.
		if _, err := Stat(r.Context(), st, id); err != nil {
			return err
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	flusher, _ := w.(http.Flusher)
	enc := json.NewEncoder(w)
	var mu sync.Mutex
	var last time.Time
	send := func(ev api.VerifyEvent) {
		_ = enc.Encode(ev)
		if flusher != nil {
			flusher.Flush()
		}
	}
	rep, err := Verify(r.Context(), st, id, func(done, total int64) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(last) >= 200*time.Millisecond {
			last = time.Now()
			send(api.VerifyEvent{Done: done, Total: total})
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		control.NoteError(r.Context(), err)
		send(api.VerifyEvent{Error: &api.ErrorBody{Kind: errs.KindOf(err), Error: err.Error()}})
		return nil
	}
	if !rep.OK() {
		control.NoteError(r.Context(), rep.Err())
		log.Error("verify found damage", "err", rep.Err())
	}
	send(api.VerifyEvent{Done: int64(rep.Chunks), Total: int64(rep.Chunks), Report: rep})
	return nil
}

// maxMissingBody bounds POST /v1/chunks/missing: 64 hex digits and a bit
// per chunk, for images of a few million chunks.
const maxMissingBody = 512 << 20

// Register adds the image and chunk routes of the control API to mux:
//
//	GET    /v1/images              list (array of api.Image)
//	GET    /v1/images/{id}         inspect (api.ImageDetail)
//	DELETE /v1/images/{id}         remove (api.RemoveImageReply)
//	GET    /v1/images/{id}/export  one-file export, streamed
//	POST   /v1/images/import       import a stream (api.ImportReply)
//	POST   /v1/images/verify       verify one image or all (api.VerifyReport)
//	POST   /v1/images/gc           collect garbage (api.GCReply)
//	POST   /v1/chunks/missing      which of these chunks are missing (api.MissingChunksReply)
//	PUT    /v1/chunks              receive a chunk stream ahead of its manifest (api.PutChunksReply)
//
// Authentication is the caller's: gpud wraps the mux in
// control.Authenticate, which puts the caller in each request's context.
// A tenant sees and acts on its own images only (see ops.go); gc and the
// chunk routes are the administrator's.
func Register(mux *http.ServeMux, st *store.Store, opts RouteOptions) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	h := func(pattern string, fn control.HandlerFunc) { mux.Handle(pattern, control.Handle(fn)) }

	h(api.RouteImages, func(w http.ResponseWriter, r *http.Request) error {
		list, err := List(r.Context(), st)
		if err != nil {
			return err
		}
		control.WriteJSON(w, list)
		return nil
	})
	h(api.RouteImage, func(w http.ResponseWriter, r *http.Request) error {
		id := control.PathID(r)
		m, err := Get(r.Context(), st, id)
		if err != nil {
			return err
		}
		info, err := Stat(r.Context(), st, id)
		if err != nil {
			return err
		}
		control.WriteJSON(w, detail(info, m))
		return nil
	})
	h(api.RouteRemoveImage, func(w http.ResponseWriter, r *http.Request) error {
		id := control.PathID(r)
		info, err := Stat(r.Context(), st, id)
		if err != nil {
			return err
		}
		if opts.InUse != nil {
			if err := opts.InUse(r.Context(), id); err != nil {
				return err
			}
		}
		if err := Delete(r.Context(), st, id); err != nil {
			return err
		}
		log.Info("image removed", "image", id)
		if opts.Removed != nil {
			opts.Removed(r.Context(), id)
		}
		control.WriteJSON(w, api.RemoveImageReply{ID: id, Session: info.Session, Bytes: info.Bytes, Deleted: true})
		return nil
	})
	h(api.RouteExport, func(w http.ResponseWriter, r *http.Request) error {
		id := control.PathID(r)
		// Fail before the 200 goes out if the image is not there.
		plan, err := planExport(r.Context(), st, id, nil)
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(plan.size, 10))
		n, err := writeExport(r.Context(), st, id, plan, w, nil)
		if err != nil {
			// Headers are gone; cutting the stream short is all that is
			// left, and the importer's trailer check will notice.
			log.Warn("export failed mid-stream", "image", id, "bytes", n, "err", err)
			panic(http.ErrAbortHandler)
		}
		return nil
	})
	h(api.RouteImport, func(w http.ResponseWriter, r *http.Request) error {
		start := time.Now()
		m, stats, err := Import(r.Context(), st, r.Body, ImportOptions{Known: opts.Known})
		if m != nil {
			control.NoteSubject(r.Context(), "image "+m.ID)
		}
		if err != nil {
			return err
		}
		info, err := Stat(r.Context(), st, m.ID)
		if err != nil {
			return err
		}
		log.Info("image imported", "image", m.ID, "bytes", stats.LogicalBytes, "stored", stats.StoredBytes, "took", time.Since(start), "index", stats.Index)
		if opts.Imported != nil {
			opts.Imported(r.Context(), info)
		}
		control.WriteJSON(w, api.ImportReply{Image: info, StoredBytes: stats.StoredBytes})
		return nil
	})
	h(api.RouteVerify, func(w http.ResponseWriter, r *http.Request) error {
		var req api.VerifyRequest
		if r.ContentLength != 0 {
			if err := control.DecodeJSON(r, &req); err != nil {
				return err
			}
		}
		if req.ID != "" {
			control.NoteSubject(r.Context(), "image "+req.ID)
		}
		if control.WantsProgress(r) {
			return verifyStreaming(w, r, st, req.ID, log)
		}
		rep, err := Verify(r.Context(), st, req.ID, nil)
		if err != nil {
			return err
		}
		if !rep.OK() {
			log.Error("verify found damage", "err", rep.Err())
		}
		control.WriteJSON(w, rep)
		return nil
	})
	h(api.RouteGC, func(w http.ResponseWriter, r *http.Request) error {
		stats, err := GC(r.Context(), st)
		if err != nil {
			return err
		}
		control.WriteJSON(w, stats)
		return nil
	})
	h(api.RouteMissingChunks, func(w http.ResponseWriter, r *http.Request) error {
		var req api.MissingChunksRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMissingBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return errs.Wrap(err, errs.InvalidArgument, "", "request body")
		}
		missing, err := Missing(r.Context(), st, digests(req.Digests))
		if err != nil {
			return err
		}
		control.WriteJSON(w, api.MissingChunksReply{Missing: apiDigests(missing)})
		return nil
	})
	h(api.RouteImageChunks, func(w http.ResponseWriter, r *http.Request) error {
		rep, err := Chunks(r.Context(), st, control.PathID(r), api.ImageChunksMax)
		if err != nil {
			return err
		}
		control.WriteJSON(w, rep)
		return nil
	})
	h(api.RoutePushImage, func(w http.ResponseWriter, r *http.Request) error {
		id := control.PathID(r)
		var req api.PushImageRequest
		if err := control.DecodeJSON(r, &req); err != nil {
			return err
		}
		rep, err := PushTo(r.Context(), st, id, req.To, opts.Dial)
		if err != nil {
			return err
		}
		log.Info("image pushed", "image", id, "to", req.To, "sent_bytes", rep.SentBytes, "bytes", rep.Bytes, "already_held", rep.AlreadyHeld)
		control.WriteJSON(w, rep)
		return nil
	})
	h(api.RoutePutChunks, func(w http.ResponseWriter, r *http.Request) error {
		if sess := r.URL.Query().Get(api.StageParam); sess != "" && r.URL.Query().Get(api.MemoryParam) == "1" {
			if opts.StageMemory == nil {
				return errs.New(errs.FailedPrecondition, errs.Session(sess), "this host does not stage device memory; migrate with its store")
			}
			keep, err := opts.StageMemory(sess)
			if err != nil {
				return err
			}
			n, err := StageChunks(r.Context(), st, r.Body, keep)
			if err != nil {
				return err
			}
			control.WriteJSON(w, api.PutChunksReply{Chunks: int64(n)})
			return nil
		}
		var keep func(store.Digest, []byte)
		if sess := r.URL.Query().Get(api.StageParam); sess != "" && opts.Stage != nil {
			keep = opts.Stage(sess)
		}
		n, stored, err := PutChunksKeep(r.Context(), st, r.Body, keep)
		if err != nil {
			return err
		}
		control.WriteJSON(w, api.PutChunksReply{Chunks: int64(n), StoredBytes: stored})
		return nil
	})
}
