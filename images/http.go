package images

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/store"
)

// RouteOptions tune the routes.
type RouteOptions struct {
	Logger *slog.Logger // nil: slog.Default()
}

// Detail is what GET /v1/images/{id} returns: the manifest without the
// chunk lists, which only the store needs.
type Detail struct {
	Info
	Version     int               `json:"version"`
	GPUs        []backend.GPU     `json:"gpus,omitempty"`
	Driver      string            `json:"driver,omitempty"`
	CRIU        string            `json:"criu,omitempty"`
	Kernel      string            `json:"kernel,omitempty"`
	AttachNonce string            `json:"attach_nonce,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Chunking    string            `json:"chunking"`
	FileList    []FileDetail      `json:"file_list"`
}

// FileDetail is a file of Detail.
type FileDetail struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   string `json:"mode"`
	Size   int64  `json:"size"`
	Link   string `json:"link,omitempty"`
	Chunks int    `json:"chunks"`
}

// VerifyRequest is the body of POST /v1/images/verify; an empty ID means
// every image.
type VerifyRequest struct {
	ID string `json:"id,omitempty"`
}

// DeleteReply is the body DELETE /v1/images/{id} answers with.
type DeleteReply struct {
	ID      string `json:"id"`
	Session string `json:"session"`
	Bytes   int64  `json:"bytes"`
	Deleted bool   `json:"deleted"`
}

// VerifyEvent is one line of POST /v1/images/verify?progress=1, which
// answers with newline-delimited JSON: progress lines, then one line with
// the report or the error.
type VerifyEvent struct {
	Done   int64              `json:"done,omitempty"`
	Total  int64              `json:"total,omitempty"`
	Report *Report            `json:"report,omitempty"`
	Error  *control.ErrorBody `json:"error,omitempty"`
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
	send := func(ev VerifyEvent) {
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
			send(VerifyEvent{Done: done, Total: total})
		}
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		send(VerifyEvent{Error: &control.ErrorBody{Kind: errs.KindOf(err), Error: err.Error()}})
		return nil
	}
	if !rep.OK() {
		log.Error("verify found damage", "err", rep.Err())
	}
	send(VerifyEvent{Done: int64(rep.Chunks), Total: int64(rep.Chunks), Report: rep})
	return nil
}

// maxMissingBody bounds POST /v1/chunks/missing: 64 hex digits and a bit
// per chunk, for images of a few million chunks.
const maxMissingBody = 512 << 20

// Register adds the image and chunk routes of the control API to mux:
//
//	GET    /v1/images              list (array of Info)
//	GET    /v1/images/{id}         inspect (Detail)
//	DELETE /v1/images/{id}         remove (DeleteReply)
//	GET    /v1/images/{id}/export  one-file export, streamed
//	POST   /v1/images/import       import a stream (ImportReply)
//	POST   /v1/images/verify       verify one image or all (Report)
//	POST   /v1/images/gc           collect garbage (store.GCStats)
//	POST   /v1/chunks/missing      which of these chunks are missing (MissingReply)
//	PUT    /v1/chunks              receive a chunk stream ahead of its manifest
//
// Authentication is the caller's: gpud wraps the mux in control.RequireToken.
func Register(mux *http.ServeMux, st *store.Store, opts RouteOptions) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	h := func(pattern string, fn control.HandlerFunc) { mux.Handle(pattern, control.Handle(fn)) }

	h("GET /v1/images", func(w http.ResponseWriter, r *http.Request) error {
		list, err := List(r.Context(), st)
		if err != nil {
			return err
		}
		if list == nil {
			list = []Info{}
		}
		control.WriteJSON(w, list)
		return nil
	})
	h("GET /v1/images/{id}", func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		m, err := Get(r.Context(), st, id)
		if err != nil {
			return err
		}
		info, err := Stat(r.Context(), st, id)
		if err != nil {
			return err
		}
		d := Detail{Info: info, Version: m.Version, GPUs: m.GPUs, Driver: m.Driver, CRIU: m.CRIU, Kernel: m.Kernel,
			AttachNonce: m.AttachNonce, Labels: m.Labels, Chunking: m.Chunking, FileList: make([]FileDetail, len(m.Files))}
		for i, f := range m.Files {
			d.FileList[i] = FileDetail{Path: f.Path, Type: f.Type, Mode: fmt.Sprintf("%04o", uint32(f.Mode)), Size: f.Size, Link: f.Link, Chunks: len(f.Chunks)}
		}
		control.WriteJSON(w, d)
		return nil
	})
	h("DELETE /v1/images/{id}", func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
		info, err := Stat(r.Context(), st, id)
		if err != nil {
			return err
		}
		if err := Delete(r.Context(), st, id); err != nil {
			return err
		}
		log.Info("image removed", "image", id)
		control.WriteJSON(w, DeleteReply{ID: id, Session: info.Session, Bytes: info.Bytes, Deleted: true})
		return nil
	})
	h("GET /v1/images/{id}/export", func(w http.ResponseWriter, r *http.Request) error {
		id := r.PathValue("id")
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
	h("POST /v1/images/import", func(w http.ResponseWriter, r *http.Request) error {
		start := time.Now()
		m, stats, err := Import(r.Context(), st, r.Body, nil)
		if err != nil {
			return err
		}
		info, err := Stat(r.Context(), st, m.ID)
		if err != nil {
			return err
		}
		log.Info("image imported", "image", m.ID, "bytes", stats.LogicalBytes, "stored", stats.StoredBytes, "took", time.Since(start))
		control.WriteJSON(w, ImportReply{Info: info, StoredBytes: stats.StoredBytes})
		return nil
	})
	h("POST /v1/images/verify", func(w http.ResponseWriter, r *http.Request) error {
		var req VerifyRequest
		if r.ContentLength != 0 {
			if err := control.DecodeJSON(r, &req); err != nil {
				return err
			}
		}
		if r.URL.Query().Get("progress") == "1" {
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
	h("POST /v1/images/gc", func(w http.ResponseWriter, r *http.Request) error {
		stats, err := GC(r.Context(), st)
		if err != nil {
			return err
		}
		control.WriteJSON(w, stats)
		return nil
	})
	h("POST /v1/chunks/missing", func(w http.ResponseWriter, r *http.Request) error {
		var req MissingRequest
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxMissingBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return errs.Wrap(err, errs.InvalidArgument, "", "request body")
		}
		missing, err := Missing(r.Context(), st, req.Digests)
		if err != nil {
			return err
		}
		if missing == nil {
			missing = []store.Digest{}
		}
		control.WriteJSON(w, MissingReply{Missing: missing})
		return nil
	})
	h("PUT /v1/chunks", func(w http.ResponseWriter, r *http.Request) error {
		n, stored, err := PutChunks(r.Context(), st, r.Body)
		if err != nil {
			return err
		}
		control.WriteJSON(w, map[string]int64{"chunks": int64(n), "stored_bytes": stored})
		return nil
	})
}
