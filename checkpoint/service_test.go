package checkpoint_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/checkpointtest"
	"github.com/gpuctl/gpuctl/checkpoint/proctest"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
)

func TestCheckpointRoute(t *testing.T) {
	h := proctest.New(t)
	const id = "s-00000000c0de"
	cases := []struct {
		name      string
		body      any
		id        string
		wantKind  errs.Kind // "" = success
		wantState string
		wantAlive bool
	}{
		{name: "leave running", body: api.CheckpointRequest{LeaveRunning: true}, id: id, wantState: "running", wantAlive: true},
		{name: "release", body: api.CheckpointRequest{}, id: id, wantState: "stopped"},
		{name: "no body releases", body: nil, id: id, wantState: "stopped"},
		{name: "unknown field", body: map[string]any{"leave": true}, id: id, wantKind: errs.InvalidArgument, wantState: "running", wantAlive: true},
		{name: "bad session id", body: api.CheckpointRequest{}, id: "s-1", wantKind: errs.InvalidArgument, wantState: "running", wantAlive: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			child := h.Start(false)
			w := checkpointtest.Worker{Pid: child.Process.Pid, Calls: &checkpointtest.Calls{}}
			store := checkpointtest.NewImages(t)
			tab := checkpointtest.NewSessions()
			tab.Add(id, w, "img-prev")
			svc := &checkpoint.Service{
				Pipeline: &checkpoint.Pipeline{WorkDir: t.TempDir(), Store: store, Reattach: &checkpointtest.Reattacher{Calls: w.Calls}},
				Sessions: tab,
			}
			mux := http.NewServeMux()
			svc.Register(mux)
			srv := httptest.NewServer(control.RequireToken("tok", mux))
			defer srv.Close()
			cl := control.NewClient(strings.TrimPrefix(srv.URL, "http://"), "tok")

			var res api.CheckpointReply
			var err error
			if req, ok := c.body.(api.CheckpointRequest); ok {
				var r *api.CheckpointReply
				if r, err = cl.Checkpoint(ctx, c.id, req); r != nil {
					res = *r
				}
			} else {
				// Bodies the typed client never sends.
				err = rawPost(ctx, srv.URL+api.SessionCheckpointPath(c.id), c.body, &res)
			}
			if c.wantKind != "" {
				if errs.KindOf(err) != c.wantKind {
					t.Fatalf("err %v, want kind %s", err, c.wantKind)
				}
			} else {
				if err != nil {
					t.Fatal(err)
				}
				if res.Image == "" || res.Session != id || res.Bytes <= 0 || res.StoredBytes <= 0 {
					t.Errorf("result %+v", res)
				}
				if store.Last().Parent != "img-prev" {
					t.Errorf("parent %q, want the session's last image", store.Last().Parent)
				}
			}
			if got := tab.State(id); got != c.wantState {
				t.Errorf("state %q, want %q", got, c.wantState)
			}
			if c.wantAlive {
				h.Counting(child.Process.Pid)
			} else if err := child.Wait(); err == nil {
				t.Error("released worker exited cleanly")
			}
		})
	}
}

// rawPost posts body as JSON (nothing when nil) with the test token and
// decodes the reply or the error envelope.
func rawPost(ctx context.Context, url string, body, out any) error {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, r)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb api.ErrorBody
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
			return fmt.Errorf("%s: %w", resp.Status, err)
		}
		return eb.Err()
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func TestClaimIsExclusive(t *testing.T) {
	s := &checkpoint.Service{}
	free, err := s.Claim("s-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Claim("s-1"); !errs.IsFailedPrecondition(err) {
		t.Errorf("second claim: %v", err)
	}
	if _, err := s.Claim("s-2"); err != nil {
		t.Errorf("claim of another session: %v", err)
	}
	free()
	if _, err := s.Claim("s-1"); err != nil {
		t.Errorf("claim after free: %v", err)
	}
}
