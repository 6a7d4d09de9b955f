package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// checkLoopback refuses an address that is not on a loopback interface:
// the profiler answers anyone who reaches it.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return errors.New("not a loopback address; pass 127.0.0.1:PORT or [::1]:PORT (the profiler has no authentication)")
	}
	return nil
}

// serveDebug serves Go's profiler on addr until ctx ends. A profile of a
// checkpoint or a migration shows where its steps spend their time
// (go tool pprof http://ADDR/debug/pprof/profile?seconds=10, or
// /debug/pprof/trace for waits as well as work).
func serveDebug(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	log.Info("profiler listening", "addr", ln.Addr().String())
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("profiler stopped", "err", err)
		}
	}()
	return ln.Addr(), nil
}
