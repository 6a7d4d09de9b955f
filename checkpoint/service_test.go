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
	"github.com/gpuctl/gpuctl/tenant"
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
		owner, as string // the session's tenant, the caller's ("": the administrator)
	}{
		{name: "leave running", body: api.CheckpointRequest{LeaveRunning: true}, id: id, wantState: "running", wantAlive: true},
		{name: "release", body: api.CheckpointRequest{}, id: id, wantState: "stopped"},
		{name: "no body releases", body: nil, id: id, wantState: "stopped"},
		{name: "unknown field", body: map[string]any{"leave": true}, id: id, wantKind: errs.InvalidArgument, wantState: "running", wantAlive: true},
		{name: "bad session id", body: api.CheckpointRequest{}, id: "s-1", wantKind: errs.InvalidArgument, wantState: "running", wantAlive: true},
		{name: "the tenant's own session", body: api.CheckpointRequest{LeaveRunning: true}, id: id, owner: "alice", as: "alice", wantState: "running", wantAlive: true},
		{name: "another tenant's session is not found", body: api.CheckpointRequest{}, id: id, owner: "alice", as: "bob",
			wantKind: errs.NotFound, wantState: "running", wantAlive: true},
		{name: "the administrator checkpoints a tenant's session", body: api.CheckpointRequest{}, id: id, owner: "alice", wantState: "stopped"},
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
			tab.Own(id, c.owner)
			svc := &checkpoint.Service{
				Pipeline: &checkpoint.Pipeline{WorkDir: t.TempDir(), Store: store, Reattach: &checkpointtest.Reattacher{Calls: w.Calls}},
				Sessions: tab,
			}
			mux := http.NewServeMux()
			svc.Register(mux)
			srv := httptest.NewServer(control.Authenticate(callers{}, nil, mux))
			defer srv.Close()
			tok := "tok"
			if c.as != "" {
				tok = "tok-" + c.as
			}
			cl := control.NewClient(strings.TrimPrefix(srv.URL, "http://"), tok)

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
				if store.Last().Tenant != c.owner {
					t.Errorf("image of tenant %q, want the session's owner %q", store.Last().Tenant, c.owner)
				}
			}
			if got := tab.State(id); got != c.wantState {
				t.Errorf("state %q, want %q", got, c.wantState)
			}
			if calls := w.Calls.String(); c.wantKind == errs.NotFound && calls != "" {
				t.Errorf("the worker was driven for a caller who may not see it: %v", calls)
			}
			if c.wantAlive {
				h.Counting(child.Process.Pid)
			} else if err := child.Wait(); err == nil {
				t.Error("released worker exited cleanly")
			}
		})
	}
}

// callers authenticates "tok" as the administrator and "tok-NAME" as
// tenant NAME.
type callers struct{}

func (callers) Authenticate(ctx context.Context, tok string) (context.Context, string, bool) {
	if tok == "tok" {
		return tenant.NewContext(ctx, tenant.Admin()), "(admin)", true
	}
	name, ok := strings.CutPrefix(tok, "tok-")
	if !ok {
		return ctx, "", false
	}
	return tenant.NewContext(ctx, tenant.Principal{Tenant: name}), name, true
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
