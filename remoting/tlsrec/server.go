package tlsrec

import (
	"bytes"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
)

// NotTLSError is Server's answer to a peer whose first bytes are not a
// TLS handshake record: a client of another protocol (the plaintext gpuctl
// protocol, HTTP) or garbage. Prefix holds those bytes, so that the caller
// can answer in the protocol they belong to.
type NotTLSError struct{ Prefix []byte }

func (e *NotTLSError) Error() string {
	return fmt.Sprintf("tls: the peer's first bytes %q are not a TLS handshake", e.Prefix)
}

// LooksLikeClientHello reports whether b starts like a TLS ClientHello
// record: a plaintext listener uses it to tell a TLS client from garbage.
func LooksLikeClientHello(b []byte) bool {
	return len(b) >= 3 && b[0] == typeHandshake && b[1] == 3 && b[2] <= 4
}

// Server runs the server side of a TLS 1.3 handshake on nc and returns the
// connection's record layer, positioned at the client's first application
// data. cfg supplies the certificate (and, if set, client
// authentication); Server imposes TLS 1.3 and no session tickets on a
// copy of it. The handshake is bounded by nc's deadline, which the caller
// sets.
//
// The returned Conn reads one record at a time (no read-ahead), so that
// the kernel can take over receiving (Offload) or another process can be
// handed the socket at a record boundary.
func Server(nc net.Conn, cfg *tls.Config) (*Conn, error) {
	var hdr [headerLen]byte
	if n, err := io.ReadFull(nc, hdr[:]); err != nil {
		if n > 0 && hdr[0] != typeHandshake {
			return nil, &NotTLSError{Prefix: append([]byte(nil), hdr[:n]...)}
		}
		return nil, fmt.Errorf("tls: read the client's first record: %w", err)
	}
	if hdr[0] != typeHandshake {
		return nil, &NotTLSError{Prefix: append([]byte(nil), hdr[:]...)}
	}
	kl := &keyLog{}
	c := cfg.Clone()
	c.MinVersion, c.MaxVersion = tls.VersionTLS13, tls.VersionTLS13
	c.SessionTicketsDisabled = true
	c.KeyLogWriter = kl
	br := &recordBounded{Conn: nc, prefix: hdr[:]}
	tc := tls.Server(br, c)
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("tls: handshake: %w", err)
	}
	// tc is dropped, not closed: closing it would send a close_notify.
	cs := tc.ConnectionState()
	if cs.Version != tls.VersionTLS13 {
		return nil, fmt.Errorf("tls: negotiated version %#04x, not TLS 1.3", cs.Version)
	}
	if br.inRecord() {
		return nil, errors.New("tls: the handshake ended inside a record")
	}
	in, out := kl.take()
	if in == nil || out == nil {
		return nil, errors.New("tls: the handshake did not log its traffic secrets")
	}
	conn, err := New(nc, State{Suite: cs.CipherSuite, In: Direction{Secret: in}, Out: Direction{Secret: out}})
	clear(in)
	clear(out)
	if err != nil {
		return nil, err
	}
	conn.exact = true
	return conn, nil
}

// ReadAhead lets the Conn read past the record it needs, several records
// per read from the socket: what a process that keeps the connection
// wants, once nobody else will take over receiving.
func (c *Conn) ReadAhead() {
	c.rmu.Lock()
	c.exact = false
	c.rmu.Unlock()
}

// Key log labels of the application traffic secrets (NSS key log format).
const (
	labelClientTraffic = "CLIENT_TRAFFIC_SECRET_0"
	labelServerTraffic = "SERVER_TRAFFIC_SECRET_0"
)

// keyLog captures one handshake's secrets from crypto/tls's key log.
type keyLog struct {
	mu      sync.Mutex
	secrets map[string][]byte
}

func (k *keyLog) Write(line []byte) (int, error) {
	f := bytes.Fields(line)
	if len(f) == 3 {
		if s, err := hex.DecodeString(string(f[2])); err == nil {
			k.mu.Lock()
			if k.secrets == nil {
				k.secrets = map[string][]byte{}
			}
			k.secrets[string(f[0])] = s
			k.mu.Unlock()
		}
	}
	return len(line), nil
}

// take returns the application traffic secrets and wipes the others
// (handshake secrets) from memory.
func (k *keyLog) take() (client, server []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	client, server = k.secrets[labelClientTraffic], k.secrets[labelServerTraffic]
	for label, v := range k.secrets {
		if label != labelClientTraffic && label != labelServerTraffic {
			clear(v)
		}
	}
	k.secrets = nil
	return client, server
}

// recordBounded gives crypto/tls the socket's bytes one record at a time,
// never more than the rest of the current record, so that the handshake
// consumes nothing of the application data that follows it.
type recordBounded struct {
	net.Conn
	prefix []byte // the first record header, already read
	hdr    [headerLen]byte
	hn     int // header bytes seen of the current record
	left   int // body bytes left of the current record
}

func (r *recordBounded) Read(p []byte) (int, error) {
	limit := r.left
	if r.hn < headerLen {
		limit = headerLen - r.hn
	}
	if len(p) > limit {
		p = p[:limit]
	}
	var n int
	var err error
	if len(r.prefix) > 0 {
		n = copy(p, r.prefix)
		r.prefix = r.prefix[n:]
	} else {
		n, err = r.Conn.Read(p)
	}
	if r.hn < headerLen {
		copy(r.hdr[r.hn:], p[:n])
		r.hn += n
		if r.hn == headerLen {
			r.left = int(r.hdr[3])<<8 | int(r.hdr[4])
			if r.left == 0 {
				r.hn = 0
			}
		}
	} else {
		r.left -= n
		if r.left == 0 {
			r.hn = 0
		}
	}
	return n, err
}

// inRecord reports bytes of a record that crypto/tls has not finished.
func (r *recordBounded) inRecord() bool { return r.hn != 0 || len(r.prefix) > 0 }
