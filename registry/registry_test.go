package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/registry/registrytest"
)

func TestHostsUpAndDown(t *testing.T) {
	ep := registrytest.Start(t)
	r := registrytest.Dial(t, ep)
	ctx := context.Background()

	var free atomic.Uint64
	free.Store(1 << 30)
	join := func(name string) (*registry.Member, context.CancelFunc) {
		m, err := r.Join(ctx, registry.Host{Name: name, API: name + ":7071", Backend: "emulated"}, 2*time.Second,
			func(context.Context) registry.Host { return registry.Host{MemFreeBytes: free.Load(), Sessions: 1} })
		if err != nil {
			t.Fatal(err)
		}
		mctx, cancel := context.WithCancel(ctx)
		go m.Run(mctx)
		return m, cancel
	}
	_, stopA := join("a")
	_, stopB := join("b")
	defer stopB()

	state := func() map[string]registry.Host {
		hs, err := r.Hosts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]registry.Host{}
		for _, h := range hs {
			out[h.Name] = h
		}
		return out
	}
	hs := state()
	if hs["a"].State != registry.StateUp || hs["b"].State != registry.StateUp || hs["a"].MemFreeBytes != 1<<30 || hs["a"].API != "a:7071" {
		t.Fatalf("hosts after join: %+v", hs)
	}
	// The live part follows the host: a change shows at the next renewal.
	free.Store(1 << 20)
	waitFor(t, 3*time.Second, "free memory updated", func() bool { return state()["a"].MemFreeBytes == 1<<20 })

	// A host that stops cleanly revokes its lease: down at once.
	stopA()
	waitFor(t, time.Second, "a down after a clean stop", func() bool { return state()["a"].State == registry.StateDown })
	if state()["b"].State != registry.StateUp {
		t.Fatal("b went down with a")
	}
}

// A host that stops renewing (killed, cut off) is down once its lease
// runs out, and comes back up when it renews again.
func TestLeaseExpiry(t *testing.T) {
	ep := registrytest.Start(t)
	r := registrytest.Dial(t, ep)
	ctx := context.Background()
	c := registrytest.Dial(t, ep) // the host's own connection, cut below
	m, err := c.Join(ctx, registry.Host{Name: "k"}, 2*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = m // never Run: no renewals
	t0 := time.Now()
	waitFor(t, 6*time.Second, "k down after its lease ran out", func() bool {
		h, err := r.Host(ctx, "k")
		return err == nil && h.State == registry.StateDown
	})
	if d := time.Since(t0); d < time.Second {
		t.Errorf("down after %v, before its 2 s lease could have run out", d)
	}
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go m.Run(mctx)
	waitFor(t, 3*time.Second, "k up again", func() bool { h, _ := r.Host(ctx, "k"); return h.State == registry.StateUp })
}

func TestOwnershipFencing(t *testing.T) {
	ep := registrytest.Start(t)
	r := registrytest.Dial(t, ep)
	ctx := context.Background()
	const s = "s-0123456789ab"

	if _, err := r.Owner(ctx, s); !errs.IsNotFound(err) {
		t.Fatalf("owner of an unknown session: %v, want not_found", err)
	}
	o1, err := r.Claim(ctx, s, "a", true, "", 0)
	if err != nil || o1.Host != "a" || o1.Token == 0 {
		t.Fatalf("claim: %+v, %v", o1, err)
	}
	if _, err := r.Claim(ctx, s, "b", true, "", 0); !errs.IsAlreadyExists(err) {
		t.Fatalf("second claim: %v, want already_exists", err)
	}
	// Checkpoint: a's session goes into an image; the token moves on.
	o2, err := r.Transfer(ctx, s, "a", "a", o1.Token, false, "i-1", 0)
	if err != nil || o2.Token <= o1.Token || o2.Live || o2.Image != "i-1" {
		t.Fatalf("checkpoint transfer: %+v, %v", o2, err)
	}
	// The old token is stale now.
	refused := func(what string, o registry.Owner, err error) {
		t.Helper()
		var fe *registry.FencedError
		if !errs.IsFailedPrecondition(err) || !errors.As(err, &fe) || fe.Current.Token != o2.Token || fe.Current.Host != "a" {
			t.Fatalf("%s: %+v, %v; want a fenced refusal naming a at token %d", what, o, err, o2.Token)
		}
	}
	o, err := r.Transfer(ctx, s, "a", "b", o1.Token, true, "", 0)
	refused("stale token", o, err)
	// A forged change: the right token, but from a host that is not the owner.
	o, err = r.Transfer(ctx, s, "c", "c", o2.Token, true, "", 0)
	refused("forged owner", o, err)
	o, err = r.Transfer(ctx, s, "a", "b", o2.Token+1000, true, "", 0)
	refused("made-up token", o, err)
	if cur, _ := r.Owner(ctx, s); cur.Token != o2.Token || cur.Host != "a" {
		t.Fatalf("record changed by refused transfers: %+v", cur)
	}

	// Hosts racing to take the session over from its image: one wins.
	var wins atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := r.Transfer(ctx, s, "a", fmt.Sprintf("h%d", i), o2.Token, true, "", 0); err == nil {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if wins.Load() != 1 {
		t.Fatalf("%d hosts took the session over, want 1", wins.Load())
	}
	cur, err := r.Owner(ctx, s)
	if err != nil || !cur.Live || cur.Token <= o2.Token {
		t.Fatalf("after the race: %+v, %v", cur, err)
	}
	if _, err := r.TransferFrom(ctx, s, "a", "a", true, "", 0); !errs.IsFailedPrecondition(err) {
		t.Fatalf("the old owner taking it back: %v, want refused", err)
	}
	os, err := r.Owners(ctx)
	if err != nil || len(os) != 1 || os[0].Host != cur.Host {
		t.Fatalf("owners: %+v, %v", os, err)
	}
}

func TestDialUnreachable(t *testing.T) {
	port := registrytest.FreePort(t)
	t0 := time.Now()
	_, err := registry.Dial(context.Background(), []string{fmt.Sprintf("http://127.0.0.1:%d", port)}, registry.Options{DialTimeout: time.Second})
	if !errs.IsUnavailable(err) {
		t.Fatalf("dial of nothing: %v, want unavailable", err)
	}
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("took %v to give up", d)
	}
	t.Log(err)
}

func TestParseEndpoints(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		ok   bool
	}{
		{"10.0.0.1:2379", []string{"http://10.0.0.1:2379"}, true},
		{"http://a:1, https://b:2", []string{"http://a:1", "https://b:2"}, true},
		{" , ", nil, false},
	} {
		got, err := registry.ParseEndpoints(tc.in)
		if (err == nil) != tc.ok || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("ParseEndpoints(%q) = %v, %v", tc.in, got, err)
		}
	}
}

func waitFor(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
