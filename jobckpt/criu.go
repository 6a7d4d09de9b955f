package jobckpt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
	"github.com/gpuctl/gpuctl/errs"
)

// CRIU runs here through its command line rather than its RPC mode
// (package criu), so that gpuctl links no protobuf codec; the binary is
// the one gpud would use (criubin.Find).
//
// A client process shares the caller's mount namespace, so none of the
// external-mount options a worker's dump needs apply. Its connection to
// gpud, if it holds one at that moment, is dumped without state and
// restored closed (--tcp-close), which the client library treats as a
// broken link.

// Log files, in the image directory.
const (
	dumpLog    = "dump.log"
	restoreLog = "restore.log"
	restorePID = "restored.pid"
)

// dumpProgram dumps the tree rooted at pid into dir, which exists, and
// kills it.
func dumpProgram(ctx context.Context, bin string, pid int, dir string) error {
	return runCRIU(ctx, bin, "dump", dir, dumpLog,
		"dump", "-t", strconv.Itoa(pid), "-D", dir, "-o", dumpLog, "-v4", "--tcp-close")
}

// restoreProgram restores the tree dumped in dir as a child of this
// process (--restore-sibling), leaves it running, and returns its PID.
func restoreProgram(ctx context.Context, bin, dir string) (int, error) {
	pidFile := filepath.Join(dir, restorePID)
	_ = os.Remove(pidFile)
	err := runCRIU(ctx, bin, "restore", dir, restoreLog,
		"restore", "-D", dir, "-o", restoreLog, "-v4", "--tcp-close",
		"--restore-sibling", "--restore-detached", "--pidfile", pidFile)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, errs.Wrap(err, errs.Internal, "", "criu restore left no pid file")
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, errs.New(errs.Internal, "", "criu restore wrote pid %q", strings.TrimSpace(string(b)))
	}
	return pid, nil
}

func runCRIU(ctx context.Context, bin, op, dir, log string, args ...string) error {
	path, err := criubin.Find(bin)
	if err != nil {
		return err
	}
	if op == "dump" {
		// A dump that stops writing its log and images is stuck: the
		// watchdog kills CRIU, which lets the program go on (package
		// criubin, Watch).
		wctx, stop := criubin.Watch(ctx, op, filepath.Join(dir, log), dir, criubin.DefaultStall, time.Second)
		defer stop()
		ctx = wctx
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = criubin.Env()
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	if st := criubin.Stalled(ctx, nil); st != nil {
		return fmt.Errorf("%w; log %s", st, filepath.Join(dir, log))
	}
	msg := logErrors(filepath.Join(dir, log))
	if msg == "" {
		msg = strings.TrimSpace(string(out))
	}
	return fmt.Errorf("criu %s: %w; log %s: %s", op, err, filepath.Join(dir, log), msg)
}

// logErrors returns the first error lines of a CRIU log, joined.
func logErrors(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		// "(00.085618) Error (criu/sockets.c:628): sockets: ..."
		if _, rest, ok := strings.Cut(l, ") Error ("); ok && len(lines) < 4 {
			// Not worth quoting: CRIU lowers its own rlimit when it can.
			if strings.Contains(rest, "RLIMIT_NOFILE") {
				continue
			}
			lines = append(lines, strings.TrimSpace(l[strings.Index(l, "Error"):]))
		}
	}
	return strings.Join(lines, " | ")
}
