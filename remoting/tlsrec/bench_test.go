package tlsrec

import (
	"crypto/tls"
	"io"
	"testing"
)

// BenchmarkRead measures the record layer receiving bulk data from
// crypto/tls's client over loopback into a large buffer (a host-to-device
// copy's path in a worker), next to crypto/tls's own server and plain
// TCP in the same process.
func BenchmarkRead(b *testing.B) {
	const chunk = 8 << 20
	p := newPKI(b)
	payload := make([]byte, chunk)
	dst := make([]byte, chunk)
	run := func(b *testing.B, r io.Reader, w io.Writer) {
		b.SetBytes(chunk)
		go func() {
			for i := 0; i < b.N; i++ {
				if _, err := w.Write(payload); err != nil {
					return
				}
			}
		}()
		for i := 0; i < b.N; i++ {
			if _, err := io.ReadFull(r, dst); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("plain TCP", func(b *testing.B) {
		s, c := tcpPair(b)
		run(b, s, c)
	})
	b.Run("tlsrec", func(b *testing.B) {
		srv, cli, _, _ := handshake(b, p)
		srv.ReadAhead()
		run(b, srv, cli)
	})
	b.Run("crypto/tls", func(b *testing.B) {
		s, c := tcpPair(b)
		cli := tls.Client(c, p.client)
		go cli.Handshake()
		srv := tls.Server(s, p.server)
		if err := srv.Handshake(); err != nil {
			b.Fatal(err)
		}
		run(b, srv, cli)
	})
}

// BenchmarkWrite is the other direction: the record layer sending bulk
// data (a device-to-host copy's reply) to crypto/tls's client.
func BenchmarkWrite(b *testing.B) {
	const chunk = 8 << 20
	p := newPKI(b)
	payload := make([]byte, chunk)
	dst := make([]byte, chunk)
	srv, cli, _, _ := handshake(b, p)
	b.SetBytes(chunk)
	go func() {
		for i := 0; i < b.N; i++ {
			if _, err := srv.Write(payload); err != nil {
				return
			}
		}
	}()
	for i := 0; i < b.N; i++ {
		if _, err := io.ReadFull(cli, dst); err != nil {
			b.Fatal(err)
		}
	}
}
