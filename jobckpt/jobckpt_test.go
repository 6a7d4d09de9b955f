package jobckpt

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
)

func TestReadState(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(dir string)
		check func(err error) bool
		want  string
	}{
		{"empty directory", func(string) {}, func(err error) bool { return errors.Is(err, ErrNoCheckpoint) }, "no checkpoint"},
		{"not JSON", func(dir string) {
			os.WriteFile(filepath.Join(dir, stateFile), []byte("{"), 0o600)
			os.Mkdir(filepath.Join(dir, imageDir), 0o700)
		}, func(err error) bool { return errs.Is(err, errs.DataLoss) }, "not a job checkpoint"},
		{"no image", func(dir string) {
			os.WriteFile(filepath.Join(dir, stateFile), []byte(`{"argv":["x"]}`), 0o600)
		}, func(err error) bool { return errs.Is(err, errs.DataLoss) }, "no process image"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			tc.setup(dir)
			_, err := ReadState(dir)
			if !tc.check(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ReadState: %v, want %q", err, tc.want)
			}
		})
	}

	dir := t.TempDir()
	want := &State{Argv: []string{"/bin/prog", "1"}, Sessions: []string{"s-0123456789ab"}, Host: "a", StdoutCopied: 12, StderrCopied: 3, At: time.Now().UTC().Round(0)}
	if err := writeState(dir, want); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, imageDir), 0o700)
	got, err := ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.StdoutCopied != 12 || got.StderrCopied != 3 || got.Sessions[0] != want.Sessions[0] || !got.At.Equal(want.At) || got.Argv[1] != "1" {
		t.Errorf("ReadState after writeState: %+v, want %+v", got, want)
	}
}

// A restore of another program's checkpoint is refused before CRIU runs.
func TestRestoreOtherProgram(t *testing.T) {
	dir := t.TempDir()
	if err := writeState(dir, &State{Argv: []string{"/bin/a"}}); err != nil {
		t.Fatal(err)
	}
	os.Mkdir(filepath.Join(dir, imageDir), 0o700)
	_, err := Restore(context.Background(), Config{Dir: dir, Argv: []string{"/bin/b"}})
	if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "remove it to start the job over") {
		t.Errorf("Restore of another program's checkpoint: %v", err)
	}
}

func TestStartBadProgram(t *testing.T) {
	_, err := Start(context.Background(), Config{Dir: t.TempDir(), Argv: []string{"/nonexistent/prog"}})
	if !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "/nonexistent/prog") {
		t.Errorf("Start of a missing program: %v", err)
	}
	if _, err := Start(context.Background(), Config{Dir: t.TempDir()}); !errs.IsInvalidArgument(err) {
		t.Errorf("Start without a program: %v", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The follower copies what is appended from its offset on (what an
// earlier run copied is not copied again), and stop copies the rest.
func TestFollower(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out")
	os.WriteFile(path, []byte("first run\n"), 0o600)
	var out syncBuffer
	f := follow(path, int64(len("first run\n")), &out)
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	fh.WriteString("a\n")
	deadline := time.Now().Add(5 * time.Second)
	for out.String() != "a\n" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	fh.WriteString("b\n")
	f.stop()
	if got := out.String(); got != "a\nb\n" {
		t.Errorf("followed %q, want %q", got, "a\nb\n")
	}
	if got := f.offset(); got != int64(len("first run\na\nb\n")) {
		t.Errorf("offset %d", got)
	}
}

func TestLogErrors(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dump.log")
	os.WriteFile(path, []byte(`(00.076054) Error (criu/util.c:1533): rlimit: Can't setup RLIMIT_NOFILE for self: Operation not permitted
(00.084777) Warn  (compel/arch/x86/src/lib/infect.c:418): Will restore 11094 with interrupted system call
(00.085618) Error (criu/sockets.c:628): sockets: Can't get 1:16 opt: Operation not supported
(00.090789) Error (criu/cr-dump.c:2111): Dumping FAILED.
`), 0o600)
	want := "Error (criu/sockets.c:628): sockets: Can't get 1:16 opt: Operation not supported | Error (criu/cr-dump.c:2111): Dumping FAILED."
	if got := logErrors(path); got != want {
		t.Errorf("logErrors:\n got %q\nwant %q", got, want)
	}
	if got := logErrors(filepath.Join(t.TempDir(), "none")); got != "" {
		t.Errorf("logErrors of no file: %q", got)
	}
}
