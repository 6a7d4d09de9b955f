// Package criu drives CRIU through its swrk RPC mode (go-criu's protocol
// messages over a private socketpair): dump a process tree into an image
// directory, restore it, and ask CRIU for its version and a kernel check.
//
// Every call starts its own `criu swrk` child. The caller's end of the
// socket is the only one left open here, so a CRIU that crashes or is
// killed makes the next read fail instead of hanging; a cancelled context
// kills CRIU; and CRIU is always waited for before a call returns.
//
// A failed dump or restore returns *Error, which quotes the lines of
// CRIU's log around its first errors.
package criu

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"

	"github.com/gpuctl/gpuctl/errs"
)

// MinVersion is the oldest CRIU that works on the kernels we run: older
// ones fail with "Unexpected rt vDSO area bounds" on 6.13 and later.
var MinVersion = Version{Major: 4, Minor: 1}

// Log file names, inside Options.LogDir or the image directory.
const (
	DumpLog    = "dump.log"
	PreDumpLog = "pre-dump.log"
	RestoreLog = "restore.log"
)

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

// Error is a failed CRIU operation with the end of its story from the log.
type Error struct {
	Op      string   // "dump", "pre-dump" or "restore"
	Log     string   // path of CRIU's log file
	Excerpt []string // lines around the first errors in the log
	Err     error
}

func (e *Error) Error() string {
	s := fmt.Sprintf("criu %s: %v", e.Op, e.Err)
	if len(e.Excerpt) > 0 {
		s += "; log " + e.Log + ": " + strings.Join(e.Excerpt, " | ")
	} else if e.Log != "" {
		s += "; see " + e.Log
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

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

func binary(o Options) (string, error) { return Find(o.Binary) }

// GetVersion asks CRIU for its version over RPC.
func GetVersion(ctx context.Context, bin string) (Version, error) {
	if bin == "" {
		var err error
		if bin, err = Find(""); err != nil {
			return Version{}, err
		}
	}
	resp, err := call(ctx, bin, &rpc.CriuReq{Type: rpc.CriuReqType_VERSION.Enum()})
	if err != nil {
		return Version{}, errs.Wrap(err, errs.FailedPrecondition, "", "criu version (%s)", bin)
	}
	v := resp.GetVersion()
	return Version{
		Major:    int(v.GetMajorNumber()),
		Minor:    int(v.GetMinorNumber()),
		Sublevel: int(v.GetSublevel()),
		GitID:    v.GetGitid(),
	}, nil
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

// Dump checkpoints the process tree rooted at pid into dir, which must
// exist. Unless o.LeaveRunning is set CRIU kills the tree afterwards.
func Dump(ctx context.Context, pid int, dir string, o Options) error {
	return dump(ctx, rpc.CriuReqType_DUMP, "dump", DumpLog, pid, dir, o)
}

// PreDump writes the tree's memory into dir and leaves it running, so a
// later Dump with ParentImage pointing here writes only changed pages.
// It always tracks memory.
func PreDump(ctx context.Context, pid int, dir string, o Options) error {
	o.TrackMemory = true
	return dump(ctx, rpc.CriuReqType_PRE_DUMP, "pre-dump", PreDumpLog, pid, dir, o)
}

func dump(ctx context.Context, typ rpc.CriuReqType, op, logName string, pid int, dir string, o Options) error {
	if pid <= 0 {
		return errs.New(errs.InvalidArgument, "", "criu %s: invalid pid %d", op, pid)
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return errs.New(errs.NotFound, "", "criu %s: process %d does not exist", op, pid)
	}
	bin, err := binary(o)
	if err != nil {
		return err
	}
	dirs, err := openDirs(dir, o.LogDir)
	if err != nil {
		return err
	}
	defer dirs.close()

	opts := baseOpts(o, dirs, logName)
	opts.Pid = proto.Int32(int32(pid))
	opts.LeaveRunning = proto.Bool(o.LeaveRunning || typ == rpc.CriuReqType_PRE_DUMP)
	if o.ParentImage != "" {
		opts.ParentImg = proto.String(o.ParentImage)
	}
	if o.TrackMemory {
		opts.TrackMem = proto.Bool(true)
	}
	if _, err := call(ctx, bin, &rpc.CriuReq{Type: typ.Enum(), Opts: opts}); err != nil {
		return dirs.fail(op, logName, err)
	}
	return nil
}

// Restore restores the image in dir and returns the host PID of the
// restored root task. The root gets a new PID namespace if it was dumped
// as the init of one, so restoring one image twice never collides.
//
// The restored root is a child of the calling process (unless
// o.NoSibling), which must reap it.
func Restore(ctx context.Context, dir string, o Options) (int, error) {
	bin, err := binary(o)
	if err != nil {
		return 0, err
	}
	dirs, err := openDirs(dir, o.LogDir)
	if err != nil {
		return 0, err
	}
	defer dirs.close()

	opts := baseOpts(o, dirs, RestoreLog)
	opts.RstSibling = proto.Bool(!o.NoSibling)
	if !o.HostMounts {
		// A mount namespace is rebuilt under a root CRIU must be told.
		opts.Root = proto.String("/")
	}
	resp, err := call(ctx, bin, &rpc.CriuReq{Type: rpc.CriuReqType_RESTORE.Enum(), Opts: opts})
	if err != nil {
		return 0, dirs.fail("restore", RestoreLog, err)
	}
	pid := int(resp.GetRestore().GetPid())
	if pid <= 0 {
		return 0, &Error{Op: "restore", Log: dirs.logPath(RestoreLog), Err: errors.New("CRIU reported no restored pid")}
	}
	return pid, nil
}

// baseOpts maps Options onto CRIU's RPC options shared by dump and restore.
func baseOpts(o Options, d *dirs, logName string) *rpc.CriuOpts {
	opts := &rpc.CriuOpts{
		ImagesDirFd: proto.Int32(int32(d.images.Fd())),
		LogLevel:    proto.Int32(o.logLevel()),
		LogFile:     proto.String(logName),
		GhostLimit:  proto.Uint32(o.ghostLimit()),
	}
	if d.work != nil {
		opts.WorkDirFd = proto.Int32(int32(d.work.Fd()))
	}
	if o.Timeout > 0 {
		opts.Timeout = proto.Uint32(uint32((o.Timeout + 999_999_999) / 1_000_000_000))
	}
	setTrue := func(dst **bool, v bool) {
		if v {
			*dst = proto.Bool(true)
		}
	}
	setTrue(&opts.LeaveStopped, o.LeaveStopped)
	setTrue(&opts.ShellJob, o.ShellJob)
	setTrue(&opts.TcpEstablished, o.TCPEstablished)
	setTrue(&opts.ExtUnixSk, o.ExtUnixSockets)
	setTrue(&opts.FileLocks, o.FileLocks)
	setTrue(&opts.EvasiveDevices, o.EvasiveDevices)
	if !o.HostMounts {
		opts.AutoExtMnt = proto.Bool(true)
		opts.ExtSharing = proto.Bool(true)
		opts.ExtMasters = proto.Bool(true)
	}
	opts.External = append(opts.External, o.External...)
	return opts
}

// dirs holds the directories CRIU works in, open for the call's length:
// CRIU opens them through /proc/<our pid>/fd/<n>.
type dirs struct {
	images, work *os.File
	imagesPath   string
	logDir       string
}

func openDirs(images, logDir string) (*dirs, error) {
	d := &dirs{imagesPath: images, logDir: images}
	var err error
	if d.images, err = openDir(images); err != nil {
		return nil, err
	}
	if logDir != "" {
		if d.work, err = openDir(logDir); err != nil {
			d.images.Close()
			return nil, err
		}
		d.logDir = logDir
	}
	return d, nil
}

func openDir(p string) (*os.File, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "criu image directory")
	}
	if st, err := f.Stat(); err != nil || !st.IsDir() {
		f.Close()
		return nil, errs.New(errs.InvalidArgument, "", "%s is not a directory", p)
	}
	return f, nil
}

func (d *dirs) close() {
	d.images.Close()
	if d.work != nil {
		d.work.Close()
	}
}

func (d *dirs) logPath(name string) string { return filepath.Join(d.logDir, name) }

func (d *dirs) fail(op, logName string, err error) error {
	p := d.logPath(logName)
	ex := LogExcerpt(p)
	if benign(err.Error()) {
		// CRIU reports its first error, which may be one it shrugged off;
		// the first one that mattered says more.
		for _, l := range ex {
			if strings.Contains(l, "Error") && !benign(l) {
				err = errors.New(errorText(l))
				break
			}
		}
	}
	return errs.Wrap(&Error{Op: op, Log: p, Excerpt: ex, Err: err}, errs.Internal, "", "")
}

// benignErrors are "Error" lines CRIU logs and then carries on from.
var benignErrors = []string{
	// Raising the fd limit needs CAP_SYS_RESOURCE, which some sandboxes
	// withhold; CRIU works on with the current limit.
	"Can't setup RLIMIT_NOFILE",
}

func benign(line string) bool {
	for _, b := range benignErrors {
		if strings.Contains(line, b) {
			return true
		}
	}
	return false
}

// errorText strips a CRIU log line's timestamp: "(00.03) Error (x.c:1): msg".
func errorText(line string) string {
	if i := strings.Index(line, "Error"); i >= 0 {
		return line[i:]
	}
	return line
}

// LogExcerpt returns the lines of a CRIU log around its first errors: for
// each of the first three lines mentioning "Error", two lines before and
// one after, without repeats. An unreadable log gives nil.
func LogExcerpt(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, strings.TrimSpace(sc.Text()))
	}
	var out []string
	next, found := 0, 0
	for i, l := range lines {
		if !strings.Contains(l, "Error") || benign(l) || i < next {
			continue
		}
		from := max(i-2, next)
		to := min(i+2, len(lines))
		out = append(out, lines[from:to]...)
		next = to
		if found++; found == 3 {
			break
		}
	}
	if len(out) == 0 && len(lines) > 0 {
		// No line says "Error": the end of the log is the next best clue.
		out = lines[max(0, len(lines)-3):]
	}
	return out
}

func lastLines(s string, n int) string {
	ls := strings.Split(s, "\n")
	return strings.Join(ls[max(0, len(ls)-n):], "; ")
}
