package tenant

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

// writeFile writes a file with mode perm exactly (umask aside).
func writeFile(t *testing.T, dir, name, content string, perm os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, perm); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name    string
		content string
		perm    os.FileMode
		want    string
		err     string
		kind    errs.Kind
	}{
		{"private", "  tok-1\n", 0o600, "tok-1", "", ""},
		{"read-only owner", "tok-2", 0o400, "tok-2", "", ""},
		{"group readable", "tok", 0o640, "", "is open to group or others (mode 0640); run chmod 600 ", errs.FailedPrecondition},
		{"world readable", "tok", 0o644, "", "(mode 0644); run chmod 600 ", errs.FailedPrecondition},
		{"group writable", "tok", 0o620, "", "(mode 0620)", errs.FailedPrecondition},
		{"empty", "\n\n", 0o600, "", "is empty", errs.InvalidArgument},
		{"two lines", "a\nb\n", 0o600, "", "more than one line", errs.InvalidArgument},
		{"too long", strings.Repeat("x", 600), 0o600, "", "more than 512 bytes", errs.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "-"), tc.content, tc.perm)
			got, err := ReadTokenFile(p, "host token")
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("got %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), p) || errs.KindOf(err) != tc.kind {
				t.Fatalf("err %v (%s), want %s naming %s and containing %q", err, errs.KindOf(err), tc.kind, p, tc.err)
			}
		})
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "missing"), "host token"); err == nil || !strings.Contains(err.Error(), "host token") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestLoadAndIdentify(t *testing.T) {
	dir := t.TempDir()
	alice := writeFile(t, dir, "alice", "alice-token\n", 0o600)
	bob := writeFile(t, dir, "bob", "bob-token\n", 0o600)
	file := writeFile(t, dir, "tenants.json", `[{"name":"alice","token_file":"`+alice+`","max_mem_bytes":4096,"max_sessions":2},
		{"name":"bob","token_file":"`+bob+`"}]`, 0o644)
	s, err := Load(file, "host-token")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		token string
		want  Principal
		ok    bool
	}{
		{"host-token", Admin(), true},
		{"alice-token", Principal{Tenant: "alice"}, true},
		{"bob-token", Principal{Tenant: "bob"}, true},
		{"alice-token ", Principal{}, false},
		{"", Principal{}, false},
		{"host-tokenx", Principal{}, false},
	} {
		got, ok := s.Identify(tc.token)
		if got != tc.want || ok != tc.ok {
			t.Errorf("Identify(%q) = %+v, %v; want %+v, %v", tc.token, got, ok, tc.want, tc.ok)
		}
	}
	ctx, name, ok := s.Authenticate(context.Background(), "bob-token")
	if !ok || name != "bob" || FromContext(ctx) != (Principal{Tenant: "bob"}) {
		t.Fatalf("Authenticate: %q %v %+v", name, ok, FromContext(ctx))
	}
	if l, ok := s.Limits("alice"); !ok || l.MaxMemBytes != 4096 || l.MaxSessions != 2 {
		t.Fatalf("alice's limits %+v %v", l, ok)
	}
	if _, ok := s.Limits("carol"); ok || s.Known("carol") || !s.Known("bob") {
		t.Fatal("unknown tenant reported known")
	}
	if got := s.Tenants(); len(got) != 2 || got[0].Name != "alice" || got[1].Name != "bob" || s.Len() != 2 {
		t.Fatalf("Tenants() = %+v", got)
	}

	// Fingerprints agree across hosts that share the host token and the
	// tenant's token, and differ otherwise.
	same, _ := Load(file, "host-token")
	other, _ := Load(file, "another-host-token")
	if fp := s.Fingerprint("alice"); fp == "" || fp != same.Fingerprint("alice") || fp == other.Fingerprint("alice") || fp == s.Fingerprint("bob") {
		t.Fatalf("fingerprints: %q %q %q %q", fp, same.Fingerprint("alice"), other.Fingerprint("alice"), s.Fingerprint("bob"))
	}
	if s.Fingerprint("carol") != "" {
		t.Fatal("fingerprint of an unknown tenant")
	}
}

func TestLoadRefuses(t *testing.T) {
	dir := t.TempDir()
	a := writeFile(t, dir, "a", "same\n", 0o600)
	b := writeFile(t, dir, "b", "same\n", 0o600)
	host := writeFile(t, dir, "h", "host\n", 0o600)
	open := writeFile(t, dir, "open", "open\n", 0o644)
	for _, tc := range []struct {
		name, content, err string
	}{
		{"shared token", `[{"name":"a","token_file":"` + a + `"},{"name":"b","token_file":"` + b + `"}]`, `tenant "b" has the same token as tenant "a"`},
		{"host token", `[{"name":"a","token_file":"` + host + `"}]`, `tenant "a" has the same token as the host token`},
		{"open token file", `[{"name":"a","token_file":"` + open + `"}]`, "run chmod 600 " + open},
		{"missing token file", `[{"name":"a","token_file":"` + filepath.Join(dir, "nope") + `"}]`, `tenant "a"'s token`},
		{"bad json", `[{"name":1}]`, "tenants file " + filepath.Join(dir, "bad-json")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := writeFile(t, dir, strings.ReplaceAll(tc.name, " ", "-"), tc.content, 0o600)
			if _, err := Load(f, "host"); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("err %v, want %q", err, tc.err)
			}
		})
	}
	if _, err := Load(filepath.Join(dir, "none.json"), "host"); err == nil || !strings.Contains(err.Error(), "tenants file") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestPrincipal(t *testing.T) {
	admin, alice := Admin(), Principal{Tenant: "alice"}
	if !admin.Owns("") || !admin.Owns("alice") || !alice.Owns("alice") || alice.Owns("") || alice.Owns("bob") {
		t.Fatal("Owns is wrong")
	}
	if admin.String() != "(admin)" || alice.String() != "alice" {
		t.Fatalf("names %q %q", admin, alice)
	}
	ctx := context.Background()
	if !FromContext(ctx).IsAdmin() || RequireAdmin(ctx, "gc") != nil {
		t.Fatal("a context without a principal is not the administrator")
	}
	err := RequireAdmin(NewContext(ctx, alice), "garbage collection")
	if !errs.IsPermissionDenied(err) || !strings.Contains(err.Error(), "garbage collection") {
		t.Fatalf("RequireAdmin for a tenant: %v", err)
	}
}
