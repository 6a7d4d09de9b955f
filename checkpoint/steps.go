package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/failpoint"
)

// Step is one named stage of a pipeline with the action that undoes it.
type Step struct {
	Name string
	Do   func(ctx context.Context) error
	// Undo reverts a completed Do; nil when there is nothing to revert.
	Undo func(ctx context.Context) error
	// Skip, when set, is asked as the step comes up: true passes over
	// it (no Do, no timing, nothing to undo), because an earlier step
	// made it needless.
	Skip func() bool
}

// Timing is how long one step took.
type Timing struct {
	Step     string
	Duration time.Duration
}

// StepTimings are timings as the API reports them; nil stays nil.
func StepTimings(ts []Timing) []api.StepTiming {
	if ts == nil {
		return nil
	}
	out := make([]api.StepTiming, len(ts))
	for i, t := range ts {
		out[i] = api.StepTiming{Step: t.Step, Duration: t.Duration}
	}
	return out
}

// StepError is a pipeline that failed at one step. The steps before it
// were undone in reverse order; undo failures are listed, because each
// one means the session may not be back where it was.
type StepError struct {
	Pipeline string // "checkpoint", "restore", "migrate"
	Step     string
	Subject  string // e.g. `session "s-1"`
	Err      error
	Undo     []error
}

func (e *StepError) Error() string {
	var b strings.Builder
	if e.Subject != "" {
		b.WriteString(e.Subject + ": ")
	}
	fmt.Fprintf(&b, "%s failed at step %q: %v", e.Pipeline, e.Step, e.Err)
	for _, u := range e.Undo {
		fmt.Fprintf(&b, "; and undoing it: %v", u)
	}
	return b.String()
}

func (e *StepError) Unwrap() error { return e.Err }

// undoTimeout bounds each undo action. Undo runs on a context detached
// from the caller's, so that a cancelled request still rolls back.
const undoTimeout = 60 * time.Second

// Run runs steps in order. When one fails, the completed steps are undone
// in reverse order and a *StepError, classified with the failing step's
// error kind, is returned. Each step starts at the failpoint
// "<pipeline>/<step>", where a test can make it fail or hold it.
func Run(ctx context.Context, log *slog.Logger, pipeline, subject string, steps []Step) ([]Timing, error) {
	if log == nil {
		log = slog.Default()
	}
	timings := make([]Timing, 0, len(steps))
	done := make([]Step, 0, len(steps))
	for _, s := range steps {
		if s.Skip != nil && s.Skip() {
			continue
		}
		t0 := time.Now()
		err := ctx.Err()
		if err == nil {
			err = failpoint.Inject(ctx, pipeline+"/"+s.Name)
		}
		if err == nil {
			err = s.Do(ctx)
		}
		timings = append(timings, Timing{Step: s.Name, Duration: time.Since(t0)})
		if err == nil {
			log.Debug("step done", "pipeline", pipeline, "subject", subject, "step", s.Name, "took", time.Since(t0))
			done = append(done, s)
			continue
		}
		se := &StepError{Pipeline: pipeline, Step: s.Name, Subject: subject, Err: err}
		se.Undo = Undo(ctx, log, pipeline, subject, done)
		log.Warn("step failed; rolled back", "pipeline", pipeline, "subject", subject, "step", s.Name, "err", err, "undo_errors", len(se.Undo))
		kind := errs.KindOf(err)
		if kind == errs.Unknown {
			kind = errs.Internal
		}
		return timings, &errs.Error{Kind: kind, Err: se}
	}
	return timings, nil
}

// Undo reverts completed steps in reverse order and returns what failed.
func Undo(ctx context.Context, log *slog.Logger, pipeline, subject string, done []Step) []error {
	if log == nil {
		log = slog.Default()
	}
	var failed []error
	base := context.WithoutCancel(ctx)
	for j := len(done) - 1; j >= 0; j-- {
		u := done[j]
		if u.Undo == nil {
			continue
		}
		uctx, cancel := context.WithTimeout(base, undoTimeout)
		if err := u.Undo(uctx); err != nil {
			failed = append(failed, fmt.Errorf("undo %q: %w", u.Name, err))
			log.Error("undo failed", "pipeline", pipeline, "subject", subject, "step", u.Name, "err", err)
		}
		cancel()
	}
	return failed
}

// FailedStep returns the step a pipeline error names, or "".
func FailedStep(err error) string {
	var se *StepError
	if errors.As(err, &se) {
		return se.Step
	}
	return ""
}
