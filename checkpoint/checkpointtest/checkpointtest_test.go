package checkpointtest

import (
	"context"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

// The table refuses calls out of the state machine's order, so the
// services' tests notice when they are made out of order.
func TestSessionsOrder(t *testing.T) {
	ctx := context.Background()
	type call func(*Sessions) error
	begin := func(s *Sessions) error { _, err := s.Begin(ctx, "s-1"); return err }
	dumped := func(s *Sessions) error { return s.Dumped("s-1") }
	migrating := func(s *Sessions) error { return s.Migrating("s-1") }
	released := func(s *Sessions) error { return s.Released("s-1") }
	adopt := func(s *Sessions) error { return s.Adopt(ctx, "s-1", Worker{Pid: 1}, "img-1") }
	cases := []struct {
		name  string
		calls []call
		want  string // the state after the last call
		kind  errs.Kind
	}{
		{"checkpoint", []call{begin, dumped}, "checkpointing", ""},
		{"migration", []call{begin, dumped, migrating, released}, "stopped", ""},
		{"dumped before begin", []call{dumped}, "running", errs.FailedPrecondition},
		{"migrating before dumped", []call{begin, migrating}, "quiescing", errs.FailedPrecondition},
		{"begin twice", []call{begin, begin}, "quiescing", errs.FailedPrecondition},
		{"adopt a live session", []call{adopt}, "running", errs.AlreadyExists},
		{"adopt a released one", []call{released, adopt}, "detached", ""},
	}
	for _, c := range cases {
		s := NewSessions()
		s.Add("s-1", Worker{Pid: 1}, "")
		var err error
		for _, f := range c.calls {
			err = f(s)
		}
		var kind errs.Kind
		if err != nil {
			kind = errs.KindOf(err)
		}
		if kind != c.kind {
			t.Errorf("%s: %v, want kind %q", c.name, err, c.kind)
		}
		if got := s.State("s-1"); got != c.want {
			t.Errorf("%s: state %q, want %q", c.name, got, c.want)
		}
	}
}
