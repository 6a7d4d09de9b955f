package dispatch

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"
)

// frameReader buffers the client's stream. Headers and argument blocks are
// read into buf; bulk payloads are read from what buf holds and then
// straight from the connection into the backend's destination.
type frameReader struct {
	conn net.Conn
	s    *Session
	ctx  context.Context
	buf  []byte // buf[r:] is unprocessed
	r    int
}

func (fr *frameReader) buffered() int { return len(fr.buf) - fr.r }

// peek returns the next n unprocessed bytes, reading as needed. A read
// interrupted by Stop or ctx returns ErrStopped or ctx's error; the bytes
// already buffered stay unprocessed (Serve keeps them as read-ahead).
func (fr *frameReader) peek(n int) ([]byte, error) {
	for fr.buffered() < n {
		if cap(fr.buf)-fr.r < n {
			if cap(fr.buf) >= n {
				fr.compact()
			} else {
				nb := make([]byte, fr.buffered(), max(2*cap(fr.buf), n))
				copy(nb, fr.buf[fr.r:])
				fr.buf, fr.r = nb, 0
			}
		}
		m, err := fr.conn.Read(fr.buf[len(fr.buf):cap(fr.buf)])
		fr.buf = fr.buf[:len(fr.buf)+m]
		if err != nil && fr.buffered() < n {
			if isTimeout(err) {
				if fr.ctx.Err() != nil {
					return nil, fr.ctx.Err()
				}
				if fr.s.stopReq.Load() {
					return nil, ErrStopped
				}
			}
			if err == io.EOF {
				return nil, fmt.Errorf("client closed the connection: %w", err)
			}
			return nil, fmt.Errorf("read from client: %w", err)
		}
	}
	return fr.buf[fr.r : fr.r+n], nil
}

// compact moves unprocessed bytes to the front of buf.
func (fr *frameReader) compact() {
	if fr.r == 0 {
		return
	}
	n := copy(fr.buf, fr.buf[fr.r:])
	fr.buf = fr.buf[:n]
	fr.r = 0
}

func (fr *frameReader) bulk(n uint64) bulkReader { return bulkReader{fr: fr, n: n} }

// bulkReader yields exactly n bytes of bulk payload. Once a frame's bulk
// is being streamed the frame is finished even if Stop is called, so a
// deadline set by Stop is cleared and the read retried.
type bulkReader struct {
	fr *frameReader
	n  uint64
}

func (b *bulkReader) Read(p []byte) (int, error) {
	if b.n == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > b.n {
		p = p[:b.n]
	}
	fr := b.fr
	if fr.buffered() > 0 {
		m := copy(p, fr.buf[fr.r:])
		fr.r += m
		b.n -= uint64(m)
		return m, nil
	}
	for {
		m, err := fr.conn.Read(p)
		b.n -= uint64(m)
		if m > 0 {
			return m, nil
		}
		if err != nil && isTimeout(err) && fr.ctx.Err() == nil {
			fr.conn.SetReadDeadline(time.Time{})
			continue
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return m, err
	}
}
