// Package server is gpud's client listener: it accepts connections on
// --listen, bounds and times the handshake, checks the token, and hands
// each connection that passed to the session table (package session), as
// a new session or a client coming back to its own. A refused connection
// gets at most one Welcome that says why, and nothing it does can touch
// another session.
package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// Defaults for the listener's protection against misbehaving peers.
const (
	// DefaultHandshakeTimeout bounds how long a connection may take to
	// send its Hello: a half-open or silent peer is dropped after it.
	DefaultHandshakeTimeout = 5 * time.Second
	// DefaultMaxHandshakes bounds concurrent handshakes, so a flood of
	// idle connections cannot exhaust gpud.
	DefaultMaxHandshakes = 128
	// sessionStartTimeout bounds starting a worker for a new session.
	sessionStartTimeout = 30 * time.Second
)

// Sessions is the session table as the listener hands it connections;
// *session.Manager is gpud's.
type Sessions interface {
	// Create starts a new session served on conn and returns its id;
	// hello is the client's (what it asked for: keepalives).
	Create(ctx context.Context, conn *net.TCPConn, hello *wire.Hello) (string, error)
	// Resume gives a returning client its session back. A session that
	// moved to another host answers with an error that has a
	// MovedTo() string method; an unknown session or a wrong secret with
	// an errs.NotFound error.
	Resume(ctx context.Context, conn *net.TCPConn, hello *wire.Hello) error
}

// moved is the error a session that migrated away answers a resume with.
type moved interface{ MovedTo() string }

// Listener accepts clients on --listen and routes them to sessions.
type Listener struct {
	Sessions Sessions
	// Token is the host token every client must present.
	Token string
	// HandshakeTimeout and MaxHandshakes default to the constants above.
	HandshakeTimeout time.Duration
	MaxHandshakes    int
	Metrics          *Metrics // nil: unregistered
	Log              *slog.Logger

	wg sync.WaitGroup
}

// Serve accepts connections on ln until ctx ends or ln is closed, then
// waits for handshakes in progress. It returns nil after ctx ends.
func (l *Listener) Serve(ctx context.Context, ln net.Listener) error {
	log := l.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	timeout := l.HandshakeTimeout
	if timeout <= 0 {
		timeout = DefaultHandshakeTimeout
	}
	maxHS := l.MaxHandshakes
	if maxHS <= 0 {
		maxHS = DefaultMaxHandshakes
	}
	met := l.Metrics
	if met == nil {
		met = NewMetrics(nil)
	}
	sem := make(chan struct{}, maxHS)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	defer l.wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue
			}
			log.Warn("accept", "err", err)
			time.Sleep(50 * time.Millisecond) // e.g. out of descriptors: do not spin
			continue
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		select {
		case sem <- struct{}{}:
		default:
			log.Warn("too many handshakes in progress; refusing a connection", "peer", c.RemoteAddr())
			met.connections.WithLabelValues("overloaded").Inc()
			tc.SetLinger(0)
			tc.Close()
			continue
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			defer func() { <-sem }()
			l.handshake(ctx, tc, timeout, met, log)
		}()
	}
}

// handshake reads the Hello under a deadline, authenticates it, and hands
// the connection to a new or resumed session. Every refusal answers with
// a Welcome that says why (when the peer got as far as a Hello) and
// closes the connection; nothing here can affect another session.
func (l *Listener) handshake(ctx context.Context, c *net.TCPConn, timeout time.Duration, metrics *Metrics, log *slog.Logger) {
	peer := c.RemoteAddr().String()
	log = log.With("peer", peer)
	met := metrics.connections
	handedOver := false
	defer func() {
		if !handedOver {
			c.Close()
		}
	}()
	_ = c.SetDeadline(time.Now().Add(timeout))
	hello, err := wire.ReadHello(c)
	if err != nil {
		switch {
		case errors.Is(err, wire.ErrVersion) && hello != nil:
			met.WithLabelValues("version_mismatch").Inc()
			_ = wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusVersionMismatch, Message: err.Error()})
		case errors.Is(err, wire.ErrProtocol):
			met.WithLabelValues("bad_hello").Inc()
			_ = wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusRefused, Message: err.Error()})
		case errors.Is(err, os.ErrDeadlineExceeded):
			met.WithLabelValues("timeout").Inc()
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
			met.WithLabelValues("closed").Inc()
		default:
			met.WithLabelValues("bad_hello").Inc()
		}
		log.Info("refused connection", "err", err)
		return
	}
	if subtle.ConstantTimeCompare([]byte(hello.Token), []byte(l.Token)) != 1 {
		met.WithLabelValues("bad_token").Inc()
		log.Warn("refused connection: wrong token")
		_ = wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusBadToken,
			Message: "wrong token: set GPUCTL_TOKEN or GPUCTL_TOKEN_FILE to the host's token (STATE_DIR/token)"})
		return
	}
	// The worker clears the deadline on its own descriptor; gpud's copy
	// is only held, so clear ours too.
	_ = c.SetDeadline(time.Time{})
	sctx, cancel := context.WithTimeout(ctx, sessionStartTimeout)
	defer cancel()
	if !hello.Resume() {
		id, err := l.Sessions.Create(sctx, c, hello)
		if err != nil {
			met.WithLabelValues("start_failed").Inc()
			log.Error("could not start a session", "err", err)
			_ = c.SetDeadline(time.Now().Add(timeout))
			_ = wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusRefused, Message: "gpud could not start a session: " + err.Error()})
			return
		}
		met.WithLabelValues("new").Inc()
		log.Info("new session", "session", id)
		handedOver = true
		return
	}
	err = l.Sessions.Resume(sctx, c, hello)
	var mv moved
	switch {
	case err == nil:
		met.WithLabelValues("resumed").Inc()
		log.Info("client reconnected", "session", hello.SessionID, "last_sent", hello.LastSeq)
		handedOver = true
		return
	case errors.As(err, &mv):
		met.WithLabelValues("moved").Inc()
		log.Info("sent a returning client to its session's new host", "session", hello.SessionID, "to", mv.MovedTo())
		_ = wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusMoved, Message: mv.MovedTo()})
	case errs.IsNotFound(err):
		met.WithLabelValues("unknown_session").Inc()
		log.Info("refused a resume of an unknown session (or wrong secret)", "session", hello.SessionID)
		_ = wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusUnknownSession, Message: "no such session on this host"})
	default:
		met.WithLabelValues("busy").Inc()
		log.Info("refused a resume", "session", hello.SessionID, "err", err)
		_ = c.SetDeadline(time.Now().Add(timeout))
		_ = wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusRefused, Message: err.Error()})
	}
}
