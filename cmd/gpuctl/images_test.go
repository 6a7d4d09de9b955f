package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/store"
)

// imageHost is a real store behind the real image routes.
func imageHost(t *testing.T) (*store.Store, string) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Check(context.Background()); err != nil {
			t.Errorf("store check: %v", err)
		}
		st.Close()
	})
	mux := http.NewServeMux()
	images.Register(mux, st, images.RouteOptions{Logger: quiet})
	srv := httptest.NewServer(control.RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return st, strings.TrimPrefix(srv.URL, "http://")
}

func TestImagesCommands(t *testing.T) {
	st, hostA := imageHost(t)
	_, hostB := imageHost(t)
	t.Setenv("GPUCTL_TOKEN", "tok")
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "pages-1.img"), bytes.Repeat([]byte("memory page "), 50000), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "core-1.img"), []byte("core"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := images.Commit(context.Background(), st, src, images.Meta{ID: "img-cli", Session: "s-00000000c11a", Host: "hostA", Backend: "emulated"}); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "img.gpuimg")
	cases := []struct {
		name     string
		host     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  string
	}{
		{"ls", hostA, []string{"images", "ls"}, 0, []string{"img-cli", "s-00000000c11a", "585.9 KiB", "hostA"}, ""},
		{"ls json", hostA, []string{"images", "ls", "--json"}, 0, []string{`"id": "img-cli"`, `"session": "s-00000000c11a"`, `"bytes": 600004`}, ""},
		{"ls empty", hostB, []string{"images", "ls"}, 0, []string{"no images on"}, ""},
		{"ls empty json", hostB, []string{"images", "ls", "--json"}, 0, []string{"[]"}, ""},
		{"inspect", hostA, []string{"images", "inspect", "img-cli"}, 0, []string{"session:", "s-00000000c11a", "pages-1.img", "page-cdc"}, ""},
		{"inspect json, flag after", hostA, []string{"images", "inspect", "img-cli", "--json"}, 0, []string{`"id": "img-cli"`, `"bytes": 600004`, `"file_list"`}, ""},
		{"inspect missing", hostA, []string{"images", "inspect", "img-nope"}, 3, nil, "not in this host's store"},
		{"inspect bad id", hostA, []string{"images", "inspect", "../x"}, 2, nil, "not a valid image id"},
		{"inspect no id", hostA, []string{"images", "inspect"}, 2, nil, "usage: gpuctl images inspect ID"},
		{"verify one", hostA, []string{"images", "verify", "img-cli"}, 0, []string{"all intact"}, ""},
		{"verify all json", hostA, []string{"images", "verify", "--json"}, 0, []string{`"images": 1`}, ""},
		{"export", hostA, []string{"images", "export", "img-cli", file, "--json"}, 0, []string{`"id": "img-cli"`, `"session": "s-00000000c11a"`, `"bytes": 600004`, `"file_bytes"`}, ""},
		{"export missing", hostA, []string{"images", "export", "img-nope", file + ".2"}, 3, nil, "img-nope"},
		{"import elsewhere", hostB, []string{"images", "import", file}, 0, []string{"imported img-cli (session s-00000000c11a"}, ""},
		{"import again", hostB, []string{"images", "import", file, "--json"}, 6, nil, "images rm img-cli"},
		{"import not a file", hostB, []string{"images", "import", "/nonexistent"}, 2, nil, "open the export file"},
		{"import junk", hostB, []string{"images", "import", "/etc/hostname"}, 2, nil, "not a gpuctl image export"},
		{"rm", hostB, []string{"images", "rm", "img-cli", "--json"}, 0, []string{`"id": "img-cli"`, `"deleted": true`, `"bytes": 600004`}, ""},
		{"gc", hostB, []string{"images", "gc", "--json"}, 0, []string{`"chunks_removed": `}, ""},
		{"rm again", hostB, []string{"images", "rm", "img-cli"}, 3, nil, "not in this host's store"},
		{"unreachable", "127.0.0.1:1", []string{"images", "ls"}, 4, nil, "cannot reach"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			e := &env{stdout: &out, stderr: &errb, now: time.Now}
			code := run(context.Background(), append([]string{"gpuctl", "--host", c.host}, c.args...), e)
			if code != c.wantCode {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, c.wantCode, out.String(), errb.String())
			}
			for _, w := range c.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			if c.wantErr != "" && (!strings.Contains(errb.String(), c.wantErr) || strings.Count(strings.TrimSpace(errb.String()), "\n") != 0) {
				t.Errorf("stderr %q, want one line containing %q", errb.String(), c.wantErr)
			}
			if strings.Contains(strings.Join(c.args, " "), "--json") && c.wantCode == 0 {
				var v any
				if err := json.Unmarshal(out.Bytes(), &v); err != nil {
					t.Errorf("--json output is not JSON: %v", err)
				}
			}
		})
	}
}

func TestImagesVerifyReportsDamage(t *testing.T) {
	st, host := imageHost(t)
	t.Setenv("GPUCTL_TOKEN", "tok")
	src := t.TempDir()
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i*7 + i/251)
	}
	if err := os.WriteFile(filepath.Join(src, "pages-1.img"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	m, _, err := images.Commit(context.Background(), st, src, images.Meta{ID: "img-bad", Session: "s-1"})
	if err != nil {
		t.Fatal(err)
	}
	packs, _ := filepath.Glob(filepath.Join(st.Dir(), "blobs", "packs", "*.pack"))
	b, _ := os.ReadFile(packs[0])
	b[len(b)-5] ^= 0xff
	if err := os.WriteFile(packs[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"gpuctl", "--host", host, "images", "verify"}, &env{stdout: &out, stderr: &errb, now: time.Now})
	named := false
	for _, c := range m.Files[0].Chunks {
		d := c.Digest.String()
		named = named || (strings.Contains(out.String(), "damaged chunk "+d+" used by img-bad") && strings.Contains(errb.String(), d))
	}
	if code != 7 || !named || !strings.Contains(errb.String(), `image "img-bad"`) {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
}
