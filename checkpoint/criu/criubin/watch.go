package criubin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
// gpuctl job's, watch themselves this way). Restores are not watched: a
// restore writes no images, and reading a large one can leave its log
// quiet for longer than any fixed bound.

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
	return fmt.Sprintf("criu %s made no progress for %s and was stopped (its log ends: %q); the tasks were let go", e.Op, e.For, e.Where)
}

// Watch returns a context that is cancelled with an *ErrStalled cause
// once neither the log at logPath nor the files in imagesDir have grown
// for stall, checked every tick; stop ends the watch.
func Watch(ctx context.Context, op, logPath, imagesDir string, stall, tick time.Duration) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		last, since := progress(logPath, imagesDir), time.Now()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if p := progress(logPath, imagesDir); p != last {
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
