package tlsrec

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// streamConn is a net.Conn that reads a fixed stream and discards what is
// written to it.
type streamConn struct {
	r *bytes.Reader
}

func (c *streamConn) Read(p []byte) (int, error)       { return c.r.Read(p) }
func (c *streamConn) Write(p []byte) (int, error)      { return len(p), nil }
func (c *streamConn) Close() error                     { return nil }
func (c *streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

var (
	fuzzPKIOnce sync.Once
	fuzzServer  *tls.Config
)

// FuzzServer feeds arbitrary bytes to the server side of the handshake as
// the client's stream: it must fail cleanly, never panic or hang. The
// seeds are a real ClientHello cut short at several points (a whole one
// makes each run do the server's key exchange and signature, which under
// the fuzzer's instrumentation takes seconds) and the first bytes of other
// protocols.
func FuzzServer(f *testing.F) {
	hello := clientHello(f)
	for _, n := range []int{headerLen, headerLen + 4, headerLen + 40, len(hello) / 2, len(hello) - 1} {
		f.Add(hello[:n])
	}
	f.Add([]byte("GPUH\x01\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00"))
	f.Add([]byte{22, 3, 1, 0xff, 0xff})
	f.Add([]byte{22, 3, 3, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		fuzzPKIOnce.Do(func() { fuzzServer = newPKI(t).server })
		c, err := Server(&streamConn{r: bytes.NewReader(b)}, fuzzServer)
		if err == nil {
			// Only a complete, valid handshake gets here; reading on must
			// then end cleanly too.
			io.Copy(io.Discard, c)
		}
	})
}

// clientHello records what crypto/tls's client sends first.
func clientHello(f *testing.F) []byte {
	p := newPKI(f)
	a, b := net.Pipe()
	go tls.Client(a, p.client).Handshake()
	buf := make([]byte, 4096)
	n, _ := b.Read(buf)
	a.Close()
	b.Close()
	return append([]byte(nil), buf[:n]...)
}

// FuzzRecords feeds arbitrary record streams to a Conn after the
// handshake, and arbitrary plaintexts of every content type sealed under
// the connection's keys: alerts, handshake messages, padding. Reading
// must end with an error or EOF, never panic.
func FuzzRecords(f *testing.F) {
	secret := bytes.Repeat([]byte{7}, 32)
	st := State{Suite: tls.TLS_AES_128_GCM_SHA256, In: Direction{Secret: secret}, Out: Direction{Secret: secret}}
	f.Add(byte(typeApplicationData), []byte("hello"), false)
	f.Add(byte(typeHandshake), []byte{handshakeKeyUpdate, 0, 0, 1, 1}, false)
	f.Add(byte(typeHandshake), []byte{handshakeKeyUpdate, 0, 0, 1, 0, 24}, false)
	f.Add(byte(typeAlert), []byte{1, 0}, false)
	f.Add(byte(typeAlert), []byte{2, 20, 0}, false)
	f.Add(byte(0), []byte{0, 0, 0}, false)
	f.Add(byte(typeApplicationData), []byte{23, 3, 3, 0, 17, 1, 2, 3}, true)
	f.Fuzz(func(t *testing.T, typ byte, body []byte, raw bool) {
		stream := body
		if !raw {
			if len(body) > maxPlaintext {
				body = body[:maxPlaintext]
			}
			peer, err := New(&streamConn{r: bytes.NewReader(nil)}, st)
			if err != nil {
				t.Fatal(err)
			}
			stream = peer.seal(nil, typ, body)
			stream = peer.seal(stream, typeApplicationData, []byte("after"))
		}
		c, err := New(&streamConn{r: bytes.NewReader(stream)}, st)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 7)
		for i := 0; i < 1<<16; i++ {
			if _, err := c.Read(buf); err != nil {
				c.State()
				return
			}
		}
		t.Fatal("reading a finite stream did not end")
	})
}
