// Command benchsteps counts the round trips of a PyTorch process's driver
// calls, with and without the client library's caches: the C program
// remoting/interposer/testdata/stepreplay.c makes the calls (and their
// counts) that NVIDIA's driver recorded for three small training steps,
// through build/lib/libcuda.so.1 and `gpuctl run` against a real gpud on
// the emulated device, once with GPUCTL_NO_CACHE=1 and once without, and
// this program prints the round trips per op from GPUCTL_STATS.
//
// Usage: benchsteps -bench STEPREPLAY [-root REPO]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"github.com/gpuctl/gpuctl/e2e/harness/benchgpud"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"time"
)

type stats struct {
	RoundTrips map[string]int `json:"round_trips"`
	Async      map[string]int `json:"async"`
	Total      int            `json:"total_round_trips"`
	TotalAsync int            `json:"total_async"`
}

func main() {
	bench := flag.String("bench", "", "the compiled stepreplay client")
	root := flag.String("root", ".", "the repository (holding build/)")
	flag.Parse()
	if err := run(*root, *bench); err != nil {
		fmt.Fprintln(os.Stderr, "benchsteps:", err)
		os.Exit(1)
	}
}

func run(root, bench string) error {
	if bench == "" {
		return errors.New("-bench is required")
	}
	build := filepath.Join(root, "build")
	gpud, err := benchgpud.Start(build, "benchsteps")
	if err != nil {
		return err
	}
	defer gpud.Stop()
	state, listen := gpud.State, gpud.Listen
	measure := func(env ...string) (stats, time.Duration, error) {
		f := filepath.Join(state, "stats.json")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, filepath.Join(build, "bin/gpuctl"), "run", "--server", listen,
			"--token-file", filepath.Join(state, "token"), "--", bench)
		c.Env = append(os.Environ(), append(env, "GPUCTL_STATS="+f)...)
		c.Stderr = os.Stderr
		t0 := time.Now()
		if out, err := c.Output(); err != nil {
			return stats{}, 0, fmt.Errorf("stepreplay: %w: %s", err, out)
		}
		took := time.Since(t0)
		var s stats
		b, err := os.ReadFile(f)
		if err == nil {
			err = json.Unmarshal(b, &s)
		}
		return s, took, err
	}
	before, tb, err := measure("GPUCTL_NO_CACHE=1")
	if err != nil {
		return err
	}
	after, ta, err := measure()
	if err != nil {
		return err
	}
	fmt.Printf("round trips of a PyTorch process's driver calls (torch1 trace: 3 training steps), gpud on the emulated device, %s\n\n",
		time.Now().UTC().Format(time.RFC3339))
	fmt.Println("| op | round trips without caches | with caches |")
	fmt.Println("| --- | --- | --- |")
	ops := map[string]bool{}
	for o := range before.RoundTrips {
		ops[o] = true
	}
	for o := range after.RoundTrips {
		ops[o] = true
	}
	var names []string
	for o := range ops {
		names = append(names, o)
	}
	sort.Slice(names, func(i, j int) bool { return before.RoundTrips[names[i]] > before.RoundTrips[names[j]] })
	for _, o := range names {
		fmt.Printf("| %s | %d | %d |\n", o, before.RoundTrips[o], after.RoundTrips[o])
	}
	fmt.Printf("| **total** | **%d** | **%d** |\n", before.Total, after.Total)
	fmt.Printf("\nasynchronous requests (no round trip): %d and %d; wall time %v and %v\n", before.TotalAsync, after.TotalAsync,
		tb.Round(time.Millisecond), ta.Round(time.Millisecond))
	return nil
}
