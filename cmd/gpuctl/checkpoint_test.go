package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
)

// apiHost serves the checkpoint, restore and migrate routes with canned
// answers and records the request bodies.
func apiHost(t *testing.T, bodies *[]string) string {
	t.Helper()
	mux := http.NewServeMux()
	record := func(r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		*bodies = append(*bodies, strings.TrimSpace(b.String()))
	}
	mux.HandleFunc("POST /v1/sessions/{id}/checkpoint", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		if r.PathValue("id") == "s-00000000dead" {
			control.WriteError(w, errs.New(errs.NotFound, errs.Session("s-00000000dead"), "no such session on this host"))
			return
		}
		control.WriteJSON(w, map[string]any{"image": "img-1", "session": r.PathValue("id"), "bytes": 3 << 20, "stored_bytes": 1 << 20, "duration_ms": 42,
			"steps": []map[string]any{{"step": "quiesce", "duration_ns": 1e6}, {"step": "dump", "duration_ns": 30e6}}})
	})
	mux.HandleFunc("POST /v1/images/{id}/restore", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		control.WriteJSON(w, map[string]any{"session": "s-000000000001", "image": r.PathValue("id"), "pid": 99, "listen": "10.0.0.2:7070", "duration_ms": 7})
	})
	mux.HandleFunc("POST /v1/sessions/{id}/migrate", func(w http.ResponseWriter, r *http.Request) {
		record(r)
		var req struct{ To string }
		_ = json.Unmarshal([]byte((*bodies)[len(*bodies)-1]), &req)
		if req.To == "127.0.0.1:1" {
			control.WriteError(w, &errs.Error{Kind: errs.Unavailable, Msg: `session "s-000000000001": migrate failed at step "precheck": host "127.0.0.1:1": cannot reach gpud's API`})
			return
		}
		control.WriteJSON(w, map[string]any{"session": r.PathValue("id"), "to": req.To, "listen": "10.0.0.3:7070", "image": "img-2",
			"bytes": 8 << 20, "sent_bytes": 2 << 20, "downtime_ms": 120, "duration_ms": 300})
	})
	srv := httptest.NewServer(control.RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func TestCheckpointRestoreMigrateCommands(t *testing.T) {
	var bodies []string
	host := apiHost(t, &bodies)
	t.Setenv("GPUCTL_TOKEN", "tok")
	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
		wantBody string
	}{
		{name: "checkpoint", args: []string{"checkpoint", "s-000000000001"}, wantOut: []string{"checkpointed s-000000000001 into image img-1 in 42 ms: 3.0 MiB, 1.0 MiB new", "released", "dump 30 ms"}, wantBody: `{"leave_running":false}`},
		{name: "checkpoint leave running, flag after", args: []string{"checkpoint", "s-000000000001", "--leave-running"}, wantOut: []string{"still running"}, wantBody: `{"leave_running":true}`},
		{name: "checkpoint json", args: []string{"checkpoint", "--json", "s-000000000001"}, wantOut: []string{`"image": "img-1"`, `"stored_bytes": 1048576`}},
		{name: "checkpoint unknown session", args: []string{"checkpoint", "s-00000000dead"}, wantCode: 3, wantErr: "no such session"},
		{name: "checkpoint without session", args: []string{"checkpoint"}, wantCode: 2, wantErr: "missing SESSION"},
		{name: "restore", args: []string{"restore", "img-1"}, wantOut: []string{"restored session s-000000000001 from image img-1 in 7 ms", "10.0.0.2:7070"}},
		{name: "restore json", args: []string{"restore", "img-1", "--json"}, wantOut: []string{`"session": "s-000000000001"`}},
		{name: "migrate", args: []string{"migrate", "s-000000000001", "--to", "hostb:7071"}, wantOut: []string{"migrated s-000000000001 to hostb:7071", "stalled 120 ms", "sent 2.0 MiB of a 8.0 MiB image"}, wantBody: `{"to":"hostb:7071"}`},
		{name: "migrate json", args: []string{"migrate", "--json", "s-000000000001", "--to=hostb:7071"}, wantOut: []string{`"downtime_ms": 120`, `"to": "hostb:7071"`}},
		{name: "migrate without target", args: []string{"migrate", "s-000000000001"}, wantCode: 2, wantErr: "missing --to"},
		{name: "migrate to a dead host", args: []string{"migrate", "s-000000000001", "--to", "127.0.0.1:1"}, wantCode: 4, wantErr: `step "precheck"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bodies = bodies[:0]
			var out, errOut bytes.Buffer
			args := append([]string{"gpuctl", "--host", host}, c.args...)
			code := run(context.Background(), args, &env{stdout: &out, stderr: &errOut})
			if code != c.wantCode {
				t.Fatalf("exit %d, want %d; stderr %q", code, c.wantCode, errOut.String())
			}
			for _, w := range c.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			if c.wantErr != "" && !strings.Contains(errOut.String(), c.wantErr) {
				t.Errorf("stderr %q lacks %q", errOut.String(), c.wantErr)
			}
			if c.wantCode != 0 && strings.Count(strings.TrimSpace(errOut.String()), "\n") != 0 {
				t.Errorf("error is not one line: %q", errOut.String())
			}
			if c.wantBody != "" && (len(bodies) != 1 || bodies[0] != c.wantBody) {
				t.Errorf("request bodies %q, want %q", bodies, c.wantBody)
			}
		})
	}
}
