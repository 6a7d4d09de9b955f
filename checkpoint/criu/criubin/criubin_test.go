package criubin

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
)

// realCRIU is the criu the tests run, or a skip.
func realCRIU(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("criu check needs root")
	}
	bin, err := Find("")
	if err != nil {
		t.Skipf("%v", err)
	}
	return bin
}

func TestCheckAndVersion(t *testing.T) {
	bin := realCRIU(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := Check(ctx, bin)
	if err != nil {
		t.Fatalf("criu check: %v", err)
	}
	if !strings.Contains(out, "Looks good") {
		t.Errorf("criu check says %q", out)
	}
	v, err := VersionOf(ctx, bin)
	if err != nil || v.Major < 3 {
		t.Fatalf("criu --version: %v %v", v, err)
	}
}

func TestParseVersion(t *testing.T) {
	cases := []struct {
		out     string
		want    Version
		wantErr bool
	}{
		{"Version: 4.1.1\n", Version{4, 1, 1, ""}, false},
		{"Version: 4.1\n", Version{4, 1, 0, ""}, false},
		{"Version: 3.17.1\nGitID: v3.17.1-5-gabcdef\n", Version{3, 17, 1, "v3.17.1-5-gabcdef"}, false},
		{"Warn: something first\nVersion: 4.2\n", Version{4, 2, 0, ""}, false},
		{"criu: unknown option\n", Version{}, true},
		{"", Version{}, true},
	}
	for _, c := range cases {
		got, err := ParseVersion(c.out)
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("ParseVersion(%q) = %v, %v; want %v (error %v)", c.out, got, err, c.want, c.wantErr)
		}
	}
}

// A binary that does not print a version, or does not run, is a
// failed_precondition error naming it.
func TestVersionOfABadBinary(t *testing.T) {
	dir := t.TempDir()
	for name, script := range map[string]string{
		"silent": "#!/bin/sh\necho hello\n",
		"fails":  "#!/bin/sh\necho 'no such thing' >&2\nexit 1\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := VersionOf(context.Background(), p)
		if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	cases := []struct {
		v, w Version
		want bool
	}{
		{Version{4, 1, 1, ""}, Version{4, 1, 0, ""}, true},
		{Version{4, 1, 0, ""}, Version{4, 1, 0, ""}, true},
		{Version{4, 0, 9, ""}, Version{4, 1, 0, ""}, false},
		{Version{3, 17, 1, ""}, Version{4, 1, 0, ""}, false},
		{Version{5, 0, 0, ""}, Version{4, 1, 0, ""}, true},
		{Version{4, 2, 0, ""}, Version{4, 1, 3, ""}, true},
	}
	for _, c := range cases {
		if got := c.v.AtLeast(c.w); got != c.want {
			t.Errorf("%v.AtLeast(%v) = %v, want %v", c.v, c.w, got, c.want)
		}
	}
	if s := (Version{4, 1, 1, ""}).String(); s != "4.1.1" {
		t.Errorf("String() = %q", s)
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "criu")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, explicit, env string
		want                string
		wantErr             bool
	}{
		{"explicit wins", exe, "/nonexistent", exe, false},
		{"env next", "", exe, exe, false},
		{"explicit missing", "/nonexistent/criu", "", "", true},
		{"env not executable", "", plain, "", true},
		{"explicit is a directory", dir, "", "", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("GPUCTL_CRIU", c.env)
			got, err := Find(c.explicit)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, c.wantErr)
			}
			if err != nil && !errs.IsFailedPrecondition(err) {
				t.Errorf("kind %q, want failed_precondition", errs.KindOf(err))
			}
			if got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}
