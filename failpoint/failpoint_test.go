package failpoint

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestInject(t *testing.T) {
	boom := errors.New("boom")
	var s Set
	ctx := With(context.Background(), &s)
	cases := []struct {
		name string
		arm  func()
		want error
	}{
		{"unarmed", func() {}, nil},
		{"armed", func() { s.On("p", Fail(boom)) }, boom},
		{"rearmed", func() { s.On("p", func(context.Context) error { return nil }) }, nil},
		{"disarmed", func() { s.On("p", Fail(boom)); s.Off("p") }, nil},
	}
	for i, c := range cases {
		c.arm()
		if err := Inject(ctx, "p"); err != c.want {
			t.Errorf("%s: Inject = %v, want %v", c.name, err, c.want)
		}
		if n := s.Hits("p"); n != i+1 {
			t.Errorf("%s: %d hits, want %d", c.name, n, i+1)
		}
	}
	if s.Hits("q") != 0 {
		t.Error("a point never reached has hits")
	}
}

// A Set reaches only the calls made under its context.
func TestSetsAreSeparate(t *testing.T) {
	boom := errors.New("boom")
	var a, b Set
	a.On("p", Fail(boom))
	if err := Inject(With(context.Background(), &b), "p"); err != nil {
		t.Errorf("another test's set fired: %v", err)
	}
	if err := Inject(context.Background(), "p"); err != nil {
		t.Errorf("no set in the context, yet: %v", err)
	}
	if a.Hits("p") != 0 || b.Hits("p") != 1 {
		t.Errorf("hits a=%d b=%d", a.Hits("p"), b.Hits("p"))
	}
}

func TestGate(t *testing.T) {
	var s Set
	g := NewGate()
	s.On("p", g.Hook)
	ctx := With(context.Background(), &s)
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- Inject(ctx, "p") }()
	}
	select {
	case <-g.Reached():
	case <-time.After(10 * time.Second):
		t.Fatal("the gate was never reached")
	}
	select {
	case err := <-done:
		t.Fatalf("a caller passed a closed gate: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	g.Release()
	g.Release() // twice is fine
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("released caller: %v", err)
		}
	}
	if err := Inject(ctx, "p"); err != nil {
		t.Errorf("after release: %v", err)
	}

	// A held caller whose context ends gives up with its cause.
	h := NewGate()
	s.On("q", h.Hook)
	cause := errors.New("request gone")
	cctx, cancel := context.WithCancelCause(ctx)
	go func() { <-h.Reached(); cancel(cause) }()
	if err := Inject(cctx, "q"); err != cause {
		t.Errorf("cancelled while held: %v, want %v", err, cause)
	}
}

// OnEvery decides at every point without a hook of its own, by name.
func TestOnEvery(t *testing.T) {
	boom, own := errors.New("boom"), errors.New("own")
	var s Set
	ctx := With(context.Background(), &s)
	var seen []string
	s.OnEvery(func(_ context.Context, name string) error {
		seen = append(seen, name)
		if name == "a" {
			return boom
		}
		return nil
	})
	s.On("b", Fail(own))
	for _, c := range []struct {
		name string
		want error
	}{{"a", boom}, {"b", own}, {"c", nil}} {
		if err := Inject(ctx, c.name); err != c.want {
			t.Errorf("Inject(%s) = %v, want %v", c.name, err, c.want)
		}
	}
	if strings.Join(seen, ",") != "a,c" {
		t.Errorf("OnEvery was asked for %v, want a and c (b has its own hook)", seen)
	}
}
