package backend

import "context"

// ContextTrimmer is a backend whose contexts hold device memory of their
// own that keeps nothing between launches: on the cuda backend, the stack
// the driver reserves for every thread the GPU can run (1 KiB each by
// default, about 260 MiB of an H200), which the driver's checkpoint copies
// into the process and CRIU then dumps. The worker trims it once its
// memory is saved and released, and untrims it when the memory is backed
// again (after a checkpoint that leaves the session running, or after a
// restore), before the session's next launch.
//
// Trimming is a saving, never a requirement: a failure to trim is logged
// and the checkpoint goes on. What the program set (or the default) is
// what it reads back afterwards; only the driver's reservation changes in
// between. Calls come from the worker's call thread while the session is
// quiesced.
type ContextTrimmer interface {
	// TrimContexts drops every context's reservations to the least the
	// driver allows, remembering their values. Trimming twice keeps the
	// first values.
	TrimContexts(ctx context.Context) error
	// UntrimContexts sets back what TrimContexts remembered; with nothing
	// remembered it does nothing.
	UntrimContexts(ctx context.Context) error
}
