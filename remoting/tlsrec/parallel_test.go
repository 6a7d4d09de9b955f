package tlsrec

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"
)

// withProcs runs the test with GOMAXPROCS n, which sets how many
// goroutines a bulk transfer uses.
func withProcs(t testing.TB, n int) {
	old := runtime.GOMAXPROCS(n)
	t.Cleanup(func() { runtime.GOMAXPROCS(old) })
}

// captureConn keeps what is written to it and reads from r in pieces of
// at most chunk bytes, so that records arrive split across reads.
type captureConn struct {
	streamConn
	src   io.Reader
	mu    sync.Mutex
	out   bytes.Buffer
	chunk func() int
}

func (c *captureConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

func (c *captureConn) Read(p []byte) (int, error) {
	if c.chunk != nil {
		p = p[:min(len(p), c.chunk())]
	}
	if c.src == nil {
		return 0, io.EOF
	}
	return c.src.Read(p)
}

func testState(suite uint16) State {
	n := 32
	if suite == tls.TLS_AES_256_GCM_SHA384 {
		n = 48
	}
	return State{Suite: suite, In: Direction{Secret: bytes.Repeat([]byte{3}, n)}, Out: Direction{Secret: bytes.Repeat([]byte{5}, n)}}
}

// peerState is the other end of st.
func peerState(st State) State { st.In, st.Out = st.Out, st.In; return st }

// TestParallelWriteSameBytes: a bulk Write sealed on several goroutines
// puts on the wire exactly the bytes the serial path does, record by
// record in sequence order, and leaves the same sequence number.
func TestParallelWriteSameBytes(t *testing.T) {
	for _, suite := range []uint16{tls.TLS_AES_128_GCM_SHA256, tls.TLS_CHACHA20_POLY1305_SHA256} {
		for _, size := range []int{parMinWrite, parMinWrite + 1, batchRecords * maxPlaintext, batchRecords*maxPlaintext + 1, 3*batchRecords*maxPlaintext + 12345} {
			for _, procs := range []int{2, 3, 8} {
				t.Run(fmt.Sprintf("%s/%d bytes/%d procs", suiteName(suite), size, procs), func(t *testing.T) {
					withProcs(t, procs)
					data := random(size)
					st := testState(suite)
					st.Out.Seq = 1000 // not from zero: the nonces must follow it
					w := &captureConn{}
					c, err := New(w, st)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := c.Write([]byte("small first")); err != nil {
						t.Fatal(err)
					}
					if n, err := c.Write(data); n != size || err != nil {
						t.Fatalf("Write: %d, %v", n, err)
					}
					ref, err := New(&captureConn{}, st)
					if err != nil {
						t.Fatal(err)
					}
					want := ref.seal(nil, typeApplicationData, []byte("small first"))
					for off := 0; off < size; off += maxPlaintext {
						want = ref.seal(want, typeApplicationData, data[off:min(size, off+maxPlaintext)])
					}
					if !bytes.Equal(w.out.Bytes(), want) {
						t.Fatalf("the parallel path wrote %d bytes that differ from the serial path's %d", w.out.Len(), len(want))
					}
					if c.out.seq != ref.out.seq {
						t.Fatalf("sequence number %d after the write, want %d", c.out.seq, ref.out.seq)
					}
				})
			}
		}
	}
}

// streamBuilder seals a record stream as a peer would, with what our own
// peers never send mixed in: padding, empty records, KeyUpdates, alerts,
// a record that fails authentication.
type streamBuilder struct {
	t     testing.TB
	peer  *Conn
	buf   []byte
	plain []byte // the application data, in order
	end   int    // how much of plain can be read: -1 for all of it
	recs  uint64 // records under the current keys
}

func newStreamBuilder(t testing.TB, st State) *streamBuilder {
	peer, err := New(&captureConn{}, peerState(st))
	if err != nil {
		t.Fatal(err)
	}
	return &streamBuilder{t: t, peer: peer, end: -1}
}

func (b *streamBuilder) data(n int, pad int) {
	d := random(n)
	b.plain = append(b.plain, d...)
	if pad == 0 {
		b.buf = b.peer.seal(b.buf, typeApplicationData, d)
	} else {
		// data, its content type, then zeros: seal the first two as the
		// "data" of a record whose content type is the last zero.
		inner := append(append(d, typeApplicationData), make([]byte, pad-1)...)
		b.buf = b.peer.seal(b.buf, 0, inner)
	}
	b.recs++
}

func (b *streamBuilder) keyUpdate() {
	b.buf = b.peer.seal(b.buf, typeHandshake, []byte{handshakeKeyUpdate, 0, 0, 1, 0})
	if err := b.peer.out.rekey(b.peer.suite, b.peer.suite.nextSecret(b.peer.out.secret)); err != nil {
		b.t.Fatal(err)
	}
	b.recs = 0
}

// readable is the application data a reader gets before the stream ends.
func (b *streamBuilder) readable() []byte {
	if b.end < 0 {
		return b.plain
	}
	return b.plain[:b.end]
}

func (b *streamBuilder) corrupt() {
	if b.end < 0 {
		b.end = len(b.plain)
	}
	b.buf = b.peer.seal(b.buf, typeApplicationData, random(100))
	b.buf[len(b.buf)-3] ^= 1
}

func (b *streamBuilder) closeNotify() {
	b.buf = b.peer.seal(b.buf, typeAlert, []byte{1, alertCloseNotify})
}

// readAll reads c to its end with reads of bufLen bytes.
func readAll(c *Conn, bufLen int) ([]byte, error) {
	buf := make([]byte, bufLen)
	var got []byte
	for i := 0; ; i++ {
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			return got, err
		}
		if i > 1<<20 {
			return got, errors.New("reading a finite stream did not end")
		}
	}
}

// TestParallelRead: bulk reads open the records in parallel into the
// caller's buffer and deliver the same bytes, in order, as the stream
// holds, whatever the records' sizes and padding, with records split
// across the socket's reads, a KeyUpdate in the middle of a bulk stream,
// and a record that fails authentication after good ones.
func TestParallelRead(t *testing.T) {
	type step func(b *streamBuilder)
	full := func(n int) step {
		return func(b *streamBuilder) {
			for i := 0; i < n; i++ {
				b.data(maxPlaintext, 0)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		steps   []step
		wantErr string // "" for EOF
		seq     uint64 // the in sequence number at the end
		par     uint64 // at least this many records opened in parallel
	}{
		{"full records", []step{full(200)}, "", 200, 200},
		{"short and empty records", []step{full(20), func(b *streamBuilder) {
			for i := 0; i < 50; i++ {
				b.data(i*97%maxPlaintext, 0)
			}
		}, full(20)}, "", 90, 70},
		{"padding", []step{full(10), func(b *streamBuilder) {
			b.data(1000, 7)
			b.data(maxPlaintext-100, 100)
			b.data(0, 3)
		}, full(30)}, "", 43, 41},
		{"KeyUpdate in the middle", []step{full(37), (*streamBuilder).keyUpdate, full(41)}, "", 41, 50},
		{"two KeyUpdates back to back", []step{full(9), (*streamBuilder).keyUpdate, (*streamBuilder).keyUpdate, full(12)}, "", 12, 9},
		{"bad record after good ones", []step{full(50), (*streamBuilder).corrupt, full(5)}, "failed authentication", 50, 50},
	} {
		for _, procs := range []int{2, 5} {
			for _, bufLen := range []int{parMinRead, 1 << 20, 3<<20 + 5} {
				for _, chunk := range []int{0, 1000, 40000} {
					name := fmt.Sprintf("%s/%d procs/%d-byte reads/socket reads of %d", tc.name, procs, bufLen, chunk)
					t.Run(name, func(t *testing.T) {
						withProcs(t, procs)
						st := testState(tls.TLS_AES_128_GCM_SHA256)
						b := newStreamBuilder(t, st)
						for _, s := range tc.steps {
							s(b)
						}
						if tc.wantErr == "" {
							b.closeNotify()
						}
						rng := rand.New(rand.NewPCG(uint64(chunk), 1))
						conn := &captureConn{src: bytes.NewReader(b.buf)}
						if chunk > 0 {
							conn.chunk = func() int { return 1 + rng.IntN(chunk) }
						}
						c, err := New(conn, st)
						if err != nil {
							t.Fatal(err)
						}
						got, err := readAll(c, bufLen)
						if tc.wantErr == "" && err != io.EOF || tc.wantErr != "" && (err == nil || !bytes.Contains([]byte(err.Error()), []byte(tc.wantErr))) {
							t.Fatalf("read ended with %v; want %q", err, tc.wantErr)
						}
						if want := b.readable(); !bytes.Equal(got, want) {
							t.Fatalf("read %d bytes that differ from the %d the peer sent (first difference at %d)", len(got), len(want), firstDiff(got, want))
						}
						want := tc.seq
						if tc.wantErr == "" {
							want++ // the close_notify
						}
						if c.in.seq != want {
							t.Fatalf("in sequence number %d at the end, want %d", c.in.seq, want)
						}
						// With socket reads cut short (and this test conn
						// has no non-blocking reads to top up with) too few
						// records are buffered at once to go parallel.
						if chunk == 0 && c.parRecs < tc.par {
							t.Fatalf("%d records opened in parallel, want at least %d", c.parRecs, tc.par)
						}
					})
				}
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestParallelOverTCP: both directions of a loopback TCP connection carry
// bulk data sealed and opened in parallel, in reads and writes of many
// sizes at once, against crypto/tls on the other end and against this
// record layer on the other end; the reads take what the socket has ready
// without waiting, and a read never waits for bytes the peer has not
// sent.
func TestParallelOverTCP(t *testing.T) {
	withProcs(t, 4)
	p := newPKI(t)
	srv, cli, _, _ := handshake(t, p)
	srv.ReadAhead()
	sizes := []int{1, parMinWrite, 5 << 20, 300000, maxPlaintext*batchRecords + 3, 17}
	var total int
	for _, n := range sizes {
		total += n
	}
	up, down := random(total), random(total)
	var wg sync.WaitGroup
	wg.Add(2)
	var cliErr error
	var cliGot []byte
	go func() { // the client writes in pieces of every size class
		defer wg.Done()
		off := 0
		for _, n := range sizes {
			if _, err := cli.Write(up[off : off+n]); err != nil {
				cliErr = err
				return
			}
			off += n
		}
	}()
	go func() {
		defer wg.Done()
		cliGot = make([]byte, total)
		if _, err := io.ReadFull(cli, cliGot); err != nil && cliErr == nil {
			cliErr = err
		}
	}()
	// The server reads into a buffer far larger than the rest of the
	// stream: each read returns what has arrived.
	var got []byte
	buf := make([]byte, 16<<20)
	srv.SetReadDeadline(time.Now().Add(30 * time.Second))
	for len(got) < total {
		n, err := srv.Read(buf)
		if err != nil {
			t.Fatalf("server read after %d of %d bytes: %v", len(got), total, err)
		}
		got = append(got, buf[:n]...)
	}
	if !bytes.Equal(got, up) {
		t.Fatalf("the server read other bytes than the client wrote (first difference at %d)", firstDiff(got, up))
	}
	off := 0
	for _, n := range sizes {
		if _, err := srv.Write(down[off : off+n]); err != nil {
			t.Fatal(err)
		}
		off += n
	}
	wg.Wait()
	if cliErr != nil {
		t.Fatal(cliErr)
	}
	if !bytes.Equal(cliGot, down) {
		t.Fatalf("crypto/tls read other bytes than the server wrote (first difference at %d)", firstDiff(cliGot, down))
	}

	// This record layer on both ends, bulk both ways at once.
	a, b := tcpPair(t)
	st := testState(tls.TLS_AES_256_GCM_SHA384)
	ca, err := New(a, st)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := New(b, peerState(st))
	if err != nil {
		t.Fatal(err)
	}
	x, y := random(9<<20+77), random(7<<20+5)
	errc := make(chan error, 2)
	go func() { _, err := ca.Write(x); errc <- err }()
	go func() { _, err := cb.Write(y); errc <- err }()
	gx, gy := make([]byte, len(x)), make([]byte, len(y))
	rerrc := make(chan error, 1)
	go func() { _, err := io.ReadFull(ca, gy); rerrc <- err }()
	if _, err := io.ReadFull(cb, gx); err != nil {
		t.Fatal(err)
	}
	if err := <-rerrc; err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(gx, x) || !bytes.Equal(gy, y) {
		t.Fatal("bulk data differs after a round trip through the record layer")
	}
	if cb.parRecs == 0 || ca.parRecs == 0 {
		t.Fatalf("no records opened in parallel (%d, %d) over 16 MiB of bulk reads", cb.parRecs, ca.parRecs)
	}
	if ca.out.seq != cb.in.seq || cb.out.seq != ca.in.seq {
		t.Fatalf("sequence numbers disagree: %d/%d and %d/%d", ca.out.seq, cb.in.seq, cb.out.seq, ca.in.seq)
	}
}

// TestParallelHandOver: a Conn that has read bulk data (a large receive
// buffer, records read ahead) still drains to a State that carries at
// most a partial record, and a new Conn on the same socket reads the rest
// of the stream.
func TestParallelHandOver(t *testing.T) {
	withProcs(t, 4)
	st := testState(tls.TLS_AES_128_GCM_SHA256)
	b := newStreamBuilder(t, st)
	for i := 0; i < 150; i++ {
		b.data(maxPlaintext-i, 0)
	}
	cut := len(b.buf) - 1000 // the last record's end arrives after the hand-over
	sock := bytes.NewReader(b.buf[:cut])
	rng := rand.New(rand.NewPCG(1, 2))
	c, err := New(&captureConn{src: sock, chunk: func() int { return 1 + rng.IntN(300000) }}, st)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 700000)
	var got []byte
	for range 3 {
		n, err := c.Read(buf)
		if err != nil || n == 0 {
			t.Fatalf("bulk read: %d, %v", n, err)
		}
		got = append(got, buf[:n]...)
	}
	got = append(got, c.Drain()...)
	st2 := c.State()
	if len(st2.Partial) >= headerLen+maxCiphertext || st2.Err != "" {
		t.Fatalf("state after drain: %d partial bytes, err %q; want less than a record", len(st2.Partial), st2.Err)
	}
	c.Forget()
	c2, err := New(&captureConn{src: io.MultiReader(sock, bytes.NewReader(b.buf[cut:]))}, st2)
	if err != nil {
		t.Fatal(err)
	}
	tail, err := readAll(c2, 1<<20)
	if err != io.EOF {
		t.Fatalf("reading the rest: %v", err)
	}
	got = append(got, tail...)
	if !bytes.Equal(got, b.plain) {
		t.Fatalf("read %d bytes across the hand-over that differ from the %d sent (at %d)", len(got), len(b.plain), firstDiff(got, b.plain))
	}
	if c2.in.seq != 150 {
		t.Fatalf("in sequence number %d after 150 records", c2.in.seq)
	}
}

// FuzzParallelRead compares bulk reads (opened in parallel) with small
// reads (the serial path) over the same record stream, split across the
// socket's reads at random: the same bytes, the same ending, the same
// sequence number.
func FuzzParallelRead(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0}, uint16(0), uint8(2))
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0}, uint16(977), uint8(3))
	f.Add([]byte{0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 3, 3, 0, 0, 0, 0, 0}, uint16(16000), uint8(4))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0}, uint16(5), uint8(8))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0}, uint16(40000), uint8(2))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0}, uint16(0), uint8(2))
	f.Fuzz(func(t *testing.T, ops []byte, chunk uint16, procs uint8) {
		if len(ops) > 300 {
			ops = ops[:300]
		}
		withProcs(t, 2+int(procs%7))
		st := testState(tls.TLS_AES_128_GCM_SHA256)
		b := newStreamBuilder(t, st)
		for i, op := range ops {
			switch op % 8 {
			case 0:
				b.data(maxPlaintext, 0)
			case 1:
				b.data(int(op)*61%maxPlaintext, 0)
			case 2:
				b.data(int(op)*13%maxPlaintext, 1+i%40)
			case 3:
				b.keyUpdate()
			case 4:
				b.corrupt()
			case 5:
				b.closeNotify()
			case 6:
				b.buf = b.peer.seal(b.buf, typeAlert, []byte{2, alertInternalError})
			case 7:
				b.data(0, 0)
			}
		}
		read := func(bufLen int) ([]byte, string, uint64) {
			rng := rand.New(rand.NewPCG(uint64(chunk), 7))
			conn := &captureConn{src: bytes.NewReader(b.buf)}
			if chunk > 0 {
				conn.chunk = func() int { return 1 + rng.IntN(int(chunk)) }
			}
			c, err := New(conn, st)
			if err != nil {
				t.Fatal(err)
			}
			got, err := readAll(c, bufLen)
			return got, err.Error(), c.in.seq
		}
		pg, pe, ps := read(2 << 20)
		sg, se, ss := read(parMinRead - 1)
		if !bytes.Equal(pg, sg) || pe != se || ps != ss {
			t.Fatalf("bulk reads: %d bytes, %q, seq %d; small reads: %d bytes, %q, seq %d (first difference at %d)",
				len(pg), pe, ps, len(sg), se, ss, firstDiff(pg, sg))
		}
		if !bytes.HasPrefix(b.plain, pg) {
			t.Fatal("the bytes read are not what the peer sent")
		}
	})
}

var _ net.Conn = (*captureConn)(nil)
