package replicate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/registry/registrytest"
	"github.com/gpuctl/gpuctl/replicate"
	"github.com/gpuctl/gpuctl/store"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// peer is a store behind the image routes, as a gpud serves them; it
// returns the store and its API address.
func peer(t *testing.T) (*store.Store, string) {
	st := openStore(t)
	mux := http.NewServeMux()
	images.Register(mux, st, images.RouteOptions{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(control.RequireToken("tok", mux))
	t.Cleanup(srv.Close)
	return st, strings.TrimPrefix(srv.URL, "http://")
}

func commit(t *testing.T, st *store.Store, id, host string, seed uint64) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "pages-1.img"), imagegen.Pages(seed, 2<<20, imagegen.Realistic), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := images.Commit(context.Background(), st, dir, images.Meta{ID: id, Session: "s-" + id, Host: host, Backend: "emulated"}); err != nil {
		t.Fatal(err)
	}
}

// TestReplicasGoToCompatiblePeers: with K 2, an image goes to the two
// compatible up peers with the most free memory; an unreachable peer that
// ranks first is replaced by the next; a peer of another backend and a
// down one are passed over; the copies are in the registry; the bytes
// are counted. With K 3 one copy is missing until a third peer joins, and
// a retry then places it.
func TestReplicasGoToCompatiblePeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := registrytest.Dial(t, registrytest.Start(t))
	src := openStore(t)
	stB, apiB := peer(t)
	stC, apiC := peer(t)
	stG, apiG := peer(t)
	dead := fmt.Sprintf("127.0.0.1:%d", registrytest.FreePort(t))

	join := func(name, api, backend string, free uint64) {
		m, err := r.Join(ctx, registry.Host{Name: name, API: api, Backend: backend}, 0,
			func(context.Context) registry.Host { return registry.Host{MemFreeBytes: free} })
		if err != nil {
			t.Fatal(err)
		}
		go m.Run(ctx)
	}
	self := registry.Host{Name: "a", Backend: "emulated"}
	join("a", "unused", "emulated", 1<<30)
	join("b", apiB, "emulated", 4<<30)
	join("c", apiC, "emulated", 2<<30)
	join("f", dead, "emulated", 8<<30) // first by free memory, but unreachable
	join("e", "unused", "cuda", 16<<30)
	// d registered once and is down.
	dctx, dstop := context.WithCancel(ctx)
	md, err := r.Join(dctx, registry.Host{Name: "d", API: "unused", Backend: "emulated"}, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	go md.Run(dctx)
	dstop()

	reg := prometheus.NewRegistry()
	met := replicate.NewMetrics(reg)
	run := func(k int) *replicate.Replicator {
		rp := replicate.New(replicate.Config{Self: self, K: k, Registry: r, Store: src, Metrics: met,
			Dial: func(a string) *control.Client { return control.NewClient(a, "tok") }, Retry: 100 * time.Millisecond, Scan: time.Hour})
		go rp.Run(ctx)
		return rp
	}
	hosts := func(image string) []string {
		cs, err := r.Copies(ctx, image)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range cs {
			out = append(out, c.Host)
		}
		sort.Strings(out)
		return out
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}

	commit(t, src, "img-k2", "a", 1)
	rp := run(2)
	rp.Committed("img-k2")
	waitFor("two copies of img-k2", func() bool { return strings.Join(hosts("img-k2"), ",") == "a,b,c" })
	for _, st := range []*store.Store{stB, stC} {
		if _, err := images.Get(ctx, st, "img-k2"); err != nil {
			t.Errorf("a peer recorded as holding img-k2 does not: %v", err)
		}
	}
	if _, err := images.Get(ctx, stG, "img-k2"); err == nil {
		t.Error("a host that never joined got a copy")
	}
	cs, err := r.Copies(ctx, "img-k2")
	if err != nil {
		t.Fatal(err)
	}
	var recorded int64
	for _, c := range cs {
		recorded += c.Sent
	}
	if sent := testutil.ToFloat64(mustCounter(t, reg, "gpud_replication_sent_bytes_total")); recorded == 0 || sent != float64(recorded) {
		t.Errorf("gpud_replication_sent_bytes_total %v, the copies record %d bytes sent", sent, recorded)
	}

	// A rescan (a checkpoint stored an image some other way than through
	// Committed) finds this host's new image; a copy a peer made is left
	// to its origin.
	commit(t, src, "img-scan", "a", 3)
	commit(t, src, "img-peer", "z", 4)
	rp.Rescan()
	waitFor("img-scan found by the rescan", func() bool { return strings.Join(hosts("img-scan"), ",") == "a,b,c" })
	if got := hosts("img-peer"); len(got) != 0 {
		t.Errorf("a peer's image was replicated by a host that only holds a copy: %v", got)
	}

	// Three copies wanted, two peers able: one short until g joins.
	commit(t, src, "img-k3", "a", 2)
	rp3 := run(3)
	rp3.Committed("img-k3")
	waitFor("img-k3 on b and c", func() bool { return strings.Join(hosts("img-k3"), ",") == "a,b,c" })
	time.Sleep(300 * time.Millisecond)
	if got := testutil.ToFloat64(mustGauge(t, reg, "gpud_replication_pending_images")); got < 1 {
		t.Errorf("pending images %v while img-k3 lacks a copy", got)
	}
	join("g", apiG, "emulated", 1<<20)
	waitFor("img-k3's third copy on g once it joined", func() bool { return strings.Join(hosts("img-k3"), ",") == "a,b,c,g" })
	if _, err := images.Get(ctx, stG, "img-k3"); err != nil {
		t.Errorf("g recorded as holding img-k3 but does not: %v", err)
	}

	// K 0 (gpud without --replicas) records this host's own copy and
	// sends nothing, so that where an image is stays known when its host
	// goes down.
	// Its own metrics: the replicators above still fill their images'
	// third copies now that g joined.
	reg0 := prometheus.NewRegistry()
	commit(t, src, "img-k0", "a", 5)
	rp0 := replicate.New(replicate.Config{Self: self, K: 0, Registry: r, Store: src, Metrics: replicate.NewMetrics(reg0),
		Dial: func(a string) *control.Client { return control.NewClient(a, "tok") }, Retry: 100 * time.Millisecond, Scan: time.Hour})
	go rp0.Run(ctx)
	rp0.Committed("img-k0")
	waitFor("img-k0 recorded on a", func() bool { return strings.Join(hosts("img-k0"), ",") == "a" })
	time.Sleep(300 * time.Millisecond)
	if got := hosts("img-k0"); strings.Join(got, ",") != "a" {
		t.Errorf("copies of img-k0 with K 0: %v, want a's own", got)
	}
	if sent := testutil.ToFloat64(mustCounter(t, reg0, "gpud_replication_sent_bytes_total")); sent != 0 {
		t.Errorf("K 0 sent %v bytes", sent)
	}
}

func mustCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	return find(t, reg, name)
}

func mustGauge(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	return find(t, reg, name)
}

// find wraps one metric of reg as a collector testutil can read.
func find(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() {
				switch {
				case m.Counter != nil:
					v += m.Counter.GetValue()
				case m.Gauge != nil:
					v += m.Gauge.GetValue()
				}
			}
			g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "x"})
			g.Set(v)
			return g
		}
	}
	t.Fatalf("metric %s not registered", name)
	return nil
}

func TestCandidates(t *testing.T) {
	h100 := []api.GPU{{Name: "H100"}}
	self := registry.Host{Name: "a", Backend: "cuda", Driver: "550.54", GPUs: h100}
	hs := []registry.Host{
		{Name: "a", State: "up", Backend: "cuda", Driver: "550.54", GPUs: h100},
		{Name: "b", State: "up", Backend: "cuda", Driver: "550.54", GPUs: h100, MemFreeBytes: 10},
		{Name: "c", State: "up", Backend: "cuda", Driver: "560.1", GPUs: h100, MemFreeBytes: 20},
		{Name: "d", State: "down", Backend: "cuda", Driver: "560.1", GPUs: h100, MemFreeBytes: 99},
		{Name: "e", State: "up", Backend: "cuda", Driver: "535.1", GPUs: h100, MemFreeBytes: 99},
		{Name: "f", State: "up", Backend: "cuda", Driver: "560.1", GPUs: []api.GPU{{Name: "A100"}}, MemFreeBytes: 99},
		{Name: "g", State: "up", Backend: "emulated", MemFreeBytes: 99},
		{Name: "h", State: "up", Backend: "cuda", Driver: "560.1", GPUs: h100, MemFreeBytes: 50},
	}
	peers, why := registry.Candidates(self, hs, map[string]bool{"h": true})
	var names []string
	for _, p := range peers {
		names = append(names, p.Name)
	}
	if got := strings.Join(names, ","); got != "c,b" {
		t.Errorf("candidates %s, want c,b (most free memory first; h holds it already)", got)
	}
	if got := strings.Join(why, "; "); !strings.Contains(got, "d: down") || !strings.Contains(got, "e: driver 535.1 older") ||
		!strings.Contains(got, "f: no H100") || !strings.Contains(got, "g: runs emulated") {
		t.Errorf("reasons: %s", got)
	}
}
