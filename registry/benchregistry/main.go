// Command benchregistry loads an embedded registry the way a cluster
// does (make bench-registry): many gpuds holding leases and rewriting
// their live records, and sessions changing owner and state by
// compare-and-swap, and reports etcd's write rate, the latency of
// ownership changes and how long a killed host takes to show down.
package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/registry/embedded"
)

func main() {
	hosts := flag.Int("hosts", 50, "simulated gpuds, each with its own connection and lease")
	sessions := flag.Int("sessions", 1000, "sessions changing owner and state")
	dur := flag.Duration("duration", 20*time.Second, "how long the sessions change")
	workers := flag.Int("workers", 32, "concurrent changers")
	ttl := flag.Duration("ttl", registry.DefaultTTL, "host lease TTL")
	flag.Parse()
	if err := run(*hosts, *sessions, *workers, *dur, *ttl); err != nil {
		fmt.Fprintln(os.Stderr, "benchregistry:", err)
		os.Exit(1)
	}
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func run(nHosts, nSessions, nWorkers int, dur, ttl time.Duration) error {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "benchregistry-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := embedded.Start(ctx, embedded.Config{DataDir: dir, Listen: fmt.Sprintf("127.0.0.1:%d", freePort()), Peer: fmt.Sprintf("127.0.0.1:%d", freePort())})
	if err != nil {
		return err
	}
	defer srv.Close()
	eps := []string{srv.Endpoint()}
	admin, err := registry.Dial(ctx, eps, registry.Options{})
	if err != nil {
		return err
	}
	defer admin.Close()

	// The gpuds: one connection and one lease each; the live part changes
	// at every renewal (free memory moves), the worst case for writes.
	type gpud struct {
		name string
		c    *registry.Client
		stop context.CancelFunc
	}
	gs := make([]gpud, nHosts)
	for i := range gs {
		name := fmt.Sprintf("host-%03d", i)
		c, err := registry.Dial(ctx, eps, registry.Options{})
		if err != nil {
			return err
		}
		var n atomic.Uint64
		m, err := c.Join(ctx, registry.Host{Name: name, API: name + ":7071", Backend: "cuda"}, ttl,
			func(context.Context) registry.Host {
				return registry.Host{MemFreeBytes: 80<<30 - n.Add(1)<<20, Sessions: nSessions / nHosts}
			})
		if err != nil {
			return err
		}
		mctx, cancel := context.WithCancel(ctx)
		go m.Run(mctx)
		gs[i] = gpud{name, c, cancel}
	}
	owner := make([]atomic.Int64, nSessions) // host index of each session
	ids := make([]string, nSessions)
	for i := range ids {
		ids[i] = fmt.Sprintf("s-%012x", i)
		h := rand.IntN(nHosts)
		if _, err := gs[h].c.Claim(ctx, ids[i], gs[h].name, true, "", 1); err != nil {
			return err
		}
		owner[i].Store(int64(h))
	}

	start, err := admin.Etcd().Get(ctx, "/")
	if err != nil {
		return err
	}
	rev0, t0 := start.Header.Revision, time.Now()
	var (
		mu      sync.Mutex
		lat     []time.Duration
		refused atomic.Int64
		locks   = make([]sync.Mutex, nSessions)
		wg      sync.WaitGroup
	)
	deadline := t0.Add(dur)
	for range nWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				i := rand.IntN(nSessions)
				locks[i].Lock()
				from := int(owner[i].Load())
				to := from
				live := rand.IntN(3) != 0 // checkpoint (not live) or restore/migrate (live)
				if rand.IntN(2) == 0 {
					to = rand.IntN(nHosts) // a migration or a takeover
				}
				c := gs[from].c
				t := time.Now()
				cur, err := c.Owner(ctx, ids[i])
				if err == nil {
					_, err = c.Transfer(ctx, ids[i], gs[from].name, gs[to].name, cur.Token, live, "img", cur.Epoch+1)
				}
				d := time.Since(t)
				if err == nil {
					owner[i].Store(int64(to))
					mu.Lock()
					lat = append(lat, d)
					mu.Unlock()
				} else if errs.IsFailedPrecondition(err) {
					refused.Add(1)
				}
				locks[i].Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	end, err := admin.Etcd().Get(ctx, "/")
	if err != nil {
		return err
	}
	writes := end.Header.Revision - rev0
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}

	// A gpud killed: its connection drops without revoking its lease.
	victim := gs[0]
	victim.stop()
	victim.c.Close()
	tk := time.Now()
	for {
		h, err := admin.Host(ctx, victim.name)
		if err == nil && h.State == registry.StateDown {
			break
		}
		if time.Since(tk) > 3*ttl {
			return fmt.Errorf("%s not down %v after it was killed", victim.name, 3*ttl)
		}
		time.Sleep(100 * time.Millisecond)
	}
	detect := time.Since(tk)
	for _, g := range gs[1:] {
		g.stop()
	}
	st, err := admin.Etcd().Status(ctx, eps[0])
	if err != nil {
		return err
	}

	fmt.Printf("registry load: %d gpuds (lease TTL %v, renewed every %v), %d sessions, %d changers for %v\n",
		nHosts, ttl, ttl/3, nSessions, nWorkers, elapsed.Round(time.Millisecond))
	fmt.Printf("  etcd writes:             %d (%.0f/s; ownership changes and live-record rewrites)\n", writes, float64(writes)/elapsed.Seconds())
	fmt.Printf("  ownership changes:       %d (%.0f/s), refused %d\n", len(lat), float64(len(lat))/elapsed.Seconds(), refused.Load())
	fmt.Printf("  ownership change latency (read + compare-and-swap): p50 %v  p99 %v  max %v\n",
		q(0.50).Round(10*time.Microsecond), q(0.99).Round(10*time.Microsecond), q(1).Round(10*time.Microsecond))
	fmt.Printf("  lease-expiry detection:  %v after a gpud was killed (TTL %v)\n", detect.Round(10*time.Millisecond), ttl)
	fmt.Printf("  database size:           %d bytes\n", st.DbSize)
	return nil
}
