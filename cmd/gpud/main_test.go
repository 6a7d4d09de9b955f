package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	base := []string{"--listen", "127.0.0.1:7070", "--api", "127.0.0.1:7071", "--state-dir", "/tmp/x"}
	for _, tc := range []struct {
		name string
		args []string
		err  string
	}{
		{"minimal", base, ""},
		{"all", append(base, "--backend", "emulated", "--token-file", "/t", "--name", "n", "--grace", "2s", "--log-level", "debug"), ""},
		{"no listen", []string{"--api", "a:1", "--state-dir", "/x"}, "--listen is required"},
		{"no state dir", []string{"--listen", "a:1", "--api", "a:2"}, "--state-dir is required"},
		{"bad grace", append(base, "--grace", "-1s"), "must be positive"},
		{"stray argument", append(base, "extra"), `unexpected argument "extra"`},
		{"bad level", append(base, "--log-level", "loud"), "log-level"},
		{"tls", append(base, "--tls-cert", "c.pem", "--tls-key", "k.pem", "--tls-ca", "ca.pem"), ""},
		{"tls in user space", append(base, "--tls-cert", "c.pem", "--tls-key", "k.pem", "--kernel-tls=false"), ""},
		{"tls cert without key", append(base, "--tls-cert", "c.pem"), "--tls-cert and --tls-key go together"},
		{"tenants", append(base, "--tenants", "/etc/gpud/tenants.json"), ""},
		{"replicas", append(base, "--registry", "10.0.0.1:2379", "--replicas", "2"), ""},
		{"registry ttl", append(base, "--registry", "10.0.0.1:2379", "--registry-ttl", "3s"), ""},
		{"registry ttl too short", append(base, "--registry", "10.0.0.1:2379", "--registry-ttl", "500ms"), "--registry-ttl must be 2s or more"},
		{"replicas without registry", append(base, "--replicas", "1"), "--replicas needs --registry"},
		{"negative replicas", append(base, "--registry", "10.0.0.1:2379", "--replicas", "-1"), "must not be negative"},
		{"profiler on loopback", append(base, "--debug-addr", "127.0.0.1:6060"), ""},
		{"profiler on localhost", append(base, "--debug-addr", "localhost:6060"), ""},
		{"profiler on every address", append(base, "--debug-addr", "0.0.0.0:6060"), "not a loopback address"},
		{"profiler without port", append(base, "--debug-addr", "127.0.0.1"), "--debug-addr 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFlags(tc.args, io.Discard)
			if tc.err == "" && err != nil {
				t.Fatal(err)
			}
			if tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
		})
	}
}

func TestLoadToken(t *testing.T) {
	dir := t.TempDir()
	tok, err := loadToken(config{stateDir: dir})
	if err != nil || len(tok) != 64 {
		t.Fatalf("new token %q: %v", tok, err)
	}
	st, err := os.Stat(filepath.Join(dir, "token"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st.Mode(), err)
	}
	again, err := loadToken(config{stateDir: dir})
	if err != nil || again != tok {
		t.Fatalf("token changed across starts: %q %q %v", tok, again, err)
	}
	given := filepath.Join(t.TempDir(), "shared")
	os.WriteFile(given, []byte("  shared-token\n"), 0o600)
	if got, err := loadToken(config{stateDir: dir, tokenFile: given}); err != nil || got != "shared-token" {
		t.Fatalf("--token-file: %q %v", got, err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	os.WriteFile(empty, nil, 0o600)
	if _, err := loadToken(config{stateDir: dir, tokenFile: empty}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("empty token file: %v", err)
	}
	if _, err := loadToken(config{stateDir: dir, tokenFile: "/nonexistent/token"}); err == nil {
		t.Fatal("missing --token-file accepted")
	}
	// A token others can read is refused, with the file and the fix.
	open := filepath.Join(t.TempDir(), "open")
	os.WriteFile(open, []byte("tok\n"), 0o600)
	os.Chmod(open, 0o644)
	if _, err := loadToken(config{stateDir: dir, tokenFile: open}); err == nil || !strings.Contains(err.Error(), "run chmod 600 "+open) {
		t.Fatalf("world-readable --token-file: %v", err)
	}
	os.Chmod(filepath.Join(dir, "token"), 0o640)
	if _, err := loadToken(config{stateDir: dir}); err == nil || !strings.Contains(err.Error(), "chmod 600 "+filepath.Join(dir, "token")) {
		t.Fatalf("group-readable DIR/token: %v", err)
	}
}

func TestAdvertised(t *testing.T) {
	for _, tc := range []struct{ listen, local, want string }{
		{"10.0.0.1:7070", "10.0.0.9", "10.0.0.1:7070"},
		{"0.0.0.0:7070", "10.0.0.9", "10.0.0.9:7070"},
		{"[::]:7070", "fd00::2", "[fd00::2]:7070"},
		{":7070", "10.0.0.9", "10.0.0.9:7070"},
		{"0.0.0.0:7070", "", ""},
		{"gpu-a.local:7070", "10.0.0.9", "gpu-a.local:7070"},
		{"bogus", "10.0.0.9", ""},
	} {
		if got := advertised(tc.listen, tc.local); got != tc.want {
			t.Errorf("advertised(%q, %q) = %q, want %q", tc.listen, tc.local, got, tc.want)
		}
	}
}

// TestClientAddr: the client address a host registers is --listen when it
// names an address, else its port on --api's address.
func TestClientAddr(t *testing.T) {
	for _, tc := range []struct{ listen, api, want string }{
		{"10.0.0.1:7070", "10.0.0.1:7071", "10.0.0.1:7070"},
		{"0.0.0.0:7070", "10.0.0.2:7071", "10.0.0.2:7070"},
		{"[::]:7070", "gpu3.example:7071", "gpu3.example:7070"},
		{":7070", "0.0.0.0:7071", ""},
		{":7070", ":7071", ""},
	} {
		if got := clientAddr(config{listen: tc.listen, api: tc.api}); got != tc.want {
			t.Errorf("listen %s api %s: %q, want %q", tc.listen, tc.api, got, tc.want)
		}
	}
}
