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

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/registry/registrytest"
	"github.com/gpuctl/gpuctl/store"
)

// pushHost is a real store behind the real image routes that pushes to
// its peers with the same token, as gpud's do.
func pushHost(t *testing.T) (*store.Store, string) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	mux := http.NewServeMux()
	images.Register(mux, st, images.RouteOptions{Logger: quiet, Dial: func(addr string) *control.Client { return control.NewClient(addr, "tok") }})
	srv := httptest.NewServer(control.RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return st, strings.TrimPrefix(srv.URL, "http://")
}

// commitPages commits an image of size bytes of session's pages; seed
// varies their content, and only the last tenth of them change with it.
func commitPages(t *testing.T, st *store.Store, id, session string, seed byte) {
	t.Helper()
	src := t.TempDir()
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i*7 + i/251 + i/4093)
		if i > len(data)*9/10 {
			data[i] ^= seed
		}
	}
	if err := os.WriteFile(filepath.Join(src, "pages-1.img"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := images.Commit(context.Background(), st, src, images.Meta{ID: id, Session: session, Host: "a", Backend: "emulated"}); err != nil {
		t.Fatal(err)
	}
}

// A cluster of a, b (up) and c (down) on a real registry: rm, verify, gc
// and import go to every host concerned or --on's, report c as down
// rather than skip it, keep the registry's copies true, and refuse to
// remove the last up copy of the image a session waits in.
func TestClusterImageCommands(t *testing.T) {
	ctx := context.Background()
	t.Setenv("GPUCTL_TOKEN", "tok")
	ep := registrytest.Start(t)
	reg := registrytest.Dial(t, ep)
	stA, addrA := pushHost(t)
	_, addrB := pushHost(t)
	for _, h := range []registry.Host{{Name: "a", API: addrA, Backend: "emulated"}, {Name: "b", API: addrB, Backend: "emulated"}, {Name: "c", API: "127.0.0.1:1", Backend: "emulated"}} {
		m, err := reg.Join(ctx, h, time.Minute, nil)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "c" {
			gone, cancel := context.WithCancel(ctx)
			cancel()
			m.Run(gone) // revokes its lease: c is down
		}
	}
	commitPages(t, stA, "img-1", "s-000000000001", 1)
	commitPages(t, stA, "img-2", "s-000000000002", 2)
	if _, err := control.NewClient(addrA, "tok").PushImage(ctx, "img-1", addrB); err != nil {
		t.Fatal(err)
	}
	for _, cp := range []registry.Copy{{Image: "img-1", Host: "a", Origin: true}, {Image: "img-1", Host: "b"}, {Image: "img-1", Host: "c"}, {Image: "img-2", Host: "a", Origin: true}} {
		if err := reg.AddCopy(ctx, cp); err != nil {
			t.Fatal(err)
		}
	}
	// Session 2 waits in img-2 (preempted on a).
	if _, err := reg.Claim(ctx, "s-000000000002", "a", false, "img-2", 1); err != nil {
		t.Fatal(err)
	}
	export := filepath.Join(t.TempDir(), "img-2.gpuimg")
	copies := func(image string) string {
		cs, err := reg.Copies(ctx, image)
		if err != nil {
			t.Fatal(err)
		}
		var hs []string
		for _, c := range cs {
			hs = append(hs, c.Host)
		}
		return strings.Join(hs, ",")
	}

	cases := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
		wantErr  []string
		after    func(t *testing.T)
	}{
		{"verify every copy", []string{"images", "verify", "img-1"}, 4,
			[]string{"a: verified", "b: verified", "c: down"}, []string{`image "img-1"`, "host c: down"}, nil},
		{"verify every copy json", []string{"images", "verify", "img-1", "--json"}, 4,
			[]string{`"host": "a"`, `"chunks": `, `"host": "c"`, `"state": "down"`}, []string{"1 of 3 hosts failed"}, nil},
		{"verify on one host", []string{"images", "verify", "img-1", "--on", "b"}, 0, []string{"b: verified"}, nil, nil},
		{"verify on a host that lacks it", []string{"images", "verify", "img-2", "--on", "b"}, 3, nil, []string{`image "img-2"`, "host b does not hold it"}, nil},
		{"verify on an unknown host", []string{"images", "verify", "--on", "z"}, 3, nil, []string{`host "z"`, "gpuctl hosts"}, nil},
		{"verify everything", []string{"images", "verify"}, 4, []string{"a: verified", "of every image", "b: verified", "c: down"}, []string{"host c"}, nil},
		{"gc every host", []string{"images", "gc", "--json"}, 4, []string{`"host": "a"`, `"chunks_removed"`, `"host": "b"`, `"host": "c"`}, []string{"garbage collection", "host c: down"}, nil},
		{"gc one host", []string{"images", "gc", "--on", "a"}, 0, []string{"a: freed"}, nil, nil},
		{"rm the image a session waits in", []string{"images", "rm", "img-2"}, 6, nil,
			[]string{`image "img-2"`, "session s-000000000002 waits in it (owner host a)", "gpuctl resume"}, func(t *testing.T) {
				if got := copies("img-2"); got != "a" {
					t.Errorf("copies of img-2 after a refused rm: %q", got)
				}
			}},
		{"rm one copy", []string{"images", "rm", "img-1", "--on", "b", "--json"}, 0, []string{`"host": "b"`, `"deleted": true`}, nil, func(t *testing.T) {
			if got := copies("img-1"); got != "a,c" {
				t.Errorf("copies of img-1 after rm --on b: %q, want a,c", got)
			}
		}},
		{"rm again on that host", []string{"images", "rm", "img-1", "--on", "b"}, 3, nil, []string{`image "img-1"`, "host b does not hold it"}, nil},
		{"export from a holder", []string{"images", "export", "img-2", export}, 0, []string{"exported img-2"}, nil, nil},
		{"import on b", []string{"images", "import", export, "--on", "b"}, 0, []string{"b: imported img-2"}, nil, func(t *testing.T) {
			if got := copies("img-2"); got != "a,b" {
				t.Errorf("copies of img-2 after import --on b: %q, want a,b", got)
			}
		}},
		{"rm a copy of it now that another stays", []string{"images", "rm", "img-2", "--on", "a"}, 0, []string{"a: removed img-2"}, nil, nil},
		{"rm every copy", []string{"images", "rm", "img-1"}, 4, []string{"a: removed img-1", "c: down"}, []string{`image "img-1"`, "host c: down"}, func(t *testing.T) {
			if got := copies("img-1"); got != "c" {
				t.Errorf("copies of img-1 after rm: %q, want c's alone (it is down)", got)
			}
		}},
		{"on needs the registry", []string{"images", "gc", "--on", "a"}, 2, nil, []string{"needs the cluster registry"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			args := []string{"gpuctl", "--registry", ep, "--host", addrA}
			if c.name == "on needs the registry" {
				args = []string{"gpuctl", "--host", addrA}
			}
			code := run(ctx, append(args, c.args...), &env{stdout: &out, stderr: &errb, now: time.Now})
			if code != c.wantCode {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, c.wantCode, out.String(), errb.String())
			}
			for _, w := range c.wantOut {
				if !strings.Contains(out.String(), w) {
					t.Errorf("stdout lacks %q:\n%s", w, out.String())
				}
			}
			for _, w := range c.wantErr {
				if !strings.Contains(errb.String(), w) {
					t.Errorf("stderr lacks %q: %s", w, errb.String())
				}
			}
			if n := strings.Count(strings.TrimSpace(errb.String()), "\n"); n != 0 {
				t.Errorf("stderr is %d lines, want one: %s", n+1, errb.String())
			}
			if strings.Contains(strings.Join(c.args, " "), "--json") {
				var v any
				if err := json.Unmarshal(out.Bytes(), &v); err != nil {
					t.Errorf("--json output is not JSON: %v", err)
				}
			}
			if c.after != nil {
				c.after(t)
			}
		})
	}
}

// A top-up comes from the first holder that can send the image: one that
// is down is passed over, one that dies in the middle is followed by the
// next, and when none can, one error names the image, the host and why
// each holder failed. The receiver holds part of the image already and is
// sent only the rest.
func TestTopUpFallsBackToAnotherHolder(t *testing.T) {
	ctx := context.Background()
	stA, addrA := pushHost(t)
	stB, addrB := pushHost(t)
	_, addrT := pushHost(t)
	commitPages(t, stA, "img-old", "s-000000000003", 1)
	commitPages(t, stA, "img-new", "s-000000000003", 9)
	commitPages(t, stB, "img-new", "s-000000000003", 9)
	if _, err := images.Push(ctx, stA, "img-old", control.NewClient(addrT, "tok"), nil); err != nil {
		t.Fatal(err)
	}
	// dying accepts the push and drops the connection, as a holder that
	// dies mid-transfer does.
	dying := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	t.Cleanup(dying.Close)
	dyingAddr := strings.TrimPrefix(dying.URL, "http://")
	up := func(name, addr string) registry.Host {
		return registry.Host{Name: name, API: addr, State: registry.StateUp}
	}
	to := up("t", addrT)
	dial := func(h registry.Host) (*control.Client, error) { return control.NewClient(h.API, "tok"), nil }

	cases := []struct {
		name     string
		holders  []registry.Host
		from     string
		failed   int
		wantErr  []string
		topsUpTo bool
	}{
		{"none can", []registry.Host{up("x", dyingAddr), {Name: "d", API: addrA, State: registry.StateDown}}, "", 1,
			[]string{`image "img-new"`, "cannot top up host t", "x: ", "holders keep their copies"}, false},
		{"no other holder", []registry.Host{to}, "", 0, []string{`image "img-new"`, "no other up host holds it"}, false},
		{"down holder passed over, dying one followed by the next", []registry.Host{{Name: "d", API: "127.0.0.1:1", State: registry.StateDown}, up("x", dyingAddr), up("b", addrB), up("a", addrA)}, "b", 1, nil, true},
		{"holds it now", []registry.Host{up("a", addrA)}, "a", 0, nil, false},
	}
	var full int64
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := topUpFrom(ctx, "img-new", to, c.holders, dial)
			if c.wantErr != nil {
				if !errs.IsUnavailable(err) {
					t.Fatalf("top-up: %+v, %v; want unavailable", got, err)
				}
				for _, w := range c.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q lacks %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.From != c.from || len(got.Failed) != c.failed || got.Host != "t" {
				t.Fatalf("top-up: %+v, want from %s after %d failures", got, c.from, c.failed)
			}
			if c.topsUpTo {
				full = got.Bytes
				if got.SentBytes == 0 || got.SentBytes > got.Bytes/3 {
					t.Errorf("sent %d of the image's %d bytes to a host holding most of it", got.SentBytes, got.Bytes)
				}
			} else if got.SentBytes != 0 {
				t.Errorf("sent %d bytes to a host that holds the image", got.SentBytes)
			}
		})
	}
	if full == 0 {
		t.Fatal("no top-up happened")
	}
	var rep *api.VerifyReport
	rep, err := control.NewClient(addrT, "tok").Verify(ctx, api.VerifyRequest{ID: "img-new"}, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("the topped-up image on t: %+v, %v", rep, err)
	}
}

// restore --on auto ranks a host holding most of an image's chunks above
// one holding none, tops it up from the up holder (here one whose
// backend cannot restore it), and records its new copy. The hosts serve
// the image routes only, so the restore itself then fails.
func TestRestorePlacesOnAPartialHolder(t *testing.T) {
	ctx := context.Background()
	t.Setenv("GPUCTL_TOKEN", "tok")
	ep := registrytest.Start(t)
	reg := registrytest.Dial(t, ep)
	stA, addrA := pushHost(t)
	stB, addrB := pushHost(t)
	_, addrD := pushHost(t)
	join := func(name, addr, backend string, free uint64) {
		if _, err := reg.Join(ctx, registry.Host{Name: name, API: addr, Backend: backend}, time.Minute,
			func(context.Context) registry.Host { return registry.Host{MemFreeBytes: free} }); err != nil {
			t.Fatal(err)
		}
	}
	join("a", addrA, "cuda", 1<<30)
	join("b", addrB, "emulated", 1<<30)
	join("d", addrD, "emulated", 8<<30) // the most room, but none of the image
	commitPages(t, stA, "img-new", "s-000000000004", 7)
	commitPages(t, stB, "img-old", "s-000000000004", 1)

	var out, errb bytes.Buffer
	code := run(ctx, []string{"gpuctl", "--registry", ep, "restore", "img-new"}, &env{stdout: &out, stderr: &errb, now: time.Now})
	if code == 0 {
		t.Fatalf("restore on a host without the restore route succeeded: %s", out.String())
	}
	for _, w := range []string{"restoring img-new on b: holds 9", "% of the image's chunks", "not a: runs cuda", "not d: ranked lower: holds 0%", "topped up b with ", " from a"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("stdout lacks %q:\n%s", w, out.String())
		}
	}
	if _, err := images.Get(ctx, stB, "img-new"); err != nil {
		t.Errorf("b was not topped up: %v", err)
	}
	cs, err := reg.Copies(ctx, "img-new")
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 1 || cs[0].Host != "b" || cs[0].Sent <= 0 || cs[0].Sent >= cs[0].Bytes/3 {
		t.Errorf("copies of img-new after the top-up: %+v, want b's with the part it was sent", cs)
	}
}

// images export with --registry reads from the first up holder that can
// send it: a holder whose stream breaks off is followed by the next, the
// file is a whole export, and an up host that does not answer its
// listing is named on stderr instead of failing the command.
func TestExportFallsBackToAnotherHolder(t *testing.T) {
	ctx := context.Background()
	t.Setenv("GPUCTL_TOKEN", "tok")
	ep := registrytest.Start(t)
	reg := registrytest.Dial(t, ep)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	stA, err := store.Open(ctx, t.TempDir(), store.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stA.Close() })
	mux := http.NewServeMux()
	images.Register(mux, stA, images.RouteOptions{Logger: quiet})
	// a dies in the middle of every export.
	broken := httptest.NewServer(control.RequireToken("tok", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/export") {
			w.Header().Set("Content-Length", "1000000")
			w.Write(bytes.Repeat([]byte{1}, 4096))
			panic(http.ErrAbortHandler)
		}
		mux.ServeHTTP(w, r)
	})))
	t.Cleanup(broken.Close)
	stB, addrB := pushHost(t)
	_, addrFresh := pushHost(t)
	for _, h := range []registry.Host{{Name: "a", API: strings.TrimPrefix(broken.URL, "http://")}, {Name: "b", API: addrB}, {Name: "e", API: "127.0.0.1:1"}} {
		if _, err := reg.Join(ctx, h, time.Minute, nil); err != nil {
			t.Fatal(err)
		}
	}
	commitPages(t, stA, "img-x", "s-000000000005", 3)
	commitPages(t, stB, "img-x", "s-000000000005", 3)
	file := filepath.Join(t.TempDir(), "x.gpuimg")

	var out, errb bytes.Buffer
	code := run(ctx, []string{"gpuctl", "--registry", ep, "images", "export", "img-x", file}, &env{stdout: &out, stderr: &errb, now: time.Now})
	if code != 0 || !strings.Contains(out.String(), "exported img-x") {
		t.Fatalf("exit %d; stdout %q stderr %q", code, out.String(), errb.String())
	}
	for _, w := range []string{"export of img-x from a failed", "trying the next holder", "host e is up but did not list its images"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("stderr lacks %q: %s", w, errb.String())
		}
	}
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if rep, err := control.NewClient(addrFresh, "tok").Import(ctx, f, -1, nil); err != nil || rep.ID != "img-x" {
		t.Fatalf("the export does not import: %+v, %v", rep, err)
	}
	if left, _ := filepath.Glob(filepath.Join(filepath.Dir(file), ".*")); len(left) != 0 {
		t.Errorf("the broken export left %v", left)
	}
}
