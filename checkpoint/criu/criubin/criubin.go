// Package criubin finds the criu binary and asks it, as a command, for its
// version and for a check of the kernel. That is all `gpuctl doctor` and
// gpud's startup need to know about CRIU, and it takes no RPC codec:
// driving CRIU (dump, restore) is package criu's, which links go-criu's
// protocol messages.
package criubin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpuctl/gpuctl/errs"
)

// MinVersion is the oldest CRIU that works on the kernels we run: older
// ones fail with "Unexpected rt vDSO area bounds" on 6.13 and later.
var MinVersion = Version{Major: 4, Minor: 1}

// Version is CRIU's version.
type Version struct {
	Major, Minor, Sublevel int
	GitID                  string // set on builds from git
}

func (v Version) String() string {
	s := fmt.Sprintf("%d.%d", v.Major, v.Minor)
	if v.Sublevel != 0 {
		s += fmt.Sprintf(".%d", v.Sublevel)
	}
	if v.GitID != "" {
		s += " (" + v.GitID + ")"
	}
	return s
}

// AtLeast reports whether v is w or newer.
func (v Version) AtLeast(w Version) bool {
	if v.Major != w.Major {
		return v.Major > w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor > w.Minor
	}
	return v.Sublevel >= w.Sublevel
}

// Source says where Locate found CRIU. The order of the constants is the
// order Locate tries them in.
type Source string

const (
	// SourceFlag: the binary named explicitly (gpud --criu, doctor --criu).
	SourceFlag Source = "flag"
	// SourceEnv: $GPUCTL_CRIU.
	SourceEnv Source = "GPUCTL_CRIU"
	// SourceBundle: criu/criu in the directory of the running executable,
	// the bundle an installation ships beside gpud.
	SourceBundle Source = "bundle"
	// SourceBuildTree: .deps/criu/criu of the checkout the running
	// executable was built in: the executable is ROOT/build/bin/NAME and
	// ROOT/go.mod declares this module. That is where `make build` and
	// `make deps` put gpud and the bundle.
	SourceBuildTree Source = "build tree"
	// SourcePath: criu on $PATH.
	SourcePath Source = "PATH"
)

// Found is the criu binary Locate chose and where it came from.
type Found struct {
	Path   string `json:"path"`
	Source Source `json:"source"`
}

// module is this repository's module path, which a build tree's go.mod
// must declare.
const module = "github.com/gpuctl/gpuctl"

// Locate returns the criu binary to use, trying in order: explicit (when
// not empty), $GPUCTL_CRIU, criu/criu beside the running executable, the
// .deps/criu/criu of the checkout the executable was built in, and criu on
// PATH. It looks nowhere else: not in the working directory, and not in
// directories above the executable's own tree, so that a daemon running as
// root never executes a binary someone placed elsewhere. It does not check
// the version.
func Locate(explicit string) (Found, error) {
	exe, err := os.Executable()
	if err != nil {
		exe = ""
	}
	return locate(explicit, os.Getenv("GPUCTL_CRIU"), exe)
}

// locate is Locate for a given environment variable and executable path.
func locate(explicit, env, exe string) (Found, error) {
	if explicit != "" {
		p, err := checkExecutable(explicit)
		return Found{p, SourceFlag}, err
	}
	if env != "" {
		p, err := checkExecutable(env)
		return Found{p, SourceEnv}, err
	}
	if exe != "" {
		if real, err := filepath.EvalSymlinks(exe); err == nil {
			exe = real
		}
		dir := filepath.Dir(exe)
		if p := filepath.Join(dir, "criu", "criu"); isExecutable(p) {
			return Found{p, SourceBundle}, nil
		}
		if root, ok := buildTree(dir); ok {
			if p := filepath.Join(root, ".deps", "criu", "criu"); isExecutable(p) {
				return Found{p, SourceBuildTree}, nil
			}
		}
	}
	if p, err := exec.LookPath("criu"); err == nil {
		return Found{p, SourcePath}, nil
	}
	return Found{}, errs.New(errs.FailedPrecondition, "", "criu not found: run `make deps`, or pass --criu PATH or set GPUCTL_CRIU to a criu >= %s", MinVersion)
}

// Find is Locate's path.
func Find(explicit string) (string, error) {
	f, err := Locate(explicit)
	return f.Path, err
}

// buildTree reports whether dir is ROOT/build/bin of a checkout of this
// repository, and returns ROOT.
func buildTree(dir string) (string, bool) {
	if filepath.Base(dir) != "bin" || filepath.Base(filepath.Dir(dir)) != "build" {
		return "", false
	}
	root := filepath.Dir(filepath.Dir(dir))
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return root, f[1] == module
		}
	}
	return "", false
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

func checkExecutable(p string) (string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return "", errs.Wrap(err, errs.FailedPrecondition, "", "criu binary")
	}
	if !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
		return "", errs.New(errs.FailedPrecondition, "", "criu binary %s is not an executable file", p)
	}
	return p, nil
}

// VersionOf runs `criu --version` and parses what it prints: the same
// numbers CRIU's RPC version call returns (package criu's GetVersion).
func VersionOf(ctx context.Context, bin string) (Version, error) {
	if bin == "" {
		var err error
		if bin, err = Find(""); err != nil {
			return Version{}, err
		}
	}
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return Version{}, errs.Wrap(err, errs.FailedPrecondition, "", "criu --version (%s): %s", bin, lastLines(string(out), 3))
	}
	v, err := ParseVersion(string(out))
	if err != nil {
		return Version{}, errs.Wrap(err, errs.FailedPrecondition, "", "criu --version (%s)", bin)
	}
	return v, nil
}

var (
	versionLine = regexp.MustCompile(`(?m)^Version:\s*(\d+)\.(\d+)(?:\.(\d+))?\s*$`)
	gitIDLine   = regexp.MustCompile(`(?m)^GitID:\s*(\S+)\s*$`)
)

// ParseVersion reads the output of `criu --version`: a "Version: X.Y[.Z]"
// line and, on builds from git, a "GitID: ..." line.
func ParseVersion(out string) (Version, error) {
	m := versionLine.FindStringSubmatch(out)
	if m == nil {
		return Version{}, fmt.Errorf("no version in %q", lastLines(out, 3))
	}
	var v Version
	v.Major, _ = strconv.Atoi(m[1])
	v.Minor, _ = strconv.Atoi(m[2])
	if m[3] != "" {
		v.Sublevel, _ = strconv.Atoi(m[3])
	}
	if g := gitIDLine.FindStringSubmatch(out); g != nil {
		v.GitID = g[1]
	}
	return v, nil
}

// Check runs `criu check` and returns its output. CRIU's verdict on
// success is "Looks good."; a failure returns the output in the error.
func Check(ctx context.Context, bin string) (string, error) {
	if bin == "" {
		var err error
		if bin, err = Find(""); err != nil {
			return "", err
		}
	}
	cmd := exec.CommandContext(ctx, bin, "check")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	text := strings.TrimSpace(out.String())
	if err != nil {
		return text, errs.Wrap(err, errs.FailedPrecondition, "", "criu check: %s", lastLines(text, 5))
	}
	return text, nil
}

// lastLines is the last n lines of s, joined with "; " for one-line
// messages.
func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "; ")
}
