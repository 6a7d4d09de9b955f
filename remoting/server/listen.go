// Package server is gpud's client listener: it accepts connections on
// --listen, bounds and times the handshake (TLS 1.3 first, when gpud has a
// certificate), checks the token, and hands each connection that passed
// to the session table (package session), as a new session or a client
// coming back to its own, with the principal its token names (the
// administrator or a tenant) in the context. A refused connection gets at
// most one Welcome that says why, and nothing it does can touch another
// session.
package server

import (
	"bytes"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
	"github.com/gpuctl/gpuctl/remoting/wire"
	"github.com/gpuctl/gpuctl/tenant"
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
// *session.Manager is gpud's. rec is the connection's TLS record layer
// right after the Hello (nil for a plaintext connection): whoever serves
// conn carries on from it.
type Sessions interface {
	// Create starts a new session served on conn and returns its id; rec
	// is conn's TLS record layer (nil for plaintext), hello the client's
	// (what it asked for: keepalives).
	Create(ctx context.Context, conn *net.TCPConn, rec *tlsrec.State, hello *wire.Hello) (string, error)
	// Resume gives a returning client its session back. A session that
	// moved to another host answers with an error that has a
	// MovedTo() string method; an unknown session or a wrong secret with
	// an errs.NotFound error.
	Resume(ctx context.Context, conn *net.TCPConn, rec *tlsrec.State, hello *wire.Hello) error
}

// moved is the error a session that migrated away answers a resume with.
type moved interface{ MovedTo() string }

// preempted is the error a session that waits in its image for device
// memory answers a resume with; its client waits (wire.StatusPreempted).
type preempted interface{ Preempted() bool }

// Authenticator tells who a client's token stands for: the host's
// administrator or a tenant. *tenant.Set is gpud's.
type Authenticator interface {
	Identify(token string) (who tenant.Principal, ok bool)
}

// Listener accepts clients on --listen and routes them to sessions.
type Listener struct {
	Sessions Sessions
	// Auth identifies a client by its token; the session table gets the
	// principal in the context of Create and Resume. Nil: Token is the
	// one token, the administrator's.
	Auth  Authenticator
	Token string
	// Audit, when set, gets one line per handshake that asks for a
	// session: tenant, action (session.create, session.resume), subject
	// and result, as the control API's audit lines.
	Audit *slog.Logger
	// HandshakeTimeout and MaxHandshakes default to the constants above.
	HandshakeTimeout time.Duration
	MaxHandshakes    int
	Metrics          *Metrics // nil: unregistered
	Log              *slog.Logger
	// TLS, when set, serves every connection over TLS 1.3 with its
	// certificate (gpud --tls-cert); the handshake counts against
	// HandshakeTimeout.
	TLS *tls.Config
	// KernelTLS moves each TLS connection's record layer into the kernel
	// (kTLS) where it has it, so that the worker reads and writes
	// plaintext and the kernel encrypts.
	KernelTLS bool

	wg        sync.WaitGroup
	kernelLog sync.Once
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

// identify names the principal a token stands for.
func (l *Listener) identify(token string) (tenant.Principal, bool) {
	if l.Auth != nil {
		return l.Auth.Identify(token)
	}
	return tenant.Admin(), subtle.ConstantTimeCompare([]byte(token), []byte(l.Token)) == 1
}

// audit writes a handshake's audit line.
func (l *Listener) audit(ctx context.Context, who, action, id, peer, result string) {
	if l.Audit == nil {
		return
	}
	subject := ""
	if id != "" {
		subject = "session " + id
	}
	level := slog.LevelInfo
	if result != "ok" {
		level = slog.LevelWarn
	}
	l.Audit.LogAttrs(ctx, level, "audit", slog.String("tenant", who), slog.String("action", action),
		slog.String("subject", subject), slog.String("result", result), slog.String("peer", peer))
}

// handshake runs TLS (when configured), reads the Hello under a deadline,
// authenticates it, and hands the connection to a new or resumed session.
// Every refusal answers with a Welcome that says why (when the peer got as
// far as a Hello) and closes the connection; nothing here can affect
// another session.
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
	// conn is what the handshake reads and writes: the socket, or its TLS
	// record layer.
	var conn net.Conn = c
	var rec *tlsrec.Conn
	if l.TLS != nil {
		var err error
		if rec, err = tlsrec.Server(c, l.TLS); err != nil {
			l.refuseTLS(c, err, met, log)
			return
		}
		conn = rec
	}
	first := &firstBytes{r: conn}
	hello, err := wire.ReadHello(first)
	if err != nil {
		switch {
		case errors.Is(err, wire.ErrVersion) && hello != nil:
			met.WithLabelValues("version_mismatch").Inc()
			_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusVersionMismatch, Message: err.Error()})
		case rec == nil && tlsrec.LooksLikeClientHello(first.b):
			met.WithLabelValues("tls_client").Inc()
			_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusRefused, Message: tlsClientMessage})
			log.Info("refused connection: a TLS client on a plaintext listener; start gpud with --tls-cert and --tls-key, or unset GPUCTL_TLS_CA on the client")
			return
		case errors.Is(err, wire.ErrProtocol):
			met.WithLabelValues("bad_hello").Inc()
			_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusRefused, Message: err.Error()})
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
	action := "session.create"
	if hello.Resume() {
		action = "session.resume"
	}
	who, ok := l.identify(hello.Token)
	if !ok {
		met.WithLabelValues("bad_token").Inc()
		log.Warn("refused connection: wrong token")
		l.audit(ctx, "(none)", action, hello.SessionID, peer, "unauthenticated")
		_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusBadToken,
			Message: "wrong token: set GPUCTL_TOKEN or GPUCTL_TOKEN_FILE to the host's token (STATE_DIR/token) or your tenant's"})
		return
	}
	// The worker clears the deadline on its own descriptor; gpud's copy
	// is only held, so clear ours too.
	_ = c.SetDeadline(time.Time{})
	var st *tlsrec.State
	tlsDesc := "off"
	if rec != nil {
		tlsDesc = rec.SuiteName()
		if l.KernelTLS {
			tx, rx, err := rec.Offload()
			l.kernelLog.Do(func() {
				if err != nil {
					log.Info("kernel TLS offload unavailable; TLS records are sealed in user space", "err", err)
				} else {
					log.Info("kernel TLS offload in use", "send", tx, "receive", rx)
				}
			})
			if tx || rx {
				tlsDesc += " (kernel)"
			}
		}
		s := rec.State()
		st = &s
	}
	sctx, cancel := context.WithTimeout(wire.NewAttrsContext(tenant.NewContext(ctx, who), hello.Attrs), sessionStartTimeout)
	defer cancel()
	if !hello.Resume() {
		id, err := l.Sessions.Create(sctx, c, st, hello)
		if err != nil {
			l.audit(ctx, who.String(), action, "", peer, string(errs.KindOf(err)))
			msg := "gpud could not start a session: " + err.Error()
			switch errs.KindOf(err) {
			case errs.ResourceExhausted, errs.FailedPrecondition, errs.InvalidArgument:
				// A limit or the configuration, not a failure: the
				// message says it all, and the client prints it.
				met.WithLabelValues("refused").Inc()
				log.Info("refused a session", "tenant", who.String(), "err", err)
				msg = err.Error()
			default:
				met.WithLabelValues("start_failed").Inc()
				log.Error("could not start a session", "err", err)
			}
			_ = c.SetDeadline(time.Now().Add(timeout))
			_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusRefused, Message: msg})
			return
		}
		met.WithLabelValues("new").Inc()
		log.Info("new session", "session", id, "tenant", who.String(), "tls", tlsDesc)
		l.audit(ctx, who.String(), action, id, peer, "ok")
		handedOver = true
		forget(rec)
		return
	}
	err = l.Sessions.Resume(sctx, c, st, hello)
	var (
		mv moved
		pr preempted
	)
	result := "ok"
	switch {
	case errors.As(err, &mv):
		result = "moved"
	case errors.As(err, &pr):
		result = "preempted"
	case err != nil:
		result = string(errs.KindOf(err))
	}
	l.audit(ctx, who.String(), action, hello.SessionID, peer, result)
	switch {
	case err == nil:
		met.WithLabelValues("resumed").Inc()
		log.Info("client reconnected", "session", hello.SessionID, "last_sent", hello.LastSeq, "tls", tlsDesc)
		handedOver = true
		forget(rec)
		return
	case errors.As(err, &mv):
		met.WithLabelValues("moved").Inc()
		log.Info("sent a returning client to its session's new host", "session", hello.SessionID, "to", mv.MovedTo())
		_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusMoved, Message: mv.MovedTo()})
	case errors.As(err, &pr):
		met.WithLabelValues("preempted").Inc()
		log.Debug("a preempted session's client is waiting", "session", hello.SessionID)
		_ = c.SetDeadline(time.Now().Add(timeout))
		_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusPreempted, Message: "waiting for device memory"})
	case errs.IsNotFound(err):
		met.WithLabelValues("unknown_session").Inc()
		log.Info("refused a resume of an unknown session (or wrong secret)", "session", hello.SessionID)
		_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusUnknownSession, Message: "no such session on this host"})
	default:
		met.WithLabelValues("busy").Inc()
		log.Info("refused a resume", "session", hello.SessionID, "err", err)
		_ = c.SetDeadline(time.Now().Add(timeout))
		_ = wire.WriteWelcome(conn, &wire.Welcome{Status: wire.StatusRefused, Message: err.Error()})
	}
}

// Messages for a client that speaks the other side of TLS than the
// listener. Each is the one line the client prints.
const (
	tlsRequiredMessage = "gpud serves --listen over TLS: set GPUCTL_TLS_CA to the CA that signed its certificate (gpuctl run --tls-ca FILE)"
	tlsClientMessage   = "gpud serves --listen without TLS: unset GPUCTL_TLS_CA, or start gpud with --tls-cert and --tls-key"
)

// refuseTLS answers a connection whose TLS handshake failed. A plaintext
// gpuctl client gets a plaintext Welcome that says to turn TLS on, since
// it could not read anything else; anything else is closed.
func (l *Listener) refuseTLS(c *net.TCPConn, err error, met *prometheus.CounterVec, log *slog.Logger) {
	var nt *tlsrec.NotTLSError
	switch {
	case errors.As(err, &nt) && bytes.HasPrefix(nt.Prefix, wire.HelloMagic[:]):
		met.WithLabelValues("plaintext_client").Inc()
		log.Info("refused connection: a plaintext client on a TLS listener; it must set GPUCTL_TLS_CA")
		_ = wire.WriteWelcome(c, &wire.Welcome{Status: wire.StatusTLSRequired, Message: tlsRequiredMessage})
	case errors.Is(err, os.ErrDeadlineExceeded):
		met.WithLabelValues("timeout").Inc()
		log.Info("refused connection", "err", err)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		met.WithLabelValues("closed").Inc()
		log.Info("refused connection", "err", err)
	default:
		met.WithLabelValues("tls_failed").Inc()
		log.Info("refused connection: TLS handshake failed", "err", err)
	}
}

// forget drops gpud's copy of a connection's keys once a worker serves it.
func forget(rec *tlsrec.Conn) {
	if rec != nil {
		rec.Forget()
	}
}

// firstBytes remembers the first bytes read through it, so that a
// handshake that fails can tell what the peer spoke.
type firstBytes struct {
	r io.Reader
	b []byte
}

func (f *firstBytes) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if len(f.b) < 8 {
		f.b = append(f.b, p[:min(n, 8-len(f.b))]...)
	}
	return n, err
}
