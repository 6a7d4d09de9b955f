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

// Locate looks in exactly five places, in order, and says which one it
// used; a bundle anywhere else (the working directory, a directory above
// the executable's tree, a checkout of another module) is never run.
func TestLocate(t *testing.T) {
	root := t.TempDir()
	file := func(rel, content string, mode os.FileMode) string {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	const script = "#!/bin/sh\n"
	flag := file("flag/criu", script, 0o755)
	env := file("env/criu", script, 0o755)
	// An installation: gpud with its bundle beside it.
	instGpud := file("inst/bin/gpud", "", 0o755)
	instCriu := file("inst/bin/criu/criu", script, 0o755)
	// A checkout: build/bin/gpud and .deps/criu/criu under a go.mod of
	// this module.
	file("co/go.mod", "module github.com/gpuctl/gpuctl\n\ngo 1.25\n", 0o644)
	coGpud := file("co/build/bin/gpud", "", 0o755)
	coCriu := file("co/.deps/criu/criu", script, 0o755)
	// The same layout under another module's go.mod.
	file("other/go.mod", "module example.com/other\n", 0o644)
	otherGpud := file("other/build/bin/gpud", "", 0o755)
	file("other/.deps/criu/criu", script, 0o755)
	// Bundles above an executable's tree: the old search found these.
	file("up/.deps/criu/criu", script, 0o755)
	upGpud := file("up/a/b/gpud", "", 0o755)
	file("up/a/.deps/criu/criu", script, 0o755)
	// A bundle that is not executable.
	file("noexec/bin/criu/criu", script, 0o644)
	noexecGpud := file("noexec/bin/gpud", "", 0o755)
	link := filepath.Join(root, "link", "gpud")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(coGpud, link); err != nil {
		t.Fatal(err)
	}
	pathDir := filepath.Dir(file("path/criu", script, 0o755))

	cases := []struct {
		name               string
		explicit, env, exe string
		path               string // PATH for the case
		want               string
		source             Source
	}{
		{"flag first", flag, env, coGpud, pathDir, flag, SourceFlag},
		{"then GPUCTL_CRIU", "", env, coGpud, pathDir, env, SourceEnv},
		{"then the bundle beside the binary", "", "", instGpud, pathDir, instCriu, SourceBundle},
		{"then the checkout's bundle", "", "", coGpud, pathDir, coCriu, SourceBuildTree},
		{"a symlink to a checkout's binary", "", "", link, pathDir, coCriu, SourceBuildTree},
		{"another module's checkout: PATH", "", "", otherGpud, pathDir, filepath.Join(pathDir, "criu"), SourcePath},
		{"no walking up: PATH", "", "", upGpud, pathDir, filepath.Join(pathDir, "criu"), SourcePath},
		{"a bundle that does not execute: PATH", "", "", noexecGpud, pathDir, filepath.Join(pathDir, "criu"), SourcePath},
		{"nothing anywhere", "", "", upGpud, t.TempDir(), "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("PATH", c.path)
			// The working directory holds a bundle too; it must not count.
			t.Chdir(filepath.Join(root, "up"))
			got, err := locate(c.explicit, c.env, c.exe)
			if c.want == "" {
				if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "make deps") {
					t.Fatalf("found %+v, %v; want a failed_precondition that says what to do", got, err)
				}
				return
			}
			if err != nil || got.Path != c.want || got.Source != c.source {
				t.Fatalf("got %+v, %v; want %s from %s", got, err, c.want, c.source)
			}
		})
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
