package criubin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A CRIU dump that waits for something that never comes holds its tasks
// stopped for good: the worker of a session being checkpointed stays
// frozen, its client stalled, with no error anywhere (a dump waiting for
// a breakpoint trap that a virtual machine never raised did exactly
// that). CRIU at log level 4 writes its log and its images as it goes, so
// a call whose log and image files have not grown for a while is stuck,
// not slow: the watchdog ends it (the call kills CRIU's process group,
// which lets its tasks go) and the step fails with ErrStalled, which the
// pipelines roll back like any failed dump (package criu's dumps, and
// gpuctl job's, watch themselves this way). A restore writes no images,
// and reading a large one can leave its log quiet: it is watched through
// its log and what CRIU's processes read and write (GroupIO).

// DefaultStall is how long a CRIU dump may go without writing to its log
// or its images before it is taken for stuck.
const DefaultStall = 60 * time.Second

// ErrStalled is a CRIU call the watchdog ended.
type ErrStalled struct {
	Op    string
	For   time.Duration
	Where string // the log's last line
}

func (e *ErrStalled) Error() string {
	if e.Op == "restore" {
		// CRIU's processes are killed; a task it had put back by then
		// runs its own code again, detached from everything.
		return fmt.Sprintf("criu restore made no progress for %s and was stopped (its log ends: %q); the restore failed", e.For, e.Where)
	}
	return fmt.Sprintf("criu %s made no progress for %s and was stopped (its log ends: %q); the tasks were let go", e.Op, e.For, e.Where)
}

// Watch returns a context that is cancelled with an *ErrStalled cause
// once neither the log at logPath nor the files in imagesDir have grown
// for stall, checked every tick; stop ends the watch.
func Watch(ctx context.Context, op, logPath, imagesDir string, stall, tick time.Duration) (context.Context, func()) {
	return WatchProgress(ctx, op, logPath, func() int64 { return progress(logPath, imagesDir) }, stall, tick)
}

// WatchProgress is Watch with the measure of progress given: the call is
// stuck once progress has returned the same value for stall. logPath
// only names where the call stopped.
func WatchProgress(ctx context.Context, op, logPath string, progress func() int64, stall, tick time.Duration) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		last, since := progress(), time.Now()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if p := progress(); p != last {
				last, since = p, time.Now()
				continue
			}
			if d := time.Since(since); d >= stall {
				cancel(&ErrStalled{Op: op, For: d.Round(time.Second), Where: lastLogLine(logPath)})
				return
			}
		}
	}()
	return wctx, func() {
		close(done)
		cancel(nil)
	}
}

// GroupIO is what the processes of process group pgid have read and
// written (rchar and wchar of /proc/PID/io, summed): a restore reads its
// images in CRIU's processes while its log can stay quiet.
func GroupIO(pgid int) int64 {
	if pgid <= 0 {
		return 0
	}
	es, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	var n int64
	for _, e := range es {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err != nil || g != pgid {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "io"))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, ok := strings.Cut(line, ": ")
			if ok && (k == "rchar" || k == "wchar") {
				x, _ := strconv.ParseInt(v, 10, 64)
				n += x
			}
		}
	}
	return n
}

// FileSize is the size of the file at p, or 0.
func FileSize(p string) int64 {
	if st, err := os.Stat(p); err == nil {
		return st.Size()
	}
	return 0
}

// progress is how much CRIU has written: its log's size and the sizes of
// the files in its image directory.
func progress(logPath, imagesDir string) int64 {
	var n int64
	if st, err := os.Stat(logPath); err == nil {
		n += st.Size()
	}
	es, _ := os.ReadDir(imagesDir)
	for _, e := range es {
		if info, err := e.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
	}
	return n
}

// lastLogLine returns the last non-empty line of the log, clipped.
func lastLogLine(p string) string {
	f, err := os.Open(filepath.Clean(p))
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	const tail = 4096
	off := max(0, st.Size()-tail)
	b := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(b, off)
	b = b[:n]
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == '\n' {
			b = b[i+1:]
			break
		}
	}
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}

// Stalled is err, or the watchdog's *ErrStalled when it ended the call
// that ctx (Watch's) governed.
func Stalled(ctx context.Context, err error) error {
	var st *ErrStalled
	if errors.As(context.Cause(ctx), &st) {
		return st
	}
	return err
}
