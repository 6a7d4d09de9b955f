package tlsrec

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/control/tlstest"
)

// pki is a CA and a server certificate for 127.0.0.1, loaded as configs.
type pki struct {
	server *tls.Config
	client *tls.Config
}

func newPKI(t testing.TB) pki {
	t.Helper()
	ca := tlstest.NewCA(t, "tlsrec")
	cert := ca.Issue(t, "gpud", "127.0.0.1")
	pair, err := tls.LoadX509KeyPair(cert.CertFile, cert.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	return pki{
		server: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS13},
		client: &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS13},
	}
}

// pair is a loopback TCP connection: srv is the server's socket, cli the
// client's.
func tcpPair(t testing.TB) (srv, cli *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ch := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		ch <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	s := <-ch
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return s.(*net.TCPConn), c.(*net.TCPConn)
}

// handshake connects a crypto/tls client to Server over loopback. The
// client's key log is returned too, so a test can build the client side's
// record layer from it.
func handshake(t testing.TB, p pki) (srv *Conn, cli *tls.Conn, cliLog *keyLog, sock *net.TCPConn) {
	t.Helper()
	s, c := tcpPair(t)
	cliLog = &keyLog{}
	cfg := p.client.Clone()
	cfg.KeyLogWriter = cliLog
	cli = tls.Client(c, cfg)
	errc := make(chan error, 1)
	go func() { errc <- cli.Handshake() }()
	s.SetDeadline(time.Now().Add(10 * time.Second))
	srv, err := Server(s, p.server)
	if err != nil {
		t.Fatalf("Server: %v", err)
	}
	s.SetDeadline(time.Time{})
	if err := <-errc; err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	return srv, cli, cliLog, s
}

// clientConn builds the client side's record layer from a crypto/tls
// client's logged secrets: a second implementation on the other end, used
// where crypto/tls offers no way to send what a test needs.
func clientConn(t testing.TB, cli *tls.Conn, kl *keyLog) *Conn {
	t.Helper()
	in, out := kl.take()
	c, err := New(cli.NetConn(), State{Suite: cli.ConnectionState().CipherSuite, In: Direction{Secret: out}, Out: Direction{Secret: in}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// TestAgainstCryptoTLS exchanges messages of every size class with
// crypto/tls's client, in both directions, reading into buffers smaller
// and larger than a record.
func TestAgainstCryptoTLS(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		name   string
		size   int
		bufLen int // the server's read buffer
	}{
		{"one byte", 1, 64 << 10},
		{"small, small buffer", 100, 7},
		{"one full record", maxPlaintext, 1 << 20},
		{"record and a byte", maxPlaintext + 1, 1 << 20},
		{"1 MiB into a 1 MiB buffer", 1 << 20, 1 << 20},
		{"1 MiB into 1000-byte reads", 1 << 20, 1000},
		{"8 MiB", 8 << 20, 256 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli, _, _ := handshake(t, p)
			if srv.SuiteName() == "" {
				t.Error("no suite name")
			}
			up, down := random(tc.size), random(tc.size)
			var wg sync.WaitGroup
			wg.Add(1)
			var cerr error
			var got []byte
			go func() {
				defer wg.Done()
				if _, cerr = cli.Write(up); cerr != nil {
					return
				}
				got = make([]byte, len(down))
				_, cerr = io.ReadFull(cli, got)
			}()
			buf := make([]byte, tc.bufLen)
			var recv []byte
			for len(recv) < len(up) {
				n, err := srv.Read(buf)
				if err != nil {
					t.Fatalf("server read after %d bytes: %v", len(recv), err)
				}
				recv = append(recv, buf[:n]...)
			}
			if !bytes.Equal(recv, up) {
				t.Fatal("the server read other bytes than the client wrote")
			}
			if n, err := srv.Write(down); err != nil || n != len(down) {
				t.Fatalf("server write: %d, %v", n, err)
			}
			wg.Wait()
			if cerr != nil {
				t.Fatalf("client: %v", cerr)
			}
			if !bytes.Equal(got, down) {
				t.Fatal("the client read other bytes than the server wrote")
			}
			// close_notify from the client ends the server's stream.
			cli.Close()
			if n, err := srv.Read(buf); n != 0 || err != io.EOF {
				t.Fatalf("after the client's close_notify: %d, %v; want 0, EOF", n, err)
			}
		})
	}
}

// TestHandOver passes the connection between record layers, as gpud and
// its worker do, in the middle of a stream: each side stops, drains,
// exports its State and a new Conn on a duplicate of the socket carries
// on. A read interrupted by a deadline in the middle of a record keeps
// the partial record in the State.
func TestHandOver(t *testing.T) {
	p := newPKI(t)
	srv, cli, kl, sock := handshake(t, p)
	peer := clientConn(t, cli, kl)

	// A record whose first half has arrived.
	rec := peer.seal(nil, typeApplicationData, []byte("first record, cut in two"))
	rec = append(rec, peer.seal(nil, typeApplicationData, []byte("+second"))...)
	cut := 11
	raw := cli.NetConn()
	if _, err := raw.Write(rec[:cut]); err != nil {
		t.Fatal(err)
	}
	srv.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	buf := make([]byte, 64)
	n, err := srv.Read(buf)
	if n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read of half a record: %d, %v; want a timeout", n, err)
	}
	srv.SetReadDeadline(time.Time{})
	srv.ReadAhead()
	srv.Drain()
	st := srv.State()
	if !bytes.Equal(st.Partial, rec[:cut]) || st.In.Seq != 0 || st.Out.Seq != 0 || st.Err != "" {
		t.Fatalf("state after a partial record: partial %d bytes, seq in %d out %d, err %q", len(st.Partial), st.In.Seq, st.Out.Seq, st.Err)
	}
	srv.Forget()
	if _, err := srv.Read(buf); err == nil {
		t.Fatal("a forgotten Conn still reads")
	}

	// The "worker": a new Conn on a duplicate descriptor.
	f, err := sock.File()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	w, err := New(nc, st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write(rec[cut:]); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for len(got) < len("first record, cut in two+second") {
		n, err := w.Read(buf[:5]) // small reads leave plaintext pending
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, buf[:n]...)
		if len(got) == 10 {
			break // hand over again with plaintext pending
		}
	}
	pend := w.Drain()
	st2 := w.State()
	if st2.In.Seq != 2 || len(st2.Partial) != 0 {
		t.Fatalf("second state: in seq %d, %d partial bytes", st2.In.Seq, len(st2.Partial))
	}
	got = append(got, pend...)
	if string(got) != "first record, cut in two+second" {
		t.Fatalf("read %q across the hand-over", got)
	}
	// The worker answers; the client reads it with crypto/tls. Then gpud
	// (back with the state) writes once more.
	if _, err := w.Write([]byte("reply from the worker")); err != nil {
		t.Fatal(err)
	}
	st3 := w.State()
	if st3.Out.Seq != 1 {
		t.Fatalf("out seq %d after one record", st3.Out.Seq)
	}
	back, err := New(sock, st3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := back.Write([]byte("; moved to elsewhere")); err != nil {
		t.Fatal(err)
	}
	want := "reply from the worker; moved to elsewhere"
	rb := make([]byte, len(want))
	cli.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(cli, rb); err != nil || string(rb) != want {
		t.Fatalf("crypto/tls read %q, %v; want %q", rb, err, want)
	}
}

// TestKeyUpdate: a peer's KeyUpdate that asks for ours is answered, and
// both directions carry on under the new keys; crypto/tls on the other
// end follows our update.
func TestKeyUpdate(t *testing.T) {
	p := newPKI(t)
	srv, cli, kl, _ := handshake(t, p)
	peer := clientConn(t, cli, kl)
	// The peer updates its sending keys and asks for ours; then sends data
	// under the new key.
	msg := peer.seal(nil, typeHandshake, []byte{handshakeKeyUpdate, 0, 0, 1, 1})
	if err := peer.out.rekey(peer.suite, peer.suite.nextSecret(peer.out.secret)); err != nil {
		t.Fatal(err)
	}
	msg = append(msg, peer.seal(nil, typeApplicationData, []byte("after the update"))...)
	if _, err := cli.NetConn().Write(msg); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	n, err := srv.Read(buf)
	if err != nil || string(buf[:n]) != "after the update" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if srv.in.seq != 1 || srv.out.seq != 0 {
		t.Fatalf("after the update: in seq %d, out seq %d; want 1 and 0", srv.in.seq, srv.out.seq)
	}
	if _, err := srv.Write([]byte("answered under new keys")); err != nil {
		t.Fatal(err)
	}
	// Our peer reads the server's KeyUpdate, then the data.
	n, err = peer.Read(buf)
	if err != nil || string(buf[:n]) != "answered under new keys" {
		t.Fatalf("peer read %q, %v", buf[:n], err)
	}
	// A KeyUpdate with a bad request value is refused with an alert.
	bad := peer.seal(nil, typeHandshake, []byte{handshakeKeyUpdate, 0, 0, 1, 7})
	cli.NetConn().Write(bad)
	if _, err := srv.Read(buf); err == nil || !strings.Contains(err.Error(), "request_update 7") {
		t.Fatalf("bad KeyUpdate: %v", err)
	}
	if _, err := peer.Read(buf); err == nil || !strings.Contains(err.Error(), "illegal_parameter") {
		t.Fatalf("the peer was not told: %v", err)
	}
}

// TestBadInput: broken records end the connection with the right alert,
// and reading stays ended.
func TestBadInput(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		name   string
		record func(peer *Conn) []byte
		want   string
	}{
		{"tampered", func(peer *Conn) []byte {
			r := peer.seal(nil, typeApplicationData, []byte("hello"))
			r[headerLen] ^= 1
			return r
		}, "failed authentication"},
		{"oversized", func(peer *Conn) []byte { return []byte{23, 3, 3, 0xff, 0xff} }, "exceeds the limit"},
		{"unprotected change_cipher_spec", func(peer *Conn) []byte { return []byte{20, 3, 3, 0, 1, 1} }, "unprotected record of type 20"},
		{"too short", func(peer *Conn) []byte { return []byte{23, 3, 3, 0, 3, 1, 2, 3} }, "too short"},
		{"fatal alert", func(peer *Conn) []byte { return peer.seal(nil, typeAlert, []byte{2, 40}) }, "alert 40"},
		{"unknown content type", func(peer *Conn) []byte { return peer.seal(nil, 99, []byte("x")) }, "content type 99"},
		{"only padding", func(peer *Conn) []byte { return peer.seal(nil, 0, nil) }, "without a content type"},
		{"new session ticket", func(peer *Conn) []byte { return peer.seal(nil, typeHandshake, []byte{4, 0, 0, 0}) }, "handshake message of type 4"},
		{"split handshake message", func(peer *Conn) []byte { return peer.seal(nil, typeHandshake, []byte{24, 0}) }, "split across records"},
		{"closed mid-record", func(peer *Conn) []byte { return peer.seal(nil, typeApplicationData, []byte("x"))[:9] }, "middle of a record"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, cli, kl, _ := handshake(t, p)
			peer := clientConn(t, cli, kl)
			raw := cli.NetConn().(*net.TCPConn)
			raw.Write(tc.record(peer))
			raw.CloseWrite()
			buf := make([]byte, 100)
			_, err := srv.Read(buf)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if _, again := srv.Read(buf); again == nil || again.Error() != err.Error() {
				t.Fatalf("second read: %v; the first failed with %v", again, err)
			}
			if st := srv.State(); st.Err != err.Error() {
				t.Fatalf("State().Err = %q, want %q", st.Err, err.Error())
			}
		})
	}
}

// TestNotTLS: a peer that speaks something else is told apart by its
// first bytes.
func TestNotTLS(t *testing.T) {
	p := newPKI(t)
	for _, tc := range []struct {
		name   string
		send   []byte
		prefix string // "" when not a NotTLSError
	}{
		{"gpuctl hello", []byte("GPUH\x01\x00\x00\x00\x05\x00"), "GPUH\x01"},
		{"http", []byte("GET / HTTP/1.1\r\n\r\n"), "GET /"},
		{"two bytes then close", []byte("GP"), "GP"},
		{"nothing", nil, ""},
		{"a bogus client hello", []byte{22, 3, 1, 0, 4, 1, 0, 0, 0}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, c := tcpPair(t)
			c.Write(tc.send)
			c.CloseWrite()
			s.SetDeadline(time.Now().Add(5 * time.Second))
			_, err := Server(s, p.server)
			var nt *NotTLSError
			switch {
			case err == nil:
				t.Fatal("handshake succeeded")
			case tc.prefix == "" && errors.As(err, &nt):
				t.Fatalf("got %v, want a handshake failure", err)
			case tc.prefix != "" && (!errors.As(err, &nt) || string(nt.Prefix) != tc.prefix):
				t.Fatalf("got %v, want NotTLSError with prefix %q", err, tc.prefix)
			}
		})
	}
	if !LooksLikeClientHello([]byte{22, 3, 1, 2, 0}) || LooksLikeClientHello([]byte("GPUH")) {
		t.Error("LooksLikeClientHello")
	}
}

// TestOffload installs the keys in the kernel where it has TLS; crypto/tls
// on the other end must not notice, before or after a hand-over to a
// Conn made from the State.
func TestOffload(t *testing.T) {
	p := newPKI(t)
	srv, cli, _, sock := handshake(t, p)
	tx, rx, err := srv.Offload()
	if err != nil && !tx {
		t.Skipf("no kernel TLS here: %v", err)
	}
	if err != nil || !tx || !rx {
		t.Fatalf("offload: tx %v rx %v: %v", tx, rx, err)
	}
	if gtx, grx := srv.Kernel(); !gtx || !grx {
		t.Fatalf("Kernel() = %v, %v after offloading both", gtx, grx)
	}
	payload := random(3 << 20)
	go func() { cli.Write(payload) }()
	got := make([]byte, len(payload))
	if _, err := io.ReadFull(srv, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("kernel receive: %v", err)
	}
	st := srv.State()
	if !st.In.Kernel || !st.Out.Kernel || st.In.Secret != nil || st.Out.Secret != nil {
		t.Fatalf("state of an offloaded Conn: %+v", st)
	}
	w, err := New(sock, st)
	if err != nil {
		t.Fatal(err)
	}
	go func() { w.Write(payload) }()
	if _, err := io.ReadFull(cli, got); err != nil || !bytes.Equal(got, payload) {
		t.Fatalf("kernel send: %v", err)
	}
}

// TestStateErrors: New refuses states it cannot carry on from.
func TestStateErrors(t *testing.T) {
	s, _ := tcpPair(t)
	secret := random(32)
	for _, tc := range []struct {
		name string
		st   State
		want string
	}{
		{"unknown suite", State{Suite: 0x1304, In: Direction{Secret: secret}, Out: Direction{Secret: secret}}, "not a TLS 1.3 suite"},
		{"short secret", State{Suite: tls.TLS_AES_128_GCM_SHA256, In: Direction{Secret: secret[:16]}, Out: Direction{Secret: secret}}, "traffic secret of 16 bytes"},
		{"partial with kernel receive", State{Suite: tls.TLS_AES_128_GCM_SHA256, In: Direction{Kernel: true}, Out: Direction{Secret: secret}, Partial: []byte{23}}, "kernel receives"},
		{"oversized partial", State{Suite: tls.TLS_AES_128_GCM_SHA256, In: Direction{Secret: secret}, Out: Direction{Secret: secret}, Partial: make([]byte, rawCap+1)}, "exceed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(s, tc.st); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

// TestKeySchedule checks HKDF-Expand-Label against RFC 8448's simple
// 1-RTT trace (section 3): the server's application traffic keys.
func TestKeySchedule(t *testing.T) {
	s, _ := suiteByID(tls.TLS_AES_128_GCM_SHA256)
	secret, _ := hex.DecodeString("a11af9f05531f856ad47116b45a950328204b4f44bfb6b3a4b4f1f3fcb631643")
	key := s.expandLabel(secret, "key", 16)
	iv := s.expandLabel(secret, "iv", 12)
	if hex.EncodeToString(key) != "9f02283b6c9c07efc26bb9f2ac92e356" || hex.EncodeToString(iv) != "cf782b88dd83549aadf1e984" {
		t.Fatalf("key %x iv %x", key, iv)
	}
}

// TestOpenSSLClient runs OpenSSL's s_client against Server with each TLS
// 1.3 suite, asking for a KeyUpdate in the middle ("K" on its input): the
// other implementation the interposer uses.
func TestOpenSSLClient(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("no openssl command")
	}
	ca := tlstest.NewCA(t, "tlsrec")
	cert := ca.Issue(t, "gpud", "127.0.0.1")
	pair, err := tls.LoadX509KeyPair(cert.CertFile, cert.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{pair}}
	for _, suite := range []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_AES_256_GCM_SHA384, tls.TLS_CHACHA20_POLY1305_SHA256} {
		t.Run(tls.CipherSuiteName(suite), func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, openssl, "s_client", "-connect", ln.Addr().String(), "-CAfile", ca.CertFile,
				"-verify_return_error", "-tls1_3", "-ciphersuites", tls.CipherSuiteName(suite))
			stdin, _ := cmd.StdinPipe()
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			nc, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.SetDeadline(time.Now().Add(20 * time.Second))
			srv, err := Server(nc, cfg)
			if err != nil {
				t.Fatalf("handshake with s_client: %v\n%s", err, out.String())
			}
			if srv.suite.id != suite {
				t.Fatalf("negotiated %s", srv.SuiteName())
			}
			srv.ReadAhead()
			r := bufio.NewReader(srv)
			secret0 := append([]byte(nil), srv.in.secret...)
			io.WriteString(stdin, "hello\n")
			if l, err := r.ReadString('\n'); err != nil || l != "hello\n" {
				t.Fatalf("read %q, %v\n%s", l, err, out.String())
			}
			// s_client takes a whole read of its input as one command:
			// let it read "K" alone.
			io.WriteString(stdin, "K\n")
			time.Sleep(300 * time.Millisecond)
			io.WriteString(stdin, "world\n")
			if l, err := r.ReadString('\n'); err != nil || l != "world\n" {
				t.Fatalf("after the KeyUpdate: read %q, %v\n%s", l, err, out.String())
			}
			if bytes.Equal(secret0, srv.in.secret) {
				t.Fatal("s_client's KeyUpdate did not change the receiving keys")
			}
			if _, err := srv.Write([]byte("ANSWER\n")); err != nil {
				t.Fatal(err)
			}
			stdin.Close()
			if b, err := io.ReadAll(r); err != nil || len(b) != 0 {
				t.Fatalf("after s_client closed: %q, %v", b, err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("s_client: %v\n%s", err, out.String())
			}
			if !strings.Contains(out.String(), "ANSWER") {
				t.Fatalf("s_client did not print the answer sent under the updated keys:\n%s", out.String())
			}
		})
	}
}
