// Package jobckpt checkpoints a batch job whole: the GPU sessions of its
// program, preempted into their images by gpud, and the program's own
// process tree, dumped by CRIU, so that a job a scheduler requeues
// continues where it stopped instead of starting over. gpuctl job drives
// it for Slurm.
//
// The program runs as the init of a PID namespace of its own: CRIU
// restores a process under the PIDs it had, and only a fresh namespace
// guarantees they are free on whatever node the job comes back to (it
// also ignores the SIGTERM a scheduler sends every process of the job,
// which would otherwise kill it before it is dumped). It shares the
// caller's mount and network namespaces, so CRIU dumps only the process
// tree. Its stdin is /dev/null and its stdout and stderr are files in
// the job's directory, which only it writes (CRIU reopens them on
// restore and insists on the size they had); a follower copies them to
// the caller's own output as they grow.
//
// A checkpoint first preempts the sessions labelled with the job
// (gpud checkpoints the device side and, asked to drop the client, closes
// the program's connection), then dumps the program. gpuctl's client
// library, finding its session preempted, closes its socket and retries
// with a backoff of up to a second, so most of the time it holds no TCP
// connection; a dump that catches it in a try is repeated. Connections
// that are dumped anyway (CRIU --tcp-close) are restored closed, and the
// library reconnects and replays, as after any broken link.
package jobckpt

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

// Control is what a job needs of a gpud's control API (control.Client).
type Control interface {
	Sessions(ctx context.Context) ([]api.Session, error)
	Preempt(ctx context.Context, id string, req api.PreemptRequest) (*api.PreemptReply, error)
	Resume(ctx context.Context, id string, req api.ResumeRequest) (*api.ResumeReply, error)
}

// Config describes one job.
type Config struct {
	// Dir is the job's own directory, on storage every node that may run
	// the job sees at the same path: the program's output and the
	// checkpoint live there.
	Dir string
	// Argv is the program and its arguments; Env its whole environment
	// (the client library's settings included).
	Argv []string
	Env  []string
	// Control reaches the gpud the program's sessions run on; Selector
	// picks them out by their labels.
	Control  Control
	Selector api.Selector
	// Deadline bounds each session's preemption and, separately, the
	// dump of the program (0: 20 s).
	Deadline time.Duration
	// ResumeOn is the --api address of another gpud to resume the
	// sessions on; empty: where they were preempted.
	ResumeOn string
	// CRIU is the criu binary; empty: criubin's search.
	CRIU string
	// Stdout and Stderr receive the program's output.
	Stdout, Stderr io.Writer
	// Logf reports what the job does, one line each.
	Logf func(format string, args ...any)
}

// Files in a job's directory.
const (
	stdoutFile = "stdout"
	stderrFile = "stderr"
	stateFile  = "checkpoint.json"
	imageDir   = "image"
)

// State is what a checkpoint records beside the program's image.
type State struct {
	Argv []string `json:"argv"`
	// Sessions are the program's preempted sessions, Host the name of
	// the gpud that holds them.
	Sessions []string `json:"sessions"`
	Host     string   `json:"host,omitempty"`
	// Copied is how much of the program's stdout and stderr had been
	// copied out when it was dumped.
	StdoutCopied int64     `json:"stdout_copied"`
	StderrCopied int64     `json:"stderr_copied"`
	At           time.Time `json:"at"`
}

// ErrNoCheckpoint says a job's directory holds no checkpoint to restore.
var ErrNoCheckpoint = errors.New("no checkpoint")

// Job is a running program: started afresh or restored.
type Job struct {
	cfg  Config
	pid  int
	done chan struct{}
	// status is how the program ended, once done is closed.
	status int
	err    error

	out, errOut *follower

	mu      sync.Mutex
	dumping bool
}

func (c *Config) deadline() time.Duration {
	if c.Deadline <= 0 {
		return 20 * time.Second
	}
	return c.Deadline
}

func (c *Config) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// ReadState returns the checkpoint in dir, or ErrNoCheckpoint.
func ReadState(dir string) (*State, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoCheckpoint
	}
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "", "read the job's checkpoint")
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, errs.Wrap(err, errs.DataLoss, "", "%s is not a job checkpoint; remove %s to start the job over", filepath.Join(dir, stateFile), dir)
	}
	if _, err := os.Stat(filepath.Join(dir, imageDir)); err != nil {
		return nil, errs.Wrap(err, errs.DataLoss, "", "the job's checkpoint has no process image; remove %s to start the job over", dir)
	}
	return &st, nil
}

// Start runs the program afresh: any earlier checkpoint and output in
// Dir are removed.
func Start(ctx context.Context, cfg Config) (*Job, error) {
	if len(cfg.Argv) == 0 {
		return nil, errs.New(errs.InvalidArgument, "", "no program to run")
	}
	for _, f := range []string{stateFile, imageDir, imageDir + ".new", stdoutFile, stderrFile} {
		if err := os.RemoveAll(filepath.Join(cfg.Dir, f)); err != nil {
			return nil, errs.Wrap(err, errs.Internal, "", "clear the job directory")
		}
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "create the job directory %s", cfg.Dir)
	}
	path, err := exec.LookPath(cfg.Argv[0])
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "cannot run %s", cfg.Argv[0])
	}
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return nil, err
	}
	defer stdin.Close()
	stdout, err := openOutput(cfg.Dir, stdoutFile)
	if err != nil {
		return nil, err
	}
	defer stdout.Close()
	stderr, err := openOutput(cfg.Dir, stderrFile)
	if err != nil {
		return nil, err
	}
	defer stderr.Close()

	// Descriptors this process inherited without close-on-exec (from the
	// scheduler) would leak into the program and into its image.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	cmd := exec.Command(path, cfg.Argv[1:]...)
	cmd.Env = cfg.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// The init of a new PID namespace, leading its own session (CRIU
	// refuses a namespace init whose session leader is outside).
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Setsid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "start %s", cfg.Argv[0])
	}
	j := newJob(cfg, cmd.Process.Pid, 0, 0)
	go j.reap(cmd.Process)
	return j, nil
}

// Restore restores the program from the checkpoint in Dir and resumes
// its sessions; ErrNoCheckpoint when there is none.
func Restore(ctx context.Context, cfg Config) (*Job, error) {
	st, err := ReadState(cfg.Dir)
	if err != nil {
		return nil, err
	}
	if len(cfg.Argv) > 0 && !slices.Equal(cfg.Argv, st.Argv) {
		return nil, errs.New(errs.FailedPrecondition, "", "the checkpoint in %s is of %q, not %q; remove it to start the job over", cfg.Dir, st.Argv, cfg.Argv)
	}
	// The program first: a restore that fails leaves the sessions
	// preempted, where a later attempt finds them. Restored, it finds
	// its sessions preempted and waits until they are resumed.
	pid, err := restoreProgram(ctx, cfg.CRIU, filepath.Join(cfg.Dir, imageDir))
	if err != nil {
		return nil, errs.Wrap(err, errs.FailedPrecondition, "", "restore the job's program (same kernel, libraries and paths on this node?); the checkpoint stays in %s for another try", cfg.Dir)
	}
	j := newJob(cfg, pid, st.StdoutCopied, st.StderrCopied)
	proc, err := os.FindProcess(pid)
	if err != nil {
		return nil, err
	}
	go j.reap(proc)
	cfg.logf("restored %s (pid %d) from %s", st.Argv[0], pid, cfg.Dir)
	for _, id := range st.Sessions {
		res, err := cfg.Control.Resume(ctx, id, api.ResumeRequest{On: cfg.ResumeOn})
		switch {
		case err == nil:
			cfg.logf("resumed session %s on %s in %d ms", id, res.Host, res.DurationMS)
		case errs.IsFailedPrecondition(err) && !stillPreempted(ctx, cfg.Control, id):
			// Resumed already (by gpud, or by hand): the program
			// reconnects to it as it is.
			cfg.logf("session %s: %v", id, err)
		default:
			j.Kill()
			<-j.done
			j.stopOutput()
			return nil, errs.Wrap(err, errs.KindOf(err), "", "resume the job's session %s (the checkpoint stays in %s for another try)", id, cfg.Dir)
		}
	}
	return j, nil
}

// stillPreempted says whether gpud still lists session id as preempted
// (or cannot say), as opposed to running again.
func stillPreempted(ctx context.Context, cl Control, id string) bool {
	list, err := cl.Sessions(ctx)
	if err != nil {
		return true
	}
	for _, s := range list {
		if s.ID == id {
			return s.State == "preempted"
		}
	}
	return true
}

func newJob(cfg Config, pid int, outOff, errOff int64) *Job {
	j := &Job{cfg: cfg, pid: pid, done: make(chan struct{})}
	j.out = follow(filepath.Join(cfg.Dir, stdoutFile), outOff, cfg.Stdout)
	j.errOut = follow(filepath.Join(cfg.Dir, stderrFile), errOff, cfg.Stderr)
	return j
}

// reap waits for the program and records how it ended.
func (j *Job) reap(p *os.Process) {
	ps, err := p.Wait()
	if err != nil {
		j.status, j.err = -1, err
	} else {
		j.status = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			j.status = 128 + int(ws.Signal())
		}
	}
	close(j.done)
}

// PID is the program's process id (the init of its PID namespace).
func (j *Job) PID() int { return j.pid }

// Done is closed when the program has ended (or was dumped).
func (j *Job) Done() <-chan struct{} { return j.done }

// Finish waits for the program, copies the rest of its output, removes
// the job's checkpoint and output files and returns its exit status
// (128+N for a signal N).
func (j *Job) Finish() (int, error) {
	<-j.done
	j.stopOutput()
	if j.err != nil {
		return j.status, j.err
	}
	if err := os.RemoveAll(j.cfg.Dir); err != nil {
		j.cfg.logf("could not remove %s: %v", j.cfg.Dir, err)
	}
	return j.status, nil
}

// Kill ends the program (SIGKILL).
func (j *Job) Kill() {
	select {
	case <-j.done:
	default:
		_ = syscall.Kill(j.pid, syscall.SIGKILL)
	}
}

func (j *Job) stopOutput() {
	j.out.stop()
	j.errOut.stop()
}

// Checkpoint preempts the program's sessions and dumps the program into
// the job's directory; the program is gone afterwards. On failure the
// program keeps running (its sessions too, when their preemption failed)
// and the caller decides its fate.
func (j *Job) Checkpoint(ctx context.Context) (*State, error) {
	cfg := j.cfg
	st := &State{Argv: cfg.Argv, Sessions: []string{}}
	list, err := cfg.Control.Sessions(ctx)
	if err != nil {
		return nil, errs.Wrap(err, errs.KindOf(err), "", "list the job's sessions")
	}
	for _, s := range list {
		if !cfg.Selector.Matches(s.Labels) {
			continue
		}
		switch s.State {
		case "running", "detached":
			res, err := cfg.Control.Preempt(ctx, s.ID, api.PreemptRequest{DeadlineMS: cfg.deadline().Milliseconds(), DropClient: true})
			if err != nil {
				return nil, errs.Wrap(err, errs.KindOf(err), "", "preempt the job's session %s", s.ID)
			}
			cfg.logf("preempted session %s into %s (stalled %d ms, %d MiB of device memory given back)", s.ID, res.Image, res.StallMS, res.MemBytes>>20)
		case "preempted":
			cfg.logf("session %s was preempted already", s.ID)
		default:
			continue
		}
		st.Sessions = append(st.Sessions, s.ID)
		st.Host = s.Host
	}
	if err := j.dump(ctx); err != nil {
		// The program runs on: give it its sessions back, so that it
		// either finishes or, killed, leaves nothing preempted behind.
		for _, id := range st.Sessions {
			if _, rerr := cfg.Control.Resume(context.WithoutCancel(ctx), id, api.ResumeRequest{}); rerr != nil {
				cfg.logf("session %s stays preempted: %v", id, rerr)
			}
		}
		return nil, err
	}
	j.stopOutput()
	st.StdoutCopied, st.StderrCopied = j.out.offset(), j.errOut.offset()
	st.At = time.Now().UTC()
	if err := writeState(cfg.Dir, st); err != nil {
		return nil, err
	}
	cfg.logf("checkpointed %s (%d session(s)) into %s", cfg.Argv[0], len(st.Sessions), cfg.Dir)
	return st, nil
}

// dump dumps the program with CRIU, which kills it, and waits until it is
// reaped. A dump that fails while the program lives (it was caught
// holding a connection CRIU cannot dump) is tried again until the
// deadline.
func (j *Job) dump(ctx context.Context) error {
	cfg := j.cfg
	ctx, cancel := context.WithTimeout(ctx, cfg.deadline())
	defer cancel()
	next := filepath.Join(cfg.Dir, imageDir+".new")
	var last error
	for attempt := 1; ; attempt++ {
		if err := os.RemoveAll(next); err != nil {
			return errs.Wrap(err, errs.Internal, "", "clear %s", next)
		}
		if err := os.MkdirAll(next, 0o700); err != nil {
			return errs.Wrap(err, errs.Internal, "", "create %s", next)
		}
		select {
		case <-j.done:
			return errs.New(errs.FailedPrecondition, "", "the program ended (status %d) before it was checkpointed", j.status)
		default:
		}
		err := dumpProgram(ctx, cfg.CRIU, j.pid, next)
		if err == nil {
			if attempt > 1 {
				cfg.logf("dumped the program at attempt %d (before: %v)", attempt, last)
			}
			break
		}
		last = err
		select {
		case <-ctx.Done():
			return errs.Wrap(last, errs.Unavailable, "", "could not dump the program within %v (%d attempts); it keeps running", cfg.deadline(), attempt)
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
		return errs.New(errs.Internal, "", "the program %d outlived its dump", j.pid)
	}
	dst := filepath.Join(cfg.Dir, imageDir)
	if err := os.RemoveAll(dst); err != nil {
		return errs.Wrap(err, errs.Internal, "", "replace %s", dst)
	}
	if err := os.Rename(next, dst); err != nil {
		return errs.Wrap(err, errs.Internal, "", "keep the program's image")
	}
	return nil
}

func writeState(dir string, st *State) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return errs.Wrap(err, errs.Internal, "", "write the job's checkpoint")
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return errs.Wrap(err, errs.Internal, "", "write the job's checkpoint")
	}
	// On shared storage the next run may be on another node: the record
	// must be complete before the job gives up its allocation.
	if err := f.Sync(); err != nil {
		f.Close()
		return errs.Wrap(err, errs.Internal, "", "write the job's checkpoint")
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

func openOutput(dir, name string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, name), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, errs.Wrap(err, errs.Internal, "", "create the program's %s", name)
	}
	return f, nil
}

// follower copies what is appended to a file to w, from an offset on.
type follower struct {
	path string
	w    io.Writer
	quit chan struct{}
	done chan struct{}
	once sync.Once

	mu  sync.Mutex
	off int64
}

func follow(path string, off int64, w io.Writer) *follower {
	f := &follower{path: path, w: w, off: off, quit: make(chan struct{}), done: make(chan struct{})}
	if w == nil {
		f.w = io.Discard
	}
	go f.run()
	return f
}

func (f *follower) run() {
	defer close(f.done)
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		f.copyNew()
		select {
		case <-f.quit:
			f.copyNew()
			return
		case <-t.C:
		}
	}
}

func (f *follower) copyNew() {
	file, err := os.Open(f.path)
	if err != nil {
		return
	}
	defer file.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	n, _ := io.Copy(f.w, io.NewSectionReader(file, f.off, 1<<62))
	f.off += n
}

// stop copies what is left and stops following.
func (f *follower) stop() {
	f.once.Do(func() { close(f.quit) })
	<-f.done
}

func (f *follower) offset() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.off
}
