// Package testserver is a small in-process gpuctl server for tests and
// benchmarks of the interposer: it runs the handshake, keeps sessions
// across reconnects, and serves each session with package dispatch on an
// emulated device. gpud does the same with a worker process per session;
// this keeps the client's tests independent of it.
package testserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuctl/gpuctl/failpoint"
	"github.com/gpuctl/gpuctl/ids"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
	"github.com/gpuctl/gpuctl/remoting/dispatch"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// Server accepts clients on a loopback port.
type Server struct {
	ln     net.Listener
	token  string
	opt    Options
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	accepted atomic.Int64 // connections accepted so far
	goodbyes atomic.Int64 // sessions ended by their client's goodbye

	mu       sync.Mutex
	sessions map[string]*session
	movedTo  map[string]string // session id -> address, for sessions moved away
	conns    map[net.Conn]struct{}
	cutAt    uint64 // requests executed, over all sessions, at DropAfterProgress's last cut
}

type session struct {
	id, secret string
	ds         *dispatch.Session
	dev        *emulated.Device
	serving    sync.Mutex // one connection at a time

	mu      sync.Mutex
	movedTo string // set by MoveTo: tell the client to go there
}

// Options tune the server.
type Options struct {
	// NullLaunch makes kernel launches succeed without running the
	// kernel, so that a benchmark measures the transport rather than
	// the PTX interpreter.
	NullLaunch bool
	// ModuleCache, when set, is the module cache every session shares,
	// as gpud's sessions share the host's.
	ModuleCache dispatch.ModuleCache
	// Clusters, when set, makes the device report support for
	// thread-block clusters and cooperative launches, which the emulated
	// device lacks, so that a test can follow such launches through the
	// client: each is handed to Clusters, then run as a plain launch. The
	// interpreter runs blocks independently, which a kernel that neither
	// shares distributed shared memory nor synchronises its grid cannot
	// tell apart.
	Clusters func(backend.LaunchConfig)
	// Device, when set, wraps each session's emulated device, so that a
	// test can stand in for a driver's answers the emulator does not give.
	Device func(*emulated.Device) backend.Device
	// TLS serves every connection over TLS 1.3 with this certificate,
	// through gpud's record layer (package tlsrec).
	TLS *tls.Config
	// Failpoints, when set, reach the sessions' dispatch (the point
	// "dispatch/sync", for one).
	Failpoints *failpoint.Set
	// Keepalive is the keepalive interval for clients that ask for
	// keepalives; zero means wire.DefaultKeepalive.
	Keepalive time.Duration
}

// Start listens on addr ("127.0.0.1:0" for any free port) and serves
// until Close.
func Start(addr, token string, log *slog.Logger) (*Server, error) {
	return StartWith(addr, token, log, Options{})
}

// StartWith is Start with options.
func StartWith(addr, token string, log *slog.Logger, opt Options) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("test server: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{ln: ln, token: token, log: log, ctx: ctx, cancel: cancel, opt: opt,
		sessions: map[string]*session{}, movedTo: map[string]string{}, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the HOST:PORT clients connect to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops accepting, ends every connection and waits for them.
func (s *Server) Close() {
	s.cancel()
	s.ln.Close()
	s.DropConnections()
	s.wg.Wait()
	s.mu.Lock()
	for _, ss := range s.sessions {
		ss.dev.Close()
	}
	s.mu.Unlock()
}

// DropConnections cuts every client connection abruptly, as a failed
// link would. Sessions survive; clients reconnect and replay.
func (s *Server) DropConnections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closeConnsLocked()
}

func (s *Server) closeConnsLocked() int {
	n := 0
	for c := range s.conns {
		c.Close()
		n++
	}
	return n
}

// DropAfterProgress cuts every client connection, as DropConnections
// does, but only when the server has executed new requests since its last
// cut. Tests that cut links on a timer use it: on a loaded machine a
// reconnect and its resend can take longer than the timer's period, and
// cutting each reconnect before it got anything done livelocks the client
// (it reconnects forever at the same request). Cutting only after
// progress still cuts as often as the link allows.
func (s *Server) DropAfterProgress() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	var executed uint64
	for _, ss := range s.sessions {
		executed += ss.ds.ExecutedSeq()
	}
	if executed <= s.cutAt {
		return 0
	}
	s.cutAt = executed
	return s.closeConnsLocked()
}

// MoveTo hands every session to dst, as a migration does: each session
// stops at a frame boundary, its client gets a "moved to" notice with
// dst's address, and dst serves the session when the client resumes.
func (s *Server) MoveTo(dst *Server) {
	s.mu.Lock()
	moving := s.sessions
	s.sessions = map[string]*session{}
	for id := range moving {
		s.movedTo[id] = dst.Addr()
	}
	s.mu.Unlock()
	dst.mu.Lock()
	for id, ss := range moving {
		dst.sessions[id] = ss
		delete(dst.movedTo, id)
	}
	dst.mu.Unlock()
	for _, ss := range moving {
		ss.mu.Lock()
		ss.movedTo = dst.Addr()
		ss.mu.Unlock()
		ss.ds.Stop()
	}
}

// Adopt takes every session of src over without a word to their clients,
// as a host that restores a dead host's sessions from copies of their
// images does; src forgets them, and is closed by the caller, so that the
// clients must find this server themselves.
func (s *Server) Adopt(src *Server) {
	src.mu.Lock()
	moving := src.sessions
	src.sessions = map[string]*session{}
	src.mu.Unlock()
	s.mu.Lock()
	for id, ss := range moving {
		s.sessions[id] = ss
	}
	s.mu.Unlock()
	for _, ss := range moving {
		ss.ds.Stop()
		// Wait for src's connection to let go at a frame boundary, so
		// that closing src then cannot cut a call short.
		ss.serving.Lock()
		ss.serving.Unlock()
	}
}

// Accepted is the number of connections accepted so far.
func (s *Server) Accepted() int64 { return s.accepted.Load() }

// Goodbyes is the number of sessions that ended because their client
// said goodbye (its program exited normally).
func (s *Server) Goodbyes() int64 { return s.goodbyes.Load() }

// Sessions is the number of sessions this server holds.
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}

// UsedSessions is the number of sessions that executed at least one
// request. A cut that loses a new session's Welcome leaves that session
// behind unused (the client asks for another, as it would of gpud, where
// the orphan waits out the grace period); tests of cut links count only
// the sessions their client really had.
func (s *Server) UsedSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, ss := range s.sessions {
		if ss.ds.ExecutedSeq() > 0 {
			n++
		}
	}
	return n
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				c.Close()
			}()
			if err := s.serve(c); err != nil && s.ctx.Err() == nil {
				s.log.Debug("connection ended", "err", err)
			}
		}()
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Server) serve(c net.Conn) error {
	if s.opt.TLS != nil {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		tc, err := tlsrec.Server(c, s.opt.TLS)
		var nt *tlsrec.NotTLSError
		if errors.As(err, &nt) && bytes.HasPrefix(nt.Prefix, wire.HelloMagic[:]) {
			return wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusTLSRequired, Message: "this server speaks TLS: set GPUCTL_TLS_CA"})
		}
		if err != nil {
			return err
		}
		_ = c.SetDeadline(time.Time{})
		tc.ReadAhead()
		c = tc
	}
	h, err := wire.ReadHello(c)
	if errors.Is(err, wire.ErrVersion) {
		return wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusVersionMismatch, Message: err.Error()})
	}
	if errors.Is(err, wire.ErrProtocol) {
		// As gpud does: a TLS client reads this and says the server
		// speaks plaintext.
		return wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusRefused, Message: err.Error()})
	}
	if err != nil {
		return err
	}
	if subtle.ConstantTimeCompare([]byte(h.Token), []byte(s.token)) != 1 {
		return wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusBadToken, Message: "wrong token"})
	}
	var ss *session
	info := dispatch.WelcomeInfo{}
	if h.Resume() {
		s.mu.Lock()
		ss = s.sessions[h.SessionID]
		fwd := s.movedTo[h.SessionID]
		s.mu.Unlock()
		if ss == nil && fwd != "" {
			// A client that missed the notice is sent on, as gpud does
			// for a session it migrated away.
			return wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusMoved, Message: fwd})
		}
		if ss == nil || subtle.ConstantTimeCompare([]byte(h.Secret), []byte(ss.secret)) != 1 {
			return wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusUnknownSession, Message: "no such session"})
		}
		info.SessionID = ss.id
	} else {
		dev := emulated.New(emulated.Config{MemBytes: 4 << 30, Seed: "testserver"})
		ss = &session{id: ids.NewSession(), secret: randHex(16), dev: dev}
		var bd backend.Device = dev
		if s.opt.NullLaunch {
			bd = nullLaunch{dev}
		}
		if s.opt.Device != nil {
			bd = s.opt.Device(dev)
		}
		if s.opt.Clusters != nil {
			bd = clusterLaunch{bd, s.opt.Clusters}
		}
		ss.ds = dispatch.NewSession(bd, s.log.With("session", ss.id))
		if s.opt.ModuleCache != nil {
			ss.ds.SetModuleCache(s.opt.ModuleCache)
		}
		s.mu.Lock()
		s.sessions[ss.id] = ss
		s.mu.Unlock()
		info.SessionID, info.Secret = ss.id, ss.secret
	}
	if h.Flags&wire.HelloKeepalive != 0 {
		info.Keepalive = s.opt.Keepalive
		if info.Keepalive <= 0 {
			info.Keepalive = wire.DefaultKeepalive
		}
	}
	// A resuming client may arrive before the old connection noticed it
	// is dead: stop the old one at a frame boundary first.
	ss.ds.Stop()
	ss.serving.Lock()
	defer ss.serving.Unlock()
	ss.mu.Lock()
	ss.movedTo = ""
	ss.mu.Unlock()
	ctx := s.ctx
	if s.opt.Failpoints != nil {
		ctx = failpoint.With(ctx, s.opt.Failpoints)
	}
	err = ss.ds.Serve(ctx, c, info, false)
	ss.mu.Lock()
	to := ss.movedTo
	ss.mu.Unlock()
	if errors.Is(err, dispatch.ErrStopped) && to != "" {
		return wire.WriteMoved(c, to)
	}
	if errors.Is(err, dispatch.ErrGoodbye) {
		// The client's program exited: the session ends, as gpud ends it.
		s.mu.Lock()
		if s.sessions[ss.id] == ss {
			delete(s.sessions, ss.id)
			s.goodbyes.Add(1)
		}
		s.mu.Unlock()
		return nil
	}
	return err
}

// nullLaunch is an emulated device whose launches check their function
// handle and do nothing else.
type nullLaunch struct{ *emulated.Device }

func (n nullLaunch) Launch(ctx context.Context, c backend.Ctx, f backend.Function, cfg backend.LaunchConfig) error {
	_, err := n.FuncGetAttribute(ctx, c, f, 0)
	return err
}

// CUdevice_attribute values clusterLaunch reports as supported.
const (
	attrCooperativeLaunch = 95
	attrClusterLaunch     = 120
)

// clusterLaunch is a device that claims cluster and cooperative launch
// support and shows each such launch to seen before running it plainly.
type clusterLaunch struct {
	backend.Device
	seen func(backend.LaunchConfig)
}

func (d clusterLaunch) DeviceAttribute(ctx context.Context, attr, dev int32) (int32, error) {
	v, err := d.Device.DeviceAttribute(ctx, attr, dev)
	if err == nil && (attr == attrCooperativeLaunch || attr == attrClusterLaunch) {
		v = 1
	}
	return v, err
}

func (d clusterLaunch) Launch(ctx context.Context, c backend.Ctx, f backend.Function, cfg backend.LaunchConfig) error {
	if cfg.Clustered() || cfg.Cooperative {
		d.seen(cfg)
		cfg.Cluster, cfg.Cooperative = [3]uint32{}, false
	}
	return d.Device.Launch(ctx, c, f, cfg)
}
