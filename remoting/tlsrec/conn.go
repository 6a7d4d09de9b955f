package tlsrec

import (
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"syscall"
	"time"
)

// Buffer sizes. The receive buffer holds a few records so that one read
// from the socket serves several of them; the send buffer batches records
// into one write.
const (
	rawCap  = 4 * (headerLen + maxCiphertext)
	sendCap = 8 * (headerLen + maxPlaintext + 1 + tagLen)
)

// Conn is the record layer of a TLS 1.3 connection over a socket: a
// net.Conn whose Read and Write carry plaintext. Reads and writes may run
// concurrently with each other (one reader, one writer at a time).
//
// Close closes the socket without a close_notify: the socket is shared
// with another process that may carry on with the connection.
type Conn struct {
	nc    net.Conn
	suite *suite

	rmu     sync.Mutex
	in      half
	raw     []byte // raw[rpos:] was read from the socket and not yet opened
	rpos    int
	plain   []byte // where records that do not fit the reader's buffer are opened
	pending []byte // opened plaintext not yet read
	exact   bool   // read the socket one record at a time, never past its end
	rerr    error  // why reading ended for good
	// For bulk reads (parallel.go): the socket for reads that never wait,
	// the buffer the next records are read into while these are opened,
	// and each opening goroutine's share.
	rc      syscall.RawConn
	spare   []byte
	spans   []span
	groups  [maxWorkers]group
	scratch [maxWorkers][]byte
	parRecs uint64 // records opened in parallel, for tests

	wmu      sync.Mutex
	out      half
	wbuf     []byte
	werr     error
	sealBufs [2][]byte // bulk writes: one batch is written while the next is sealed
}

// half is one direction's keys and sequence number.
type half struct {
	aead   cipher.AEAD
	iv     [12]byte
	secret []byte
	seq    uint64
	kernel bool
	// par holds one AEAD per goroutine that seals or opens records of a
	// bulk transfer, made from secret when first needed.
	par []cipher.AEAD
}

func (h *half) nonce(n *[12]byte) { *n = seqNonce(&h.iv, h.seq) }

// seqNonce is the per-record nonce: the IV with the sequence number
// XORed into its last 8 bytes (RFC 8446, section 5.3).
func seqNonce(iv *[12]byte, seq uint64) [12]byte {
	n := *iv
	for i := 0; i < 8; i++ {
		n[4+i] ^= byte(seq >> (56 - 8*i))
	}
	return n
}

// rekey installs a new traffic secret.
func (h *half) rekey(s *suite, secret []byte) error {
	aead, iv, err := s.keys(secret)
	if err != nil {
		return err
	}
	h.aead, h.iv, h.secret, h.seq, h.par = aead, iv, secret, 0, nil
	return nil
}

func (h *half) direction() Direction {
	if h.kernel {
		return Direction{Seq: h.seq, Kernel: true}
	}
	return Direction{Secret: append([]byte(nil), h.secret...), Seq: h.seq}
}

// eofState is State.Err for a connection the peer closed with
// close_notify.
const eofState = "EOF"

// New carries on a connection on nc from st: the state another process
// (or this one, earlier) left it in.
func New(nc net.Conn, st State) (*Conn, error) {
	s, err := suiteByID(st.Suite)
	if err != nil {
		return nil, err
	}
	if len(st.Partial) > rawCap {
		return nil, fmt.Errorf("tls: %d partial bytes exceed the receive buffer of %d", len(st.Partial), rawCap)
	}
	if st.In.Kernel && len(st.Partial) > 0 {
		return nil, errors.New("tls: partial record bytes for a direction the kernel receives")
	}
	c := &Conn{nc: nc, suite: s}
	if sc, ok := nc.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			c.rc = rc
		}
	}
	for _, d := range []struct {
		h   *half
		dir Direction
	}{{&c.in, st.In}, {&c.out, st.Out}} {
		if d.dir.Kernel {
			d.h.kernel, d.h.seq = true, d.dir.Seq
			continue
		}
		if err := d.h.rekey(s, append([]byte(nil), d.dir.Secret...)); err != nil {
			return nil, err
		}
		d.h.seq = d.dir.Seq
	}
	c.raw = append(make([]byte, 0, rawCap), st.Partial...)
	c.pending = append([]byte(nil), st.Pending...)
	switch st.Err {
	case "":
	case eofState:
		c.rerr = io.EOF
	default:
		c.rerr = errors.New(st.Err)
	}
	return c, nil
}

// SuiteName is the negotiated cipher suite's name.
func (c *Conn) SuiteName() string { return suiteName(c.suite.id) }

// Kernel reports which directions the kernel's TLS carries.
func (c *Conn) Kernel() (tx, rx bool) {
	c.rmu.Lock()
	rx = c.in.kernel
	c.rmu.Unlock()
	c.wmu.Lock()
	tx = c.out.kernel
	c.wmu.Unlock()
	return tx, rx
}

// Read reads plaintext, opening records as they arrive.
func (c *Conn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if len(c.pending) > 0 {
			n := copy(p, c.pending)
			c.pending = c.pending[n:]
			return n, nil
		}
		if c.rerr != nil {
			return 0, c.rerr
		}
		if c.in.kernel {
			return c.nc.Read(p)
		}
		if len(p) >= parMinRead && !c.exact {
			if nw := workers(); nw > 1 {
				n, err := c.readParallel(p, nw)
				if n > 0 || err != nil {
					return n, err
				}
			}
		}
		if err := c.fill(); err != nil {
			return 0, err
		}
		n, err := c.openRecords(p)
		if n > 0 {
			return n, nil // an error is kept in c.rerr for the next call
		}
		if err != nil {
			return 0, err
		}
	}
}

// recordLen is the length of the record whose header starts at raw[rpos],
// or -1 when the header is not all there.
func (c *Conn) recordLen() int {
	if len(c.raw)-c.rpos < headerLen {
		return -1
	}
	return int(binary.BigEndian.Uint16(c.raw[c.rpos+3:]))
}

// complete reports whether a whole record is buffered.
func (c *Conn) complete() bool {
	n := c.recordLen()
	return n >= 0 && len(c.raw)-c.rpos >= headerLen+n
}

// fill reads from the socket until a whole record is buffered. A read that
// times out (a deadline: how a caller interrupts a blocked read) keeps
// what arrived and returns the timeout.
func (c *Conn) fill() error {
	for {
		need := headerLen
		if n := c.recordLen(); n >= 0 {
			if n > maxCiphertext {
				return c.fail(alertRecordOverflow, fmt.Errorf("tls: record of %d bytes exceeds the limit of %d", n, maxCiphertext))
			}
			need += n
		}
		have := len(c.raw) - c.rpos
		if have >= need {
			return nil
		}
		if cap(c.raw)-c.rpos < need {
			copy(c.raw[:have], c.raw[c.rpos:])
			c.raw, c.rpos = c.raw[:have], 0
		}
		end := cap(c.raw)
		if c.exact {
			end = c.rpos + need
		}
		m, err := c.nc.Read(c.raw[len(c.raw):end])
		c.raw = c.raw[:len(c.raw)+m]
		if err != nil && m == 0 {
			if errors.Is(err, io.EOF) {
				if have == 0 {
					c.rerr = io.EOF
					return io.EOF // the peer closed at a record boundary
				}
				c.rerr = fmt.Errorf("tls: connection closed in the middle of a record: %w", io.ErrUnexpectedEOF)
				return c.rerr
			}
			return err
		}
	}
}

// openRecords opens the whole records at raw[rpos:], application data
// straight into p while it fits; one that does not fit is opened into
// c.plain and left pending. It returns the bytes put in p.
func (c *Conn) openRecords(p []byte) (int, error) {
	n := 0
	for c.complete() {
		hdr := c.raw[c.rpos : c.rpos+headerLen]
		clen := c.recordLen()
		if clen > maxCiphertext {
			return n, c.fail(alertRecordOverflow, fmt.Errorf("tls: record of %d bytes exceeds the limit of %d", clen, maxCiphertext))
		}
		if hdr[0] != typeApplicationData {
			return n, c.fail(alertUnexpectedMessage, fmt.Errorf("tls: unprotected record of type %d after the handshake", hdr[0]))
		}
		if clen < tagLen+1 {
			return n, c.fail(alertDecodeError, fmt.Errorf("tls: record of %d bytes is too short", clen))
		}
		inner := clen - tagLen
		var dst []byte
		direct := len(p)-n >= inner
		switch {
		case direct:
			dst = p[n:n]
		case n > 0:
			return n, nil // hand over what is there first
		default:
			if cap(c.plain) < maxCiphertext {
				c.plain = make([]byte, 0, maxCiphertext)
			}
			dst = c.plain[:0]
		}
		if c.in.seq == math.MaxUint64 {
			return n, c.fail(alertInternalError, errors.New("tls: sequence numbers exhausted"))
		}
		var nonce [12]byte
		c.in.nonce(&nonce)
		out, err := c.in.aead.Open(dst, nonce[:], c.raw[c.rpos+headerLen:c.rpos+headerLen+clen], hdr)
		if err != nil {
			return n, c.fail(alertBadRecordMAC, errors.New("tls: a record from the peer failed authentication"))
		}
		c.in.seq++
		c.rpos += headerLen + clen
		if c.rpos == len(c.raw) {
			c.raw, c.rpos = c.raw[:0], 0
		}
		i := len(out) - 1
		for i >= 0 && out[i] == 0 {
			i-- // padding
		}
		if i < 0 {
			return n, c.fail(alertUnexpectedMessage, errors.New("tls: record without a content type"))
		}
		typ, body := out[i], out[:i]
		switch typ {
		case typeApplicationData:
			if direct {
				n += len(body)
			} else {
				c.pending = body
				return 0, nil
			}
		case typeAlert:
			return n, c.peerAlert(body)
		case typeHandshake:
			if err := c.handshakeMessage(body); err != nil {
				return n, err
			}
		default:
			return n, c.fail(alertUnexpectedMessage, fmt.Errorf("tls: record of content type %d after the handshake", typ))
		}
	}
	return n, nil
}

// handshakeMessage handles a post-handshake message: only KeyUpdate is
// expected (this end never asks for client certificates after the
// handshake, and a server sends no tickets to itself).
func (c *Conn) handshakeMessage(b []byte) error {
	if len(b) < 4 {
		return c.fail(alertUnexpectedMessage, errors.New("tls: handshake message split across records"))
	}
	typ, n := b[0], int(b[1])<<16|int(b[2])<<8|int(b[3])
	if typ != handshakeKeyUpdate {
		return c.fail(alertUnexpectedMessage, fmt.Errorf("tls: unexpected handshake message of type %d after the handshake", typ))
	}
	if n != 1 || len(b) != 5 {
		return c.fail(alertDecodeError, errors.New("tls: malformed KeyUpdate (it must be one byte, at the end of its record)"))
	}
	request := b[4]
	if request > 1 {
		return c.fail(alertIllegalParameter, fmt.Errorf("tls: KeyUpdate with request_update %d", request))
	}
	if err := c.in.rekey(c.suite, c.suite.nextSecret(c.in.secret)); err != nil {
		return c.fail(alertInternalError, err)
	}
	if request == 1 {
		return c.updateOut()
	}
	return nil
}

// updateOut answers a KeyUpdate that asked for ours: send it under the
// current keys, then switch to the next secret.
func (c *Conn) updateOut() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if c.out.kernel {
		err := errors.New("tls: the peer asked for a KeyUpdate, which this end cannot make while the kernel holds its keys")
		c.werr = err
		c.rerr = err
		return err
	}
	buf := c.seal(c.sendBuf(), typeHandshake, []byte{handshakeKeyUpdate, 0, 0, 1, 0})
	if _, err := c.nc.Write(buf); err != nil {
		c.werr = err
		return err
	}
	if err := c.out.rekey(c.suite, c.suite.nextSecret(c.out.secret)); err != nil {
		c.werr = err
		return err
	}
	return nil
}

// Write seals p into records and writes them. A failed write leaves the
// connection unusable for writing.
func (c *Conn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	if c.out.kernel {
		return c.nc.Write(p)
	}
	if len(p) >= parMinWrite {
		recs := uint64(len(p)+maxPlaintext-1) / maxPlaintext
		if nw := workers(); nw > 1 && c.out.seq < math.MaxUint64-recs {
			return c.writeParallel(p, nw)
		}
	}
	done := 0
	for done < len(p) {
		buf := c.sendBuf()
		batch := done
		for batch < len(p) && cap(buf)-len(buf) >= headerLen+maxPlaintext+1+tagLen {
			k := min(len(p)-batch, maxPlaintext)
			if c.out.seq == math.MaxUint64 {
				c.werr = errors.New("tls: sequence numbers exhausted")
				return done, c.werr
			}
			buf = c.seal(buf, typeApplicationData, p[batch:batch+k])
			batch += k
		}
		if _, err := c.nc.Write(buf); err != nil {
			c.werr = err
			return done, err
		}
		done = batch
	}
	return done, nil
}

func (c *Conn) sendBuf() []byte {
	if c.wbuf == nil {
		c.wbuf = make([]byte, 0, sendCap)
	}
	return c.wbuf[:0]
}

// seal appends one record of content type typ holding data.
func (c *Conn) seal(buf []byte, typ byte, data []byte) []byte {
	buf = sealRecord(buf, c.out.aead, &c.out.iv, c.out.seq, typ, data)
	c.out.seq++
	return buf
}

// sealRecord appends to buf the record of sequence number seq, of content
// type typ, holding data.
func sealRecord(buf []byte, aead cipher.AEAD, iv *[12]byte, seq uint64, typ byte, data []byte) []byte {
	off := len(buf)
	n := len(data) + 1 + tagLen
	buf = append(buf, typeApplicationData, 3, 3, byte(n>>8), byte(n))
	buf = append(buf, data...)
	buf = append(buf, typ)
	nonce := seqNonce(iv, seq)
	return aead.Seal(buf[:off+headerLen], nonce[:], buf[off+headerLen:], buf[off:off+headerLen])
}

// Alert descriptions (RFC 8446, section 6).
const (
	alertCloseNotify       = 0
	alertUnexpectedMessage = 10
	alertBadRecordMAC      = 20
	alertRecordOverflow    = 22
	alertIllegalParameter  = 47
	alertDecodeError       = 50
	alertInternalError     = 80
	alertUserCanceled      = 90
)

// AlertError is a fatal alert the peer sent.
type AlertError struct{ Description uint8 }

func (e *AlertError) Error() string {
	return fmt.Sprintf("tls: the peer sent alert %d (%s)", e.Description, alertName(e.Description))
}

func alertName(d uint8) string {
	switch d {
	case alertCloseNotify:
		return "close_notify"
	case alertUnexpectedMessage:
		return "unexpected_message"
	case alertBadRecordMAC:
		return "bad_record_mac"
	case alertRecordOverflow:
		return "record_overflow"
	case alertIllegalParameter:
		return "illegal_parameter"
	case alertDecodeError:
		return "decode_error"
	case alertInternalError:
		return "internal_error"
	case alertUserCanceled:
		return "user_canceled"
	}
	return "alert"
}

// peerAlert handles an alert from the peer: close_notify ends the stream,
// user_canceled is ignored (a close_notify follows), anything else is
// fatal.
func (c *Conn) peerAlert(b []byte) error {
	if len(b) != 2 {
		return c.fail(alertDecodeError, errors.New("tls: malformed alert"))
	}
	switch b[1] {
	case alertCloseNotify:
		c.rerr = io.EOF
	case alertUserCanceled:
		return nil
	default:
		c.rerr = &AlertError{Description: b[1]}
	}
	return c.rerr
}

// fail ends reading with err and tells the peer why (best effort).
func (c *Conn) fail(alert uint8, err error) error {
	c.rerr = err
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr == nil && !c.out.kernel {
		_ = c.nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = c.nc.Write(c.seal(c.sendBuf(), typeAlert, []byte{2, alert}))
		_ = c.nc.SetWriteDeadline(time.Time{})
		c.werr = err
	}
	return err
}

// CloseNotify tells the peer that this end sends nothing more.
func (c *Conn) CloseNotify() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil || c.out.kernel {
		return c.werr
	}
	_, err := c.nc.Write(c.seal(c.sendBuf(), typeAlert, []byte{1, alertCloseNotify}))
	c.werr = net.ErrClosed
	return err
}

// Drain opens every whole record already read from the socket and returns
// their plaintext, after what was pending: a worker that stops serving
// keeps these bytes with its own read-ahead, so that State carries at most
// one partial record. An alert or a broken record ends draining; State
// then says so, and the next holder of the connection reads the same
// ending.
func (c *Conn) Drain() []byte {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	out := append([]byte(nil), c.pending...)
	c.pending = nil
	if c.in.kernel {
		return out
	}
	buf := make([]byte, maxCiphertext)
	for c.rerr == nil && c.complete() {
		n, _ := c.openRecords(buf)
		out = append(out, buf[:n]...)
	}
	if c.rerr != nil {
		c.raw, c.rpos = c.raw[:0], 0 // nothing after an ending is read
	}
	return out
}

// State is the connection's record layer now, for whoever carries on
// with the socket (gpud hands it to a worker; a worker that stops serving
// hands it back). Reading and writing must have stopped.
func (c *Conn) State() State {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	st := State{
		Suite:   c.suite.id,
		In:      c.in.direction(),
		Out:     c.out.direction(),
		Pending: append([]byte(nil), c.pending...),
		Partial: append([]byte(nil), c.raw[c.rpos:]...),
	}
	switch {
	case c.rerr == nil:
	case errors.Is(c.rerr, io.EOF):
		st.Err = eofState
	default:
		st.Err = c.rerr.Error()
	}
	return st
}

// Forget drops this Conn's copy of the keys once another process carries
// on with the connection; the Conn is unusable afterwards.
func (c *Conn) Forget() {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for _, h := range []*half{&c.in, &c.out} {
		clear(h.secret)
		h.secret, h.aead, h.par = nil, nil, nil
	}
	clear(c.raw[:cap(c.raw)])
	clear(c.spare[:cap(c.spare)])
	for _, b := range c.scratch {
		clear(b[:cap(b)])
	}
	for _, b := range c.sealBufs {
		clear(b)
	}
	clear(c.pending)
	c.pending = nil
	c.rerr, c.werr = net.ErrClosed, net.ErrClosed
}

// The rest of net.Conn is the socket's.

func (c *Conn) Close() error                       { return c.nc.Close() }
func (c *Conn) LocalAddr() net.Addr                { return c.nc.LocalAddr() }
func (c *Conn) RemoteAddr() net.Addr               { return c.nc.RemoteAddr() }
func (c *Conn) SetDeadline(t time.Time) error      { return c.nc.SetDeadline(t) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.nc.SetReadDeadline(t) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.nc.SetWriteDeadline(t) }
