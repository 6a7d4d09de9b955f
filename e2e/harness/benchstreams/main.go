// Command benchstreams times the shape of NVIDIA's simpleStreams sample
// through gpuctl: the C program remoting/interposer/testdata/streambench.c
// uploads an array, touches it with kernels and downloads it, with
// synchronous copies and with asynchronous ones from pageable and from
// page-locked memory, through build/lib/libcuda.so.1 and `gpuctl run`
// against a real gpud on the emulated device. It runs once over loopback
// and once through a relay that delays every byte by half of -rtt each
// way, standing in for a network between the program and the GPU host,
// and prints a table for each.
//
// Usage: benchstreams -bench STREAMBENCH [-root REPO] [-mib 32] [-reps 5] [-rtt 1ms]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness/benchgpud"
)

func main() {
	bench := flag.String("bench", "", "the compiled streambench client")
	root := flag.String("root", ".", "the repository (holding build/)")
	mib := flag.Int("mib", 32, "MiB moved each way per pass")
	reps := flag.Int("reps", 5, "timed passes per kind of copy (the median is shown)")
	rtt := flag.Duration("rtt", time.Millisecond, "round-trip delay of the relayed run (0: loopback only)")
	flag.Parse()
	if err := run(*root, *bench, *mib, *reps, *rtt); err != nil {
		fmt.Fprintln(os.Stderr, "benchstreams:", err)
		os.Exit(1)
	}
}

func run(root, bench string, mib, reps int, rtt time.Duration) error {
	if bench == "" {
		return errors.New("-bench is required")
	}
	build := filepath.Join(root, "build")
	gpud, err := benchgpud.Start(build, "benchstreams")
	if err != nil {
		return err
	}
	defer gpud.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	one := func(server, what string) error {
		c := exec.CommandContext(ctx, filepath.Join(build, "bin/gpuctl"), "run", "--server", server,
			"--token-file", gpud.Token(), "--", bench, strconv.Itoa(mib), strconv.Itoa(reps))
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		fmt.Printf("\n%s, gpud on the emulated device, %s\n", what, time.Now().UTC().Format(time.RFC3339))
		if err := c.Run(); err != nil {
			return fmt.Errorf("streambench (%s): %w", what, err)
		}
		return nil
	}
	if err := one(gpud.Listen, "loopback"); err != nil {
		return err
	}
	if rtt <= 0 {
		return nil
	}
	relay, err := startRelay(gpud.Listen, rtt/2)
	if err != nil {
		return err
	}
	defer relay.Close()
	return one(relay.Addr().String(), fmt.Sprintf("loopback through a relay adding %v round trip", rtt))
}

// startRelay accepts connections and joins each to target, holding every
// chunk of bytes for delay in each direction (bandwidth is not limited).
func startRelay(target string, delay time.Duration) (net.Listener, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				s, err := net.Dial("tcp", target)
				if err != nil {
					c.Close()
					return
				}
				go pipeDelayed(s, c, delay)
				pipeDelayed(c, s, delay)
			}()
		}
	}()
	return ln, nil
}

type chunk struct {
	at time.Time
	b  []byte
}

// pipeDelayed copies src to dst, each chunk delay after it was read.
func pipeDelayed(dst, src net.Conn, delay time.Duration) {
	defer dst.Close()
	defer src.Close()
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 256<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{time.Now().Add(delay), b[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for c := range q {
		time.Sleep(time.Until(c.at))
		if _, err := dst.Write(c.b); err != nil {
			io.Copy(io.Discard, src)
			return
		}
	}
}
