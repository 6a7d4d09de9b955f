// Package criu drives CRIU through its swrk RPC mode (go-criu's protocol
// messages over a private socketpair): dump a process tree into an image
// directory, restore it, and ask CRIU for its version. Finding the binary
// and checking the kernel are package criubin's, which callers that only
// inspect an installation (gpuctl doctor) use without this package.
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
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/checkpoint-restore/go-criu/v7/rpc"
	"google.golang.org/protobuf/proto"

	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
	"github.com/gpuctl/gpuctl/errs"
)

// Log file names, inside Options.LogDir or the image directory.
const (
	DumpLog    = "dump.log"
	PreDumpLog = "pre-dump.log"
	RestoreLog = "restore.log"
)

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

func binary(o Options) (string, error) { return criubin.Find(o.Binary) }

// GetVersion asks CRIU for its version over RPC, which also proves that
// its swrk mode works; criubin.VersionOf asks the command line instead.
func GetVersion(ctx context.Context, bin string) (criubin.Version, error) {
	if bin == "" {
		var err error
		if bin, err = criubin.Find(""); err != nil {
			return criubin.Version{}, err
		}
	}
	resp, err := call(ctx, bin, &rpc.CriuReq{Type: rpc.CriuReqType_VERSION.Enum()})
	if err != nil {
		return criubin.Version{}, errs.Wrap(err, errs.FailedPrecondition, "", "criu version (%s)", bin)
	}
	v := resp.GetVersion()
	return criubin.Version{
		Major:    int(v.GetMajorNumber()),
		Minor:    int(v.GetMinorNumber()),
		Sublevel: int(v.GetSublevel()),
		GitID:    v.GetGitid(),
	}, nil
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
	wctx, stop := criubin.Watch(ctx, op, dirs.logPath(logName), dir, o.stall(), time.Second)
	defer stop()
	if _, err := call(wctx, bin, &rpc.CriuReq{Type: typ.Enum(), Opts: opts}); err != nil {
		return dirs.fail(op, logName, criubin.Stalled(wctx, err))
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
	// A restore that stops making progress is ended like a dump: its
	// log and what CRIU's processes read (the images) stand still.
	var pgid atomic.Int64
	logPath := dirs.logPath(RestoreLog)
	wctx, stop := criubin.WatchProgress(ctx, "restore", logPath, func() int64 {
		return criubin.FileSize(logPath) + criubin.GroupIO(int(pgid.Load()))
	}, o.stall(), time.Second)
	defer stop()
	// Only tasks started from here on can be what the restore put back.
	since := bootTicks()
	resp, err := callStarted(wctx, bin, &rpc.CriuReq{Type: rpc.CriuReqType_RESTORE.Enum(), Opts: opts}, func(pid int) { pgid.Store(int64(pid)) })
	if err != nil {
		err = criubin.Stalled(wctx, err)
		var st *criubin.ErrStalled
		if o.Stray != nil && errors.As(err, &st) {
			// CRIU is gone; what it had put back runs its own code.
			if killed := killNewChildren(since, o.Stray); len(killed) > 0 {
				err = fmt.Errorf("%w; the tasks it had put back (pids %v) were killed", err, killed)
			} else {
				// CRIU may have killed them itself before it stood still.
				err = fmt.Errorf("%w; no task it had put back was left running", err)
			}
		}
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

// userHZ is the unit of a process's start time in /proc/PID/stat: fixed
// at 100 a second by the kernel's ABI.
const userHZ = 100

// bootTicks is the time since boot in /proc/PID/stat's start-time unit.
func bootTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return uint64(ts.Sec)*userHZ + uint64(ts.Nsec)/(1e9/userHZ)
}

// children lists this process's live children and their start times.
// Only a stalled restore reads it, so the normal path pays nothing.
func children() map[int]uint64 {
	out := map[int]uint64{}
	self := strconv.Itoa(os.Getpid())
	es, err := os.ReadDir("/proc")
	if err != nil {
		return out
	}
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// PID (COMM) STATE PPID ... STARTTIME (the 22nd field): COMM may
		// hold anything, so the fields are taken after its last
		// parenthesis, where STATE is the first.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 20 || f[0] == "Z" || f[1] != self {
			continue
		}
		start, err := strconv.ParseUint(f[19], 10, 64)
		if err == nil {
			out[pid] = start
		}
	}
	return out
}

// killNewChildren kills and reaps the live children of this process that
// started at or after since (bootTicks) and whose command line match
// accepts, and returns their PIDs.
func killNewChildren(since uint64, match func(args []string) bool) []int {
	var killed []int
	for pid, start := range children() {
		if start+1 < since { // a tick's rounding either way
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		if err != nil || !match(strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			_, _ = syscall.Wait4(pid, nil, 0, nil)
			killed = append(killed, pid)
		}
	}
	return killed
}
