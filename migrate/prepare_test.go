package migrate

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/restore"
)

// TestStartPrepare: the dump goes to the target's prepare route as the
// restore's header and then every file, taken from links that outlive
// the dump's directory (the freeze removes it after its store); a target
// that refuses it, or nothing staged there (generation 0), leaves a
// prepare that failed and sends nothing or ends at once.
func TestStartPrepare(t *testing.T) {
	dump := t.TempDir()
	files := map[string]string{"core-1.img": "core", "pages-1.img": strings.Repeat("p", 3<<20)}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dump, n), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	meta := images.Meta{Session: "s-0123456789ab", AttachNonce: "nonce"}
	for _, c := range []struct {
		name   string
		gen    uint64
		status int
		fails  bool
		sends  bool
	}{
		{"prepared", 9, http.StatusOK, false, true},
		{"refused", 9, http.StatusConflict, true, true},
		{"nothing staged", 0, http.StatusOK, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]string{}
			var head restore.PrepareHeader
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method != http.MethodPut || r.URL.Path != api.StagedChunksSessionPath(meta.Session)+"/restore" {
					t.Errorf("request %s %s", r.Method, r.URL.Path)
				}
				tr := tar.NewReader(r.Body)
				for {
					h, err := tr.Next()
					if err != nil {
						break
					}
					b, _ := io.ReadAll(tr)
					if h.Name == "prepare.json" {
						_ = json.Unmarshal(b, &head)
						continue
					}
					got[h.Name] = string(b)
				}
				if c.status != http.StatusOK {
					w.WriteHeader(c.status)
					json.NewEncoder(w).Encode(map[string]string{"error": "refused", "kind": "failed_precondition"})
					return
				}
				json.NewEncoder(w).Encode(api.RestoreReply{Session: meta.Session})
			}))
			defer srv.Close()
			s := &Service{}
			target := control.NewClient(strings.TrimPrefix(srv.URL, "http://"), "tok")
			p := s.startPrepare(context.Background(), target, meta.Session, dump, meta, func() uint64 { return c.gen })
			p.whenSent()
			err := p.wait()
			if (err != nil) != c.fails || p.failed() != c.fails {
				t.Errorf("prepare error %v, failed() %v; want failing %v", err, p.failed(), c.fails)
			}
			if !c.sends {
				if len(got) > 0 || p.sentAll() {
					t.Errorf("sent %d files with nothing staged", len(got))
				}
				return
			}
			if !p.sentAll() || head.Gen != c.gen || head.Meta.AttachNonce != "nonce" {
				t.Errorf("sent all %v, header %+v", p.sentAll(), head)
			}
			for n, b := range files {
				if got[n] != b {
					t.Errorf("%s: %d bytes arrived, want %d", n, len(got[n]), len(b))
				}
			}
			// The links are gone with the prepare; the dump is as it was.
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(dump), "prep-*"))
			if len(left) > 0 {
				t.Errorf("links left behind: %v", left)
			}
			if _, err := os.Stat(filepath.Join(dump, "pages-1.img")); err != nil {
				t.Errorf("the dump lost a file: %v", err)
			}
		})
	}
}
