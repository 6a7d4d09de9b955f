package checkpointtest

import (
	"context"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/tenant"
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
	adopt := func(s *Sessions) error { return s.Adopt(ctx, "s-1", Worker{Pid: 1}, "img-1", "") }
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

// A tenant is let at its own sessions only, and is told of another's
// what it would be told of one the table does not have.
func TestSessionsOwners(t *testing.T) {
	s := NewSessions()
	s.Add("s-1", Worker{Pid: 1}, "")
	s.Own("s-1", "alice")
	as := func(who string) context.Context {
		if who == "" {
			return tenant.NewContext(context.Background(), tenant.Admin())
		}
		return tenant.NewContext(context.Background(), tenant.Principal{Tenant: who})
	}
	missing := s.Authorize(as("alice"), "s-2")
	if !errs.IsNotFound(missing) {
		t.Fatalf("a session the table does not have: %v", missing)
	}
	for who, ok := range map[string]bool{"alice": true, "": true, "bob": false} {
		err := s.Authorize(as(who), "s-1")
		if ok != (err == nil) {
			t.Errorf("%q at alice's session: %v", who, err)
		}
		if !ok && (!errs.IsNotFound(err) || strings.ReplaceAll(err.Error(), "s-1", "s-2") != missing.Error()) {
			t.Errorf("%q at alice's session: %v; at a missing one: %v", who, err, missing)
		}
	}
	if err := s.Adopt(context.Background(), "s-3", Worker{Pid: 3}, "img-3", "bob"); err != nil || s.Owner("s-3") != "bob" {
		t.Errorf("adopted session: %v, owner %q", err, s.Owner("s-3"))
	}
}
