package main

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/failpoint"
)

// failpointsEnv names a file that arms failpoints (package failpoint) in
// the control API's requests: the end-to-end tests stop a real gpud at an
// exact step of a migration or restore to kill it or cut its network
// there. Unset, as in production, nothing is armed.
//
// Each line of the file is "POINT ACTION"; the file is read each time a
// point is reached, so a test re-arms a running gpud by rewriting it:
//
//	fail  the point returns an error (as a failed step does)
//	kill  gpud SIGKILLs itself there, as a crash at that step would
//	hold  gpud logs "failpoint held" and waits there until the line no
//	      longer says hold (or the request ends)
const failpointsEnv = "GPUD_FAILPOINTS"

// failpoints is the Set that GPUD_FAILPOINTS arms; nil when unset.
func failpoints(log *slog.Logger) *failpoint.Set {
	path := os.Getenv(failpointsEnv)
	if path == "" {
		return nil
	}
	log.Warn("failpoints armed from a file: a test knob, never for production", "env", failpointsEnv, "file", path)
	s := &failpoint.Set{}
	s.OnEvery(func(ctx context.Context, name string) error {
		switch failpointAction(path, name) {
		case "fail":
			log.Warn("failpoint: failing", "point", name)
			return errs.New(errs.Unavailable, "", "failpoint %s", name)
		case "kill":
			log.Warn("failpoint: killing gpud", "point", name)
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // SIGKILL cannot be caught; this never returns
		case "hold":
			log.Warn("failpoint held", "point", name)
			for failpointAction(path, name) == "hold" {
				select {
				case <-ctx.Done():
					return context.Cause(ctx)
				case <-time.After(20 * time.Millisecond):
				}
			}
			log.Warn("failpoint released", "point", name)
		}
		return nil
	})
	return s
}

// failpointAction is the action the file at path arms name with, or "".
func failpointAction(path, name string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 2 && string(f[0]) == name {
			return string(f[1])
		}
	}
	return ""
}

// withFailpoints hands s to every request's context; next as is when s is
// nil.
func withFailpoints(s *failpoint.Set, next http.Handler) http.Handler {
	if s == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(failpoint.With(r.Context(), s)))
	})
}
