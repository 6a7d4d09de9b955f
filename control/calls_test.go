package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

// hit is what the fake host saw of one request.
type hit struct {
	route, id, body string
}

// fakeHost answers every route of package api with a canned reply that
// echoes the id, and records each request.
func fakeHost(t *testing.T) (*Client, func() []hit) {
	t.Helper()
	var mu sync.Mutex
	var hits []hit
	export := bytes.Repeat([]byte("export bytes "), 1000)
	reply := map[string]func(id string, body []byte) any{
		api.RouteHost: func(string, []byte) any {
			free := uint64(5)
			return api.Host{Name: "a", HostInfo: api.HostInfo{Backend: "emulated", GPUs: []api.GPU{{UUID: "GPU-1"}}}, MemFreeBytes: &free}
		},
		api.RouteSessions:   func(string, []byte) any { return nil }, // an empty table may answer null
		api.RouteSession:    func(id string, _ []byte) any { return api.Session{ID: id} },
		api.RouteCheckpoint: func(id string, _ []byte) any { return api.CheckpointReply{Session: id, Image: "img-1"} },
		api.RouteMigrate: func(id string, b []byte) any {
			var req api.MigrateRequest
			_ = json.Unmarshal(b, &req)
			return api.MigrateReply{Session: id, To: req.To}
		},
		api.RouteRestore:     func(id string, _ []byte) any { return api.RestoreReply{Image: id, Session: "s-1"} },
		api.RouteImages:      func(string, []byte) any { return []api.Image{{ID: "img-1"}} },
		api.RouteImage:       func(id string, _ []byte) any { return api.ImageDetail{Image: api.Image{ID: id}} },
		api.RouteRemoveImage: func(id string, _ []byte) any { return api.RemoveImageReply{ID: id, Deleted: true} },
		api.RouteImport: func(_ string, b []byte) any {
			return api.ImportReply{Image: api.Image{ID: "img-in", Bytes: int64(len(b))}}
		},
		api.RouteVerify: func(_ string, b []byte) any {
			var req api.VerifyRequest
			_ = json.Unmarshal(b, &req)
			return api.VerifyReport{Images: len(req.ID), Chunks: 3}
		},
		api.RouteGC: func(string, []byte) any { return api.GCReply{ChunksRemoved: 2} },
		api.RouteMissingChunks: func(_ string, b []byte) any {
			var req api.MissingChunksRequest
			_ = json.Unmarshal(b, &req)
			return api.MissingChunksReply{Missing: req.Digests[1:]}
		},
		api.RoutePutChunks: func(_ string, b []byte) any { return api.PutChunksReply{Chunks: 1, StoredBytes: int64(len(b))} },
		api.RoutePreempt:   func(id string, _ []byte) any { return api.PreemptReply{Session: id, Image: "img-p"} },
		api.RouteResume: func(id string, b []byte) any {
			var req api.ResumeRequest
			_ = json.Unmarshal(b, &req)
			return api.ResumeReply{Session: id, Host: req.On}
		},
		api.RoutePushImage: func(id string, b []byte) any {
			var req api.PushImageRequest
			_ = json.Unmarshal(b, &req)
			return api.PushImageReply{ID: id, To: req.To, SentBytes: 7}
		},
	}
	mux := http.NewServeMux()
	for route, fn := range reply {
		mux.Handle(route, Handle(func(w http.ResponseWriter, r *http.Request) error {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			hits = append(hits, hit{route, PathID(r), string(b)})
			mu.Unlock()
			if route == api.RouteVerify && WantsProgress(r) {
				enc := json.NewEncoder(w)
				_ = enc.Encode(api.VerifyEvent{Done: 1, Total: 3})
				_ = enc.Encode(api.VerifyEvent{Done: 3, Total: 3})
				if strings.Contains(string(b), "img-gone") {
					_ = enc.Encode(api.VerifyEvent{Error: &api.ErrorBody{Kind: errs.NotFound, Error: `image "img-gone": not in this host's store`}})
					return nil
				}
				_ = enc.Encode(api.VerifyEvent{Report: &api.VerifyReport{Images: 1, Chunks: 3}})
				return nil
			}
			WriteJSON(w, fn(PathID(r), b))
			return nil
		}))
	}
	mux.Handle(api.RouteExport, Handle(func(w http.ResponseWriter, r *http.Request) error {
		mu.Lock()
		hits = append(hits, hit{api.RouteExport, PathID(r), ""})
		mu.Unlock()
		w.Header().Set("Content-Length", "100000")
		_, _ = w.Write(export[:len(export)/2]) // and then the stream breaks off
		return nil
	}))
	srv := httptest.NewServer(RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return NewClient(strings.TrimPrefix(srv.URL, "http://"), "tok"), func() []hit {
		mu.Lock()
		defer mu.Unlock()
		out := hits
		hits = nil
		return out
	}
}

// Every typed call reaches its route, with its id intact and its body as
// the API defines it, and decodes the reply.
func TestCallsReachTheirRoutes(t *testing.T) {
	cl, hits := fakeHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	odd := "img/../x y" // escaped as one path segment
	var d1, d2 api.Digest
	d2[0] = 1
	cases := []struct {
		name     string
		call     func() (string, error) // a fact of the reply, to compare
		want     string
		route    string
		id, body string
	}{
		{"host", func() (string, error) {
			h, err := cl.Host(ctx)
			if err != nil {
				return "", err
			}
			return fmt.Sprint(h.Name, " ", h.Backend, " ", h.GPUs[0].UUID, " ", *h.MemFreeBytes), nil
		}, "a emulated GPU-1 5", api.RouteHost, "", ""},
		{"sessions", func() (string, error) {
			l, err := cl.Sessions(ctx)
			return fmt.Sprint(len(l), l == nil), err
		}, "0 false", api.RouteSessions, "", ""},
		{"session", func() (string, error) {
			s, err := cl.Session(ctx, "s-1")
			return ptr(s, func(s *api.Session) string { return s.ID }), err
		},
			"s-1", api.RouteSession, "s-1", ""},
		{"checkpoint", func() (string, error) {
			r, err := cl.Checkpoint(ctx, "s-1", api.CheckpointRequest{LeaveRunning: true})
			return ptr(r, func(r *api.CheckpointReply) string { return r.Session + " " + r.Image }), err
		}, "s-1 img-1", api.RouteCheckpoint, "s-1", `{"leave_running":true}`},
		{"migrate", func() (string, error) {
			r, err := cl.Migrate(ctx, "s-1", api.MigrateRequest{To: "b:7071"})
			return ptr(r, func(r *api.MigrateReply) string { return r.Session + " " + r.To }), err
		}, "s-1 b:7071", api.RouteMigrate, "s-1", `{"to":"b:7071"}`},
		{"preempt", func() (string, error) {
			r, err := cl.Preempt(ctx, "s-1", api.PreemptRequest{DeadlineMS: 1500})
			return ptr(r, func(r *api.PreemptReply) string { return r.Session + " " + r.Image }), err
		}, "s-1 img-p", api.RoutePreempt, "s-1", `{"deadline_ms":1500}`},
		{"resume", func() (string, error) {
			r, err := cl.Resume(ctx, "s-1", api.ResumeRequest{On: "b:7071"})
			return ptr(r, func(r *api.ResumeReply) string { return r.Session + " " + r.Host }), err
		}, "s-1 b:7071", api.RouteResume, "s-1", `{"on":"b:7071"}`},
		{"restore", func() (string, error) {
			r, err := cl.Restore(ctx, odd)
			return ptr(r, func(r *api.RestoreReply) string { return r.Image }), err
		}, odd, api.RouteRestore, odd, ""},
		{"images", func() (string, error) { l, err := cl.Images(ctx); return fmt.Sprint(len(l)), err }, "1", api.RouteImages, "", ""},
		{"image", func() (string, error) {
			d, err := cl.Image(ctx, odd)
			return ptr(d, func(d *api.ImageDetail) string { return d.ID }), err
		}, odd, api.RouteImage, odd, ""},
		{"remove image", func() (string, error) {
			r, err := cl.RemoveImage(ctx, "img-1")
			return ptr(r, func(r *api.RemoveImageReply) string { return r.ID }), err
		}, "img-1", api.RouteRemoveImage, "img-1", ""},
		{"import", func() (string, error) {
			var seen int64
			r, err := cl.Import(ctx, strings.NewReader("an export"), 9, func(done, total int64) {
				if total != 9 {
					t.Errorf("import progress total %d, want 9", total)
				}
				seen = done
			})
			return ptr(r, func(r *api.ImportReply) string { return fmt.Sprint(r.ID, " ", r.Bytes, " ", seen) }), err
		}, "img-in 9 9", api.RouteImport, "", "an export"},
		{"verify", func() (string, error) {
			r, err := cl.Verify(ctx, api.VerifyRequest{ID: "img-1"}, nil)
			return ptr(r, func(r *api.VerifyReport) string { return fmt.Sprint(r.Images) }), err
		}, "5", api.RouteVerify, "", `{"id":"img-1"}`},
		{"gc", func() (string, error) {
			r, err := cl.GC(ctx)
			return ptr(r, func(r *api.GCReply) string { return fmt.Sprint(r.ChunksRemoved) }), err
		}, "2", api.RouteGC, "", ""},
		{"missing chunks", func() (string, error) {
			m, err := cl.MissingChunks(ctx, []api.Digest{d1, d2})
			if len(m) != 1 {
				return "", err
			}
			return m[0].String()[:2], err
		}, "01", api.RouteMissingChunks, "", `{"digests":["` + d1.String() + `","` + d2.String() + `"]}`},
		{"put chunks", func() (string, error) {
			r, err := cl.PutChunks(ctx, strings.NewReader("chunk stream"))
			return ptr(r, func(r *api.PutChunksReply) string { return fmt.Sprint(r.Chunks, " ", r.StoredBytes) }), err
		}, "1 12", api.RoutePutChunks, "", "chunk stream"},
		{"push image", func() (string, error) {
			r, err := cl.PushImage(ctx, "img-1", "10.0.0.2:7071")
			return ptr(r, func(r *api.PushImageReply) string { return fmt.Sprint(r.ID, " ", r.To, " ", r.SentBytes) }), err
		}, "img-1 10.0.0.2:7071 7", api.RoutePushImage, "img-1", `{"to":"10.0.0.2:7071"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.call()
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("reply %q, want %q", got, c.want)
			}
			h := hits()
			if len(h) != 1 || h[0].route != c.route || h[0].id != c.id || strings.TrimSpace(h[0].body) != c.body {
				t.Errorf("host saw %+v, want one request to %s with id %q and body %q", h, c.route, c.id, c.body)
			}
		})
	}
}

func ptr[T any](v *T, f func(*T) string) string {
	if v == nil {
		return ""
	}
	return f(v)
}

func TestVerifyWithProgress(t *testing.T) {
	cl, _ := fakeHost(t)
	ctx := context.Background()
	var last [2]int64
	rep, err := cl.Verify(ctx, api.VerifyRequest{ID: "img-1"}, func(done, total int64) { last = [2]int64{done, total} })
	if err != nil || rep.Chunks != 3 || last != [2]int64{3, 3} {
		t.Fatalf("report %+v, err %v, last progress %v", rep, err, last)
	}
	// An error after the 200 arrives as an event and keeps its kind.
	if _, err := cl.Verify(ctx, api.VerifyRequest{ID: "img-gone"}, func(int64, int64) {}); !errs.IsNotFound(err) || !strings.Contains(err.Error(), "img-gone") {
		t.Fatalf("streamed error: %v", err)
	}
}

// An export that breaks off short of its length is an unavailable error
// naming the image, after the bytes that did arrive.
func TestExportBrokenOff(t *testing.T) {
	cl, hits := fakeHost(t)
	var buf bytes.Buffer
	var total int64
	n, err := cl.Export(context.Background(), "img-1", &buf, func(_, t int64) { total = t })
	if !errs.IsUnavailable(err) || !strings.Contains(err.Error(), `image "img-1": export stream broke off`) {
		t.Fatalf("err %v", err)
	}
	if n == 0 || int64(buf.Len()) != n || total != 100000 {
		t.Fatalf("wrote %d (buffer %d), progress total %d", n, buf.Len(), total)
	}
	if h := hits(); len(h) != 1 || h[0].route != api.RouteExport || h[0].id != "img-1" {
		t.Fatalf("host saw %+v", h)
	}
}

func TestCallsRefuseAnEmptyID(t *testing.T) {
	cl := NewClient("127.0.0.1:1", "tok") // nothing is sent
	ctx := context.Background()
	for name, call := range map[string]func() error{
		"session":      func() error { _, err := cl.Session(ctx, ""); return err },
		"checkpoint":   func() error { _, err := cl.Checkpoint(ctx, "", api.CheckpointRequest{}); return err },
		"migrate":      func() error { _, err := cl.Migrate(ctx, "", api.MigrateRequest{To: "b:1"}); return err },
		"restore":      func() error { _, err := cl.Restore(ctx, ""); return err },
		"image":        func() error { _, err := cl.Image(ctx, ""); return err },
		"remove image": func() error { _, err := cl.RemoveImage(ctx, ""); return err },
		"export":       func() error { _, err := cl.Export(ctx, "", io.Discard, nil); return err },
	} {
		if err := call(); !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "id given") {
			t.Errorf("%s with no id: %v", name, err)
		}
	}
}
