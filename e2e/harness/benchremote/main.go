// Command benchremote measures the whole remoting path on loopback: a C
// client through build/lib/libcuda.so.1 and `gpuctl run`, against a real
// gpud and its worker process on the emulated device, next to raw-TCP
// baselines served by this program in the same run.
//
// Usage: benchremote -bench BENCH_BINARY [-root REPO]
//
// The client (remoting/interposer/testdata/bench.c) dials RAW_HOST:PORT
// with a one-byte command: 'p' ping-pong of 64-byte messages, 's' sink of
// N bytes answered by one byte, 'r' source of N bytes (N follows the
// command as a little-endian uint64).
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	bench := flag.String("bench", "", "the compiled client benchmark")
	root := flag.String("root", ".", "the repository (holding build/)")
	flag.Parse()
	if err := run(*root, *bench); err != nil {
		fmt.Fprintln(os.Stderr, "benchremote:", err)
		os.Exit(1)
	}
}

func run(root, bench string) error {
	if bench == "" {
		return errors.New("-bench is required")
	}
	build := filepath.Join(root, "build")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer raw.Close()
	go serveRaw(raw)

	state, err := os.MkdirTemp("", "benchremote-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	listen, api := freeAddr(), freeAddr()
	gpud := exec.Command(filepath.Join(build, "bin/gpud"), "--listen", listen, "--api", api, "--state-dir", state,
		"--backend", "emulated", "--log-level", "warn")
	gpud.Stderr = os.Stderr
	if err := gpud.Start(); err != nil {
		return fmt.Errorf("start gpud: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			gpud.Process.Kill()
			gpud.Wait()
		}
	}()
	if err := waitListening(listen, 10*time.Second); err != nil {
		return fmt.Errorf("gpud did not start: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := exec.CommandContext(ctx, filepath.Join(build, "bin/gpuctl"), "run", "--server", listen,
		"--token-file", filepath.Join(state, "token"), "--", bench, raw.Addr().String())
	client.Stdout, client.Stderr = os.Stdout, os.Stderr
	fmt.Printf("gpuctl remoting on loopback: C client + libcuda.so.1 -> gpud -> worker (emulated device), %s\n\n", time.Now().UTC().Format(time.RFC3339))
	cerr := client.Run()
	gpud.Process.Signal(syscall.SIGTERM)
	werr := gpud.Wait()
	stopped = true
	if cerr != nil {
		return fmt.Errorf("benchmark client: %w", cerr)
	}
	if werr != nil {
		return fmt.Errorf("gpud did not exit cleanly after SIGTERM: %w", werr)
	}
	return nil
}

func freeAddr() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func waitListening(addr string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serveRaw answers the baseline connections.
func serveRaw(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.(*net.TCPConn).SetNoDelay(true)
			if err := rawConn(c); err != nil && !errors.Is(err, io.EOF) {
				fmt.Fprintln(os.Stderr, "benchremote: raw baseline:", err)
			}
		}()
	}
}

func rawConn(c net.Conn) error {
	r := bufio.NewReaderSize(c, 1<<20)
	cmd, err := r.ReadByte()
	if err != nil {
		return err
	}
	switch cmd {
	case 'p':
		var m [64]byte
		for {
			if _, err := io.ReadFull(r, m[:]); err != nil {
				return err
			}
			if _, err := c.Write(m[:]); err != nil {
				return err
			}
		}
	case 's', 'r':
		var nb [8]byte
		if _, err := io.ReadFull(r, nb[:]); err != nil {
			return err
		}
		n := int64(binary.LittleEndian.Uint64(nb[:]))
		if cmd == 's' {
			if _, err := io.CopyN(io.Discard, r, n); err != nil {
				return err
			}
			_, err := c.Write([]byte{1})
			return err
		}
		buf := make([]byte, 1<<20)
		for n > 0 {
			k := min(int64(len(buf)), n)
			if _, err := c.Write(buf[:k]); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", strings.TrimSpace(string(cmd)))
}
