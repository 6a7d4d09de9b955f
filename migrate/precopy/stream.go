package precopy

import (
	"context"
	"io"
	"sync"
	"sync/atomic"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/store"
)

// Stream sends the target the process image's chunks while the freeze
// stores them (checkpoint.Request.Stored), in one chunk stream (PUT
// /v1/chunks), where they wait as pending chunks: the push after the
// freeze then finds the target holding them and sends little more than
// the manifest, instead of the target receiving and checking them after
// the store, while the client waits. A CUDA worker's process image is
// about 60 MB on the H200 once the driver's zero pages are dropped.
//
// Observe copies each batch (the store's slices live only during the
// call), up to streamMaxInFlight bytes not yet written; what is over it,
// or what a failed stream did not deliver, the push sends. Failing costs
// only time.
type Stream struct {
	ctx    context.Context
	target Target
	q      chan streamBatch
	// inFlight is the bytes Observe copied that run has not written.
	inFlight atomic.Int64
	skipped  atomic.Int64 // bytes Observe left to the push
	once     sync.Once
	done     chan struct{}
	sent     int64 // after done: the bytes the stream carried
	err      error // after done
}

type streamBatch struct {
	ds   []store.Digest
	data [][]byte
	n    int64
}

const (
	// streamMaxInFlight bounds the copies a slow link leaves queued.
	streamMaxInFlight = 256 << 20
	streamQueue       = 4096 // batches
)

// StartStream starts a Stream to t; the chunk stream itself is opened at
// the first chunk. Wait must follow.
func StartStream(ctx context.Context, t Target) *Stream {
	s := &Stream{ctx: ctx, target: t, q: make(chan streamBatch, streamQueue), done: make(chan struct{})}
	go s.run()
	return s
}

// Observe is an images.ChunkObserver. It never blocks the store: a batch
// it cannot queue is left to the push. It must not be called after Wait.
func (s *Stream) Observe(ds []store.Digest, data [][]byte) {
	var n int64
	for _, b := range data {
		n += int64(len(b))
	}
	if s.inFlight.Add(n) > streamMaxInFlight {
		s.inFlight.Add(-n)
		s.skipped.Add(n)
		return
	}
	buf := make([]byte, 0, n)
	b := streamBatch{ds: append([]store.Digest(nil), ds...), data: make([][]byte, len(data)), n: n}
	for i, d := range data {
		off := len(buf)
		buf = append(buf, d...)
		b.data[i] = buf[off:len(buf):len(buf)]
	}
	select {
	case s.q <- b:
	default:
		s.inFlight.Add(-n)
		s.skipped.Add(n)
	}
}

// Wait ends the stream once what was observed is written, and returns
// the bytes it carried and the bytes left to the push. The error only
// says why the push will send more.
func (s *Stream) Wait() (sent, skipped int64, err error) {
	s.once.Do(func() { close(s.q) })
	<-s.done
	return s.sent, s.skipped.Load(), s.err
}

// run writes the queued chunks, each once, into one chunk stream.
func (s *Stream) run() {
	defer close(s.done)
	var (
		cs    *images.ChunkStream
		pw    *io.PipeWriter
		reply chan error
		werr  error
	)
	seen := map[store.Digest]bool{}
	for b := range s.q {
		for i, d := range b.ds {
			if werr != nil || seen[d] {
				continue
			}
			seen[d] = true
			if cs == nil {
				var pr *io.PipeReader
				pr, pw = io.Pipe()
				reply = make(chan error, 1)
				go func() {
					_, err := s.target.PutChunks(s.ctx, pr)
					_ = pr.CloseWithError(io.ErrClosedPipe)
					reply <- err
				}()
				cs = images.NewChunkStream(pw)
			}
			werr = cs.Put(d, b.data[i])
		}
		s.inFlight.Add(-b.n)
	}
	if cs == nil {
		return
	}
	if werr == nil {
		s.sent, werr = cs.Close()
	}
	_ = pw.CloseWithError(werr)
	rerr := <-reply
	switch {
	case rerr != nil:
		// The target's answer (which names it) says more than the pipe
		// it closed.
		s.sent, s.err = 0, errs.Wrap(rerr, errs.KindOf(rerr), "", "stream the process image's chunks")
	case werr != nil:
		s.sent, s.err = 0, errs.Wrap(werr, errs.KindOf(werr), errs.Host(s.target.Addr()), "stream the process image's chunks")
	}
}
