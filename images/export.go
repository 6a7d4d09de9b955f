package images

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
)

// The export format: one file that carries an image to any host.
//
//	header   "GPUCTL-IMAGE\n" | version u16 | kind u8 ('I' image, 'C' chunks only)
//	records  type u8 | length u32 | body
//	  'M'    the manifest, zstd-compressed JSON (image streams only; first)
//	  'C'    digest [32] | flags u8 (bit 0: zstd) | raw length u32 | payload
//	  'E'    chunk records u64 | SHA-256 of every byte before this record; last
//
// Integers are big endian. Chunks keep the compression they have in the
// store. An image stream may leave out chunks the receiving store already
// holds (that is how Push sends only what a peer lacks); a file written by
// Export leaves out nothing.
const (
	exportMagic   = "GPUCTL-IMAGE\n"
	ExportVersion = 1
	kindImage     = 'I'
	kindChunks    = 'C'

	recManifest = 'M'
	recChunk    = 'C'
	recEnd      = 'E'

	maxManifestRecord = 768 << 20 // compressed; hex digests compress to about half
	chunkHeader       = 32 + 1 + 4
	// A zstd frame is never much larger than its content; anything bigger
	// is not a chunk this format produces.
	maxChunkRecord = chunkHeader + store.MaxChunkSize + store.MaxChunkSize/64 + 1024
)

// Export writes image id as one self-contained stream to w. progress gets
// chunks written out of the total. It returns the bytes written.
func Export(ctx context.Context, st *store.Store, id string, w io.Writer, progress store.Progress) (int64, error) {
	return export(ctx, st, id, w, nil, progress)
}

// ExportSize is the exact number of bytes Export will write for id, for a
// Content-Length and a progress bar with an end.
func ExportSize(ctx context.Context, st *store.Store, id string) (int64, error) {
	p, err := planExport(ctx, st, id, nil)
	if err != nil {
		return 0, err
	}
	p.release()
	return p.size, nil
}

// exportPlan is what an export will write: the encoded manifest and the
// chunks, with the total size.
type exportPlan struct {
	body    []byte
	refs    []store.Digest
	stored  []int64 // each ref's payload size
	size    int64
	release func() // lets gc have the chunks again
}

// planExport plans id's export; only, when not nil, limits the chunk
// records to the digests it holds. The plan holds the chunks against gc
// (an `images rm` while the export streams must not cut it short) until
// writeExport ends or release is called.
func planExport(ctx context.Context, st *store.Store, id string, only map[store.Digest]bool) (exportPlan, error) {
	m, body, err := getEncoded(ctx, st, id)
	if err != nil {
		return exportPlan{}, err
	}
	return planExportOf(ctx, st, m, body, only)
}

// planExportOf is planExport for a manifest read already (m, and body as
// stored).
func planExportOf(ctx context.Context, st *store.Store, m *Manifest, body []byte, only map[store.Digest]bool) (exportPlan, error) {
	id := m.ID
	refs, _ := m.Refs()
	if only != nil {
		sel := refs[:0:0]
		for _, d := range refs {
			if only[d] {
				sel = append(sel, d)
			}
		}
		refs = sel
	}
	release := st.Hold(refs)
	size := int64(len(exportMagic)+3) + 5 + int64(len(body)) + 5 + 8 + sha256.Size
	infos, err := st.StatAll(ctx, refs)
	if err != nil {
		release()
		return exportPlan{}, errs.Wrap(err, errs.KindOf(err), errs.Image(id), "export")
	}
	stored := make([]int64, len(infos))
	for i, ci := range infos {
		stored[i] = int64(ci.Stored)
		size += 5 + chunkHeader + stored[i]
	}
	return exportPlan{body: body, refs: refs, stored: stored, size: size, release: release}, nil
}

// writeFrames reads refs (stored[i] bytes each in the store) on the
// workers, in batches that are looked up in one read transaction each,
// and writes them in order. Batches stop at frameBatchBytes, so that the
// window of batches in flight stays small whatever the chunk sizes.
func writeFrames(ctx context.Context, st *store.Store, ew *recordWriter, refs []store.Digest, stored []int64, progress store.Progress) error {
	const (
		frameBatchBytes  = 1 << 20
		frameBatchChunks = 64
	)
	var cuts []int // batch b is refs[cuts[b]:cuts[b+1]]
	var n int64    // bytes in the batch so far
	for i := range refs {
		if i == 0 || n >= frameBatchBytes || i-cuts[len(cuts)-1] >= frameBatchChunks {
			cuts = append(cuts, i)
			n = 0
		}
		n += stored[i]
	}
	cuts = append(cuts, len(refs))
	return orderedMap(ctx, len(cuts)-1, st.Workers(),
		func(b int) ([]store.Frame, error) { return st.ReadFrames(ctx, refs[cuts[b]:cuts[b+1]]) },
		func(b int, fs []store.Frame) error {
			for j, f := range fs {
				ew.chunk(f)
				if progress != nil {
					progress(int64(cuts[b]+j+1), int64(len(refs)))
				}
			}
			return ew.err
		})
}

func export(ctx context.Context, st *store.Store, id string, w io.Writer, only map[store.Digest]bool, progress store.Progress) (int64, error) {
	p, err := planExport(ctx, st, id, only)
	if err != nil {
		return 0, err
	}
	return writeExport(ctx, st, id, p, w, progress)
}

// exportOf is export for a manifest read already.
func exportOf(ctx context.Context, st *store.Store, m *Manifest, body []byte, w io.Writer, only map[store.Digest]bool, progress store.Progress) (int64, error) {
	p, err := planExportOf(ctx, st, m, body, only)
	if err != nil {
		return 0, err
	}
	return writeExport(ctx, st, m.ID, p, w, progress)
}

func writeExport(ctx context.Context, st *store.Store, id string, p exportPlan, w io.Writer, progress store.Progress) (int64, error) {
	refs := p.refs
	defer p.release()
	ew := newRecordWriter(w)
	defer ew.close()
	ew.header(kindImage)
	ew.record(recManifest, p.body)
	if err := writeFrames(ctx, st, ew, refs, p.stored, progress); err != nil {
		return ew.n, errs.Wrap(err, errs.KindOf(err), errs.Image(id), "export")
	}
	ew.end()
	if ew.err != nil {
		return ew.n, errs.Wrap(ew.err, errs.Unavailable, errs.Image(id), "write export")
	}
	if ew.n != p.size {
		return ew.n, errs.New(errs.Internal, errs.Image(id), "export wrote %d bytes, planned %d", ew.n, p.size)
	}
	return ew.n, nil
}

// recordWriter writes the format, hashing as it goes (on its own
// goroutine: close it when done); the first error sticks.
type recordWriter struct {
	w      *bufio.Writer
	h      *streamHash
	n      int64
	chunks uint64
	err    error
}

func newRecordWriter(w io.Writer) *recordWriter {
	return &recordWriter{w: bufio.NewWriterSize(w, 1<<20), h: newStreamHash()}
}

// close stops the hashing goroutine.
func (rw *recordWriter) close() { rw.h.close() }

func (rw *recordWriter) write(b []byte) {
	if rw.err != nil {
		return
	}
	_, rw.err = rw.w.Write(b)
	rw.h.write(b)
	rw.n += int64(len(b))
}

func (rw *recordWriter) header(kind byte) {
	rw.write(binary.BigEndian.AppendUint16([]byte(exportMagic), ExportVersion))
	rw.write([]byte{kind})
}

func (rw *recordWriter) record(typ byte, parts ...[]byte) {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	rw.write(binary.BigEndian.AppendUint32([]byte{typ}, uint32(n)))
	for _, p := range parts {
		rw.write(p)
	}
}

func (rw *recordWriter) chunk(f store.Frame) {
	hdr := make([]byte, 0, chunkHeader)
	hdr = append(hdr, f.Digest[:]...)
	flags := byte(0)
	if f.Zstd {
		flags = 1
	}
	hdr = append(hdr, flags)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(f.Raw))
	rw.record(recChunk, hdr, f.Payload)
	rw.chunks++
}

func (rw *recordWriter) end() {
	sum := rw.h.sum()
	rw.record(recEnd, binary.BigEndian.AppendUint64(nil, rw.chunks), sum)
	if rw.err == nil {
		rw.err = rw.w.Flush()
	}
}

// orderedMap runs fn(0..n-1) on workers and hands results to sink in
// index order, keeping at most a window of results in memory.
func orderedMap[T any](ctx context.Context, n, workers int, fn func(int) (T, error), sink func(int, T) error) error {
	type res struct {
		v   T
		err error
	}
	window := 4 * workers
	slots := make([]chan res, window)
	for i := range slots {
		slots[i] = make(chan res, 1)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				v, err := fn(i)
				slots[i%window] <- res{v, err}
			}
		})
	}
	// Feed at most window indices ahead of the sink.
	sem := make(chan struct{}, window)
	go func() {
		defer close(next)
		for i := range n {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case next <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var err error
	for i := 0; i < n && err == nil; i++ {
		var r res
		select {
		case r = <-slots[i%window]:
		case <-ctx.Done():
			err = ctx.Err()
			continue
		}
		<-sem
		if err = r.err; err == nil {
			err = sink(i, r.v)
		}
	}
	// No worker can block: index i is fed only after the result of
	// i-window left its slot, so every slot holds at most one result.
	cancel()
	wg.Wait()
	return err
}

// recordReader reads the format strictly, hashing as it goes (on its own
// goroutine: close it when done).
type recordReader struct {
	r    *bufio.Reader
	h    *streamHash
	n    int64 // bytes consumed
	prog func(int64)
}

// close stops the hashing goroutine.
func (rr *recordReader) close() { rr.h.close() }

func (rr *recordReader) full(b []byte) error {
	return rr.fullHash(b, true)
}

// fullHash reads exactly len(b) bytes, adding them to the stream hash if
// hash is set.
func (rr *recordReader) fullHash(b []byte, hash bool) error {
	_, err := io.ReadFull(rr.r, b)
	if hash {
		rr.h.write(b)
	}
	rr.n += int64(len(b))
	if rr.prog != nil {
		rr.prog(rr.n)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the stream ends early, at byte %d: the file is truncated", rr.n)
	}
	return err
}

func (rr *recordReader) header(want byte) error {
	b := make([]byte, len(exportMagic)+3)
	if err := rr.full(b); err != nil {
		return fmt.Errorf("not a gpuctl image export (shorter than the %d-byte header)", len(b))
	}
	if string(b[:len(exportMagic)]) != exportMagic {
		return fmt.Errorf("not a gpuctl image export (bad magic)")
	}
	if v := binary.BigEndian.Uint16(b[len(exportMagic):]); v != ExportVersion {
		return fmt.Errorf("export format version %d; this gpud reads version %d", v, ExportVersion)
	}
	if k := b[len(b)-1]; k != want {
		return fmt.Errorf("stream kind %q, want %q", k, want)
	}
	return nil
}

// next reads one record's type and body, refusing bodies over limit. The
// end record is returned with the stream's digest as it stood before it.
func (rr *recordReader) next(limit func(typ byte) int) (typ byte, body []byte, before []byte, err error) {
	hdr := make([]byte, 5)
	if err := rr.fullHash(hdr, false); err != nil {
		return 0, nil, nil, err
	}
	typ = hdr[0]
	n := binary.BigEndian.Uint32(hdr[1:])
	if typ == recEnd {
		before = rr.h.sum() // the trailer covers everything before its own header
	}
	rr.h.write(hdr)
	max := limit(typ)
	if max < 0 {
		return typ, nil, nil, fmt.Errorf("unknown record type %q at byte %d", typ, rr.n-5)
	}
	if int64(n) > int64(max) {
		return typ, nil, nil, fmt.Errorf("record %q at byte %d is %d bytes, larger than the %d allowed", typ, rr.n-5, n, max)
	}
	// Grow with what actually arrives: a header alone must not make us
	// allocate the largest record allowed.
	if n <= 1<<20 {
		body = make([]byte, n)
		if err := rr.full(body); err != nil {
			return typ, nil, nil, err
		}
		return typ, body, before, nil
	}
	var buf bytes.Buffer
	buf.Grow(1 << 20)
	got, err := io.CopyN(&buf, rr.r, int64(n))
	rr.h.write(buf.Bytes())
	rr.n += got
	if err != nil {
		return typ, nil, nil, fmt.Errorf("the stream ends early, at byte %d: the file is truncated", rr.n)
	}
	if rr.prog != nil {
		rr.prog(rr.n)
	}
	return typ, buf.Bytes(), before, nil
}
