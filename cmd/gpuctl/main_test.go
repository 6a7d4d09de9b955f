package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/control/tlstest"
)

func TestReorderArgs(t *testing.T) {
	app := newApp(&env{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"flag after positional", "gpuctl migrate s-1 --to b:7071", "gpuctl migrate --to b:7071 s-1"},
		{"flag with equals", "gpuctl migrate s-1 --to=b:7071 --json", "gpuctl migrate --to=b:7071 --json s-1"},
		{"global flags first", "gpuctl --host a:1 sessions --json", "gpuctl --host a:1 sessions --json"},
		{"global value flag", "gpuctl --token-file /t checkpoint s-1 --leave-running", "gpuctl --token-file /t checkpoint --leave-running s-1"},
		{"run keeps its command", "gpuctl run --server a:1 -- prog --json -x", "gpuctl run --server a:1 -- prog --json -x"},
		{"run flags after dashdash untouched", "gpuctl run -- prog --server x", "gpuctl run -- prog --server x"},
		{"nothing", "gpuctl", "gpuctl"},
		{"unknown command", "gpuctl frobnicate a --b", "gpuctl frobnicate a --b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(reorderArgs(app, strings.Fields(tc.in)), " ")
			if got != tc.want {
				t.Errorf("reorderArgs(%q)\n got %q\nwant %q", tc.in, got, tc.want)
			}
		})
	}
}

// A command group: flags after a subcommand's positional argument move in
// front of it, and the group's own flags stay put.
func TestReorderArgsGroups(t *testing.T) {
	app := &cli.App{Name: "gpuctl", Commands: []*cli.Command{{
		Name:  "images",
		Flags: []cli.Flag{&cli.StringFlag{Name: "filter"}},
		Subcommands: []*cli.Command{
			{Name: "inspect", Flags: []cli.Flag{jsonFlag}},
			{Name: "export", Flags: []cli.Flag{&cli.StringFlag{Name: "out"}}},
		},
	}}}
	for _, tc := range []struct{ in, want string }{
		{"gpuctl images inspect img-1 --json", "gpuctl images inspect --json img-1"},
		{"gpuctl images --filter x inspect img-1 --json", "gpuctl images --filter x inspect --json img-1"},
		{"gpuctl images export img-1 --out f.tar", "gpuctl images export --out f.tar img-1"},
	} {
		if got := strings.Join(reorderArgs(app, strings.Fields(tc.in)), " "); got != tc.want {
			t.Errorf("reorderArgs(%q)\n got %q\nwant %q", tc.in, got, tc.want)
		}
	}
}

func TestAge(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {42 * time.Second, "42s"}, {5 * time.Minute, "5m"}, {3 * time.Hour, "3h"}, {72 * time.Hour, "3d"},
	} {
		if got := age(tc.d); got != tc.want {
			t.Errorf("age(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// fakeAPI serves canned control-API replies and checks the token.
func fakeAPI(t *testing.T, routes map[string]string) (addr, tokenFile string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"kind":"unauthenticated","error":"missing or wrong token"}`))
			return
		}
		body, ok := routes[r.Method+" "+r.URL.Path]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"kind":"not_found","error":"session \"s-000000000009\": no such session"}`))
			return
		}
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	tokenFile = filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("tok\n"), 0o600)
	return strings.TrimPrefix(srv.URL, "http://"), tokenFile
}

func testEnv(out, errOut *bytes.Buffer) *env {
	e := osEnv()
	e.stdout, e.stderr = out, errOut
	e.now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
	return e
}

func TestSessionsAndHost(t *testing.T) {
	addr, tok := fakeAPI(t, map[string]string{
		"GET /v1/sessions": `[{"id":"s-0123456789ab","state":"running","host":"a","client":"10.0.0.2:5000","created":"2026-11-30T11:55:00Z","mem_bytes":1048576,"device":"0","backend":"emulated","tenant":"alice"}]`,
		"GET /v1/host": `{"name":"a","backend":"emulated","driver_version":"13.0 (emulated)","listen":"10.0.0.1:7070","version":"dev","sessions":1,"gpus":[{"index":0,"name":"gpuctl emulated device","uuid":"GPU-1","memory_bytes":17179869184}],` +
			`"tenants":[{"name":"alice","max_sessions":2,"max_mem_bytes":1073741824,"sessions":1,"mem_bytes":1048576},{"name":"bob","sessions":0,"mem_bytes":0}]}`,
	})
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"sessions table", []string{"sessions"}, 0, []string{"s-0123456789ab", "running", "10.0.0.2:5000", "5m", "1.0 MiB", "TENANT", "alice"}},
		{"sessions json", []string{"sessions", "--json"}, 0, []string{`"id": "s-0123456789ab"`, `"state": "running"`, `"host": "a"`}},
		{"host text", []string{"host"}, 0, []string{"backend emulated", "gpuctl emulated device", "16.0 GiB", "alice", "1 of 2", "1.0 MiB of 1.0 GiB", "bob"}},
		{"host json", []string{"host", "--json"}, 0, []string{`"backend": "emulated"`}},
		{"extra argument", []string{"sessions", "bogus"}, 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			args := append([]string{"gpuctl", "--host", addr, "--token-file", tok}, tc.args...)
			code := run(context.Background(), args, testEnv(&out, &errOut))
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errOut.String())
			}
			for _, s := range tc.contains {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
			if code != 0 && strings.Count(strings.TrimSpace(errOut.String()), "\n") != 0 {
				t.Errorf("error is not one line: %q", errOut.String())
			}
		})
	}
	// A wrong token is exit status 5 with one line.
	bad := filepath.Join(t.TempDir(), "bad")
	os.WriteFile(bad, []byte("nope"), 0o600)
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"gpuctl", "--host", addr, "--token-file", bad, "sessions"}, testEnv(&out, &errOut)); code != 5 {
		t.Fatalf("wrong token: exit %d (%s)", code, errOut.String())
	}
	// An empty list is [] in JSON.
	addr2, tok2 := fakeAPI(t, map[string]string{"GET /v1/sessions": `[]`})
	out.Reset()
	if code := run(context.Background(), []string{"gpuctl", "--host", addr2, "--token-file", tok2, "sessions", "--json"}, testEnv(&out, &errOut)); code != 0 || strings.TrimSpace(out.String()) != "[]" {
		t.Fatalf("empty list: %d %q", code, out.String())
	}
}

func TestRun(t *testing.T) {
	lib := t.TempDir()
	os.WriteFile(filepath.Join(lib, "libcuda.so.1"), nil, 0o644)
	tok := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tok, []byte("tok\n"), 0o600)
	t.Setenv("GPUCTL_LIB_DIR", lib)
	t.Setenv("GPUCTL_TOKEN", "")
	t.Setenv("GPUCTL_TOKEN_FILE", "")
	t.Setenv("LD_LIBRARY_PATH", "/already/there")
	t.Setenv("GPUCTL_TLS_CA", "")
	t.Setenv("GPUCTL_TLS_SERVER_NAME", "")
	ca := tlstest.NewCA(t, "run")
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	os.WriteFile(notPEM, []byte("hello\n"), 0o600)
	tlsEcho := []string{"--", "sh", "-c", "echo ca=$GPUCTL_TLS_CA name=$GPUCTL_TLS_SERVER_NAME"}
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"exit status passes through", []string{"run", "--server", "10.0.0.1:7070", "--token-file", tok, "--", "sh", "-c", "exit 3"}, 3, nil},
		{"environment", []string{"run", "--server", "10.0.0.1:7070", "--token-file", tok, "--", "sh", "-c", "echo $GPUCTL_SERVER $GPUCTL_TOKEN_FILE $LD_LIBRARY_PATH"}, 0,
			[]string{"10.0.0.1:7070 " + tok + " " + lib + ":/already/there"}},
		{"global token flag", []string{"--token-file", tok, "run", "--server", "h:1", "--", "sh", "-c", "echo $GPUCTL_TOKEN_FILE"}, 0, []string{tok}},
		{"killed by a signal", []string{"run", "--server", "h:1", "--token-file", tok, "--", "sh", "-c", "kill -9 $$"}, 137, nil},
		{"no server", []string{"run", "--token-file", tok, "--", "true"}, 2, nil},
		{"bad server", []string{"run", "--server", "nocolon", "--token-file", tok, "--", "true"}, 2, nil},
		{"no program", []string{"run", "--server", "h:1", "--token-file", tok}, 2, nil},
		{"no token", []string{"run", "--server", "h:1", "--", "true"}, 2, nil},
		{"missing program", []string{"run", "--server", "h:1", "--token-file", tok, "--", "/no/such/prog"}, 2, nil},
		{"no TLS", append([]string{"run", "--server", "h:1", "--token-file", tok}, tlsEcho...), 0, []string{"ca= name="}},
		{"TLS CA", append([]string{"run", "--server", "h:1", "--token-file", tok, "--tls-ca", ca.CertFile}, tlsEcho...), 0,
			[]string{"ca=" + ca.CertFile + " name="}},
		{"TLS CA and name", append([]string{"run", "--server", "h:1", "--token-file", tok, "--tls-ca", ca.CertFile, "--tls-server-name", "gpud.internal"}, tlsEcho...), 0,
			[]string{"ca=" + ca.CertFile + " name=gpud.internal"}},
		{"global TLS CA", append([]string{"--tls-ca", ca.CertFile, "run", "--server", "h:1", "--token-file", tok}, tlsEcho...), 0,
			[]string{"ca=" + ca.CertFile}},
		{"TLS name without CA", append([]string{"run", "--server", "h:1", "--token-file", tok, "--tls-server-name", "x"}, tlsEcho...), 2, nil},
		{"TLS CA missing", append([]string{"run", "--server", "h:1", "--token-file", tok, "--tls-ca", "/no/such/ca.pem"}, tlsEcho...), 2, nil},
		{"TLS CA not PEM", append([]string{"run", "--server", "h:1", "--token-file", tok, "--tls-ca", notPEM}, tlsEcho...), 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(context.Background(), append([]string{"gpuctl"}, tc.args...), testEnv(&out, &errOut))
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr %q", code, tc.code, errOut.String())
			}
			for _, s := range tc.contains {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output %q lacks %q", out.String(), s)
				}
			}
		})
	}
	// Without the library, a clear error.
	t.Setenv("GPUCTL_LIB_DIR", t.TempDir())
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"gpuctl", "run", "--server", "h:1", "--token-file", tok, "--", "true"}, testEnv(&out, &errOut)); code != 6 ||
		!strings.Contains(errOut.String(), "make build") {
		t.Fatalf("missing library: exit %d %q", code, errOut.String())
	}
}

func TestRunEnvDropsStaleValues(t *testing.T) {
	env, err := runEnv([]string{"GPUCTL_SERVER=old:1", "GPUCTL_TOKEN=secret", "HOME=/root"}, "/lib", runArgs{server: "new:2"})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"GPUCTL_SERVER=new:2", "GPUCTL_TOKEN=secret", "HOME=/root", "LD_LIBRARY_PATH=/lib"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %q: %v", want, env)
		}
	}
	if slices.Contains(env, "GPUCTL_SERVER=old:1") {
		t.Errorf("stale server kept: %v", env)
	}
}
