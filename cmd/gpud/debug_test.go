package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestServeDebug checks that the profiler answers on the loopback address
// it was given and stops with its context.
func TestServeDebug(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr, err := serveDebug(ctx, "127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + "/debug/pprof/goroutine?debug=1"
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "goroutine profile") {
		t.Fatalf("GET %s: %s, %.80q", url, resp.Status, body)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := http.Client{Timeout: time.Second}
		if _, err := c.Get(url); err != nil {
			break // closed
		}
		if time.Now().After(deadline) {
			t.Fatal("the profiler still answers after its context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
