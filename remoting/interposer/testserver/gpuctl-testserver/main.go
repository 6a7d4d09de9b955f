// Command gpuctl-testserver runs the in-process test server of package
// testserver on loopback, plus raw TCP baselines for the interposer's
// benchmark. It prints the gpuctl address and the baseline address, one
// per line, and serves until stdin closes.
//
// Baseline protocol (one command byte per connection): 'p' echoes 64-byte
// messages; 's' + u64 N reads N bytes into an N-byte buffer then answers
// one byte; 'r' + u64 N writes an N-byte buffer.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"

	"github.com/gpuctl/gpuctl/remoting/interposer/testserver"
)

func main() {
	token := flag.String("token", "bench", "token clients must present")
	verbose := flag.Bool("v", false, "log protocol events")
	nullLaunch := flag.Bool("null-launch", false, "launches do not run kernels (measures the transport)")
	flag.Parse()
	lvl := slog.LevelWarn
	if *verbose {
		lvl = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	srv, err := testserver.StartWith("127.0.0.1:0", *token, log, testserver.Options{NullLaunch: *nullLaunch})
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuctl-testserver:", err)
		os.Exit(1)
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpuctl-testserver:", err)
		os.Exit(1)
	}
	go serveRaw(raw)
	fmt.Println(srv.Addr())
	fmt.Println(raw.Addr())
	io.Copy(io.Discard, os.Stdin)
	raw.Close()
	srv.Close()
}

// big is the baseline's copy buffer.
var (
	bigMu sync.Mutex
	big   []byte
)

func serveRaw(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.(*net.TCPConn).SetNoDelay(true)
			var cmd [9]byte
			if _, err := io.ReadFull(c, cmd[:1]); err != nil {
				return
			}
			switch cmd[0] {
			case 'p':
				var m [64]byte
				for {
					if _, err := io.ReadFull(c, m[:]); err != nil {
						return
					}
					if _, err := c.Write(m[:]); err != nil {
						return
					}
				}
			case 's', 'r':
				if _, err := io.ReadFull(c, cmd[1:]); err != nil {
					return
				}
				n := binary.LittleEndian.Uint64(cmd[1:])
				if n > 1<<32 {
					return
				}
				// The stream lands in (or leaves from) a buffer as large
				// as the copy and kept across runs, as device memory
				// is, so the baseline moves the same bytes through the
				// same kind of memory.
				bigMu.Lock()
				defer bigMu.Unlock()
				if uint64(len(big)) < n {
					big = make([]byte, n)
				}
				buf := big[:n]
				if cmd[0] == 's' {
					io.ReadFull(c, buf)
					c.Write([]byte{1})
				} else {
					c.Write(buf)
				}
			}
		}()
	}
}
