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

// Find returns the criu binary to use: explicit if given, else
// $GPUCTL_CRIU, else the bundle that `make deps` builds (.deps/criu/criu)
// next to the running executable or up to two levels above it (build/bin
// in a checkout), else such a bundle in the working directory or one
// above it (tests run inside the checkout), else criu on PATH. It does
// not check the version.
func Find(explicit string) (string, error) {
	if explicit != "" {
		return checkExecutable(explicit)
	}
	if p := os.Getenv("GPUCTL_CRIU"); p != "" {
		return checkExecutable(p)
	}
	if exe, err := os.Executable(); err == nil {
		dir := filepath.Dir(exe)
		for _, rel := range []string{"criu/criu", ".deps/criu/criu", "../.deps/criu/criu", "../../.deps/criu/criu"} {
			if p := filepath.Join(dir, rel); isExecutable(p) {
				return p, nil
			}
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for dir := wd; ; dir = filepath.Dir(dir) {
			if p := filepath.Join(dir, ".deps/criu/criu"); isExecutable(p) {
				return p, nil
			}
			if dir == filepath.Dir(dir) {
				break
			}
		}
	}
	if p, err := exec.LookPath("criu"); err == nil {
		return p, nil
	}
	return "", errs.New(errs.FailedPrecondition, "", "criu not found: run `make deps`, or pass --criu PATH or set GPUCTL_CRIU to a criu >= %s", MinVersion)
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
