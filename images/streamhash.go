package images

import (
	"crypto/sha256"
)

// streamHash computes a stream's SHA-256 on its own goroutine. The stream
// checksum cannot be split across cores, and on the goroutine that reads
// a pushed image it would cost as much as the reading itself; here it
// overlaps the reading instead. Bytes are copied into batches of
// streamHashBatch, so that small record headers cost a copy, not a
// channel operation each.
type streamHash struct {
	cur  []byte
	q    chan hashItem
	free chan []byte
	done chan struct{}
}

type hashItem struct {
	b   []byte
	sum chan []byte // set: reply with the digest of everything before
}

const (
	streamHashBatch   = 1 << 20
	streamHashBatches = 4 // in flight; the reader waits when all are
)

func newStreamHash() *streamHash {
	sh := &streamHash{q: make(chan hashItem, streamHashBatches), free: make(chan []byte, streamHashBatches), done: make(chan struct{})}
	for range streamHashBatches - 1 {
		sh.free <- make([]byte, 0, streamHashBatch)
	}
	sh.cur = make([]byte, 0, streamHashBatch)
	go func() {
		defer close(sh.done)
		h := sha256.New()
		for it := range sh.q {
			if it.sum != nil {
				it.sum <- h.Sum(nil)
				continue
			}
			h.Write(it.b)
			sh.free <- it.b[:0]
		}
	}()
	return sh
}

// write adds b to the stream.
func (sh *streamHash) write(b []byte) {
	for len(b) > 0 {
		n := min(len(b), cap(sh.cur)-len(sh.cur))
		sh.cur = append(sh.cur, b[:n]...)
		b = b[n:]
		if len(sh.cur) == cap(sh.cur) {
			sh.flush()
		}
	}
}

func (sh *streamHash) flush() {
	if len(sh.cur) == 0 {
		return
	}
	sh.q <- hashItem{b: sh.cur}
	sh.cur = <-sh.free
}

// sum returns the digest of everything written so far.
func (sh *streamHash) sum() []byte {
	sh.flush()
	c := make(chan []byte, 1)
	sh.q <- hashItem{sum: c}
	return <-c
}

// close stops the goroutine; the hash is unusable afterwards.
func (sh *streamHash) close() {
	close(sh.q)
	<-sh.done
}
