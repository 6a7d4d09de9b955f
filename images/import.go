package images

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/store"
	"github.com/gpuctl/gpuctl/tenant"
)

// ImportOptions adjust Import.
type ImportOptions struct {
	// Progress gets bytes read (total -1: a stream's length is unknown
	// here); may be nil.
	Progress store.Progress
	// Known reports whether this host has a tenant of that name. An image
	// a tenant owns is imported only where its tenant is known (it could
	// not be restored elsewhere); nil knows no tenant.
	Known func(tenant string) bool
}

// Import reads an image stream (a file Export wrote, or what Push sends),
// checks all of it, and commits the image, all or nothing, keeping its
// owner. The administrator imports any image, a tenant only its own; an
// image of a tenant this host does not know (opts.Known) is refused. It
// refuses,
// with one error naming the problem: another format version, a manifest
// that fails Validate (paths with "..", absolute paths, links out of the
// image, sizes that do not add up or exceed the limits), chunk records
// that are not part of the image or come twice, chunks whose size or
// content does not match their digest, records over the size limits
// (decompression bombs), a truncated stream or one whose trailer does not
// match, and chunks that are neither in the stream nor in the store.
func Import(ctx context.Context, st *store.Store, r io.Reader, opts ImportOptions) (*Manifest, Stats, error) {
	m, stats, err := importImage(ctx, st, r, opts)
	if err != nil {
		subj := ""
		if m != nil {
			subj = errs.Image(m.ID)
		}
		kind := errs.KindOf(err)
		if kind == errs.Unknown {
			kind = errs.InvalidArgument
		}
		return nil, Stats{}, errs.Wrap(err, kind, subj, "import refused")
	}
	return m, stats, nil
}

func newRecordReader(r io.Reader, progress store.Progress) *recordReader {
	rr := &recordReader{r: bufio.NewReaderSize(r, 1<<20), h: newStreamHash()}
	if progress != nil {
		var last int64
		rr.prog = func(n int64) {
			if n < 0 { // the end
				progress(rr.n, rr.n)
				return
			}
			if n-last >= 1<<20 {
				last = n
				progress(n, -1)
			}
		}
	}
	return rr
}

func importImage(ctx context.Context, st *store.Store, r io.Reader, opts ImportOptions) (*Manifest, Stats, error) {
	var stats Stats
	rr := newRecordReader(r, opts.Progress)
	defer rr.close()
	if err := rr.header(kindImage); err != nil {
		return nil, stats, err
	}
	typ, body, _, err := rr.next(func(byte) int { return maxManifestRecord })
	if err != nil {
		return nil, stats, err
	}
	if typ != recManifest {
		return nil, stats, fmt.Errorf("the stream does not start with a manifest")
	}
	m, err := decodeManifest(body)
	if err != nil {
		return nil, stats, err
	}
	if err := acceptOwner(ctx, m, opts.Known); err != nil {
		return m, stats, err
	}
	if _, _, err := st.GetImage(ctx, m.ID); err == nil {
		return m, stats, errs.New(errs.AlreadyExists, "", "this host already has the image; remove it first with `gpuctl images rm %s`", m.ID)
	}
	refs, sizes := m.Refs()
	in := st.NewIngest()
	defer in.Abort()
	got, err := receiveChunks(ctx, st, in, rr, sizes, nil)
	if err != nil {
		return m, stats, err
	}
	var absent []store.Digest
	for _, d := range refs {
		if !got[d] {
			absent = append(absent, d)
		}
	}
	missing, err := in.Require(ctx, absent)
	if err != nil {
		return m, stats, err
	}
	if len(missing) > 0 {
		return m, stats, errs.New(errs.FailedPrecondition, "", "chunk %s (and %d more) is neither in the stream nor in this store", missing[0], len(missing)-1)
	}
	stats.StoredBytes = in.StoredBytes()
	stats.LogicalBytes = m.Bytes()
	stats.Chunks = len(refs)
	stats.NewChunks = len(got)
	rec, err := record(m, stats.StoredBytes)
	if err != nil {
		return m, stats, err
	}
	t0 := time.Now()
	err = in.Commit(ctx, rec)
	stats.Index = time.Since(t0)
	return m, stats, err
}

// acceptOwner checks that the caller may import an image of m's owner,
// and that this host knows that owner.
func acceptOwner(ctx context.Context, m *Manifest, known func(string) bool) error {
	who := tenant.FromContext(ctx)
	if !who.Owns(m.Tenant) {
		owner := "the host's administrator"
		if m.Tenant != "" {
			owner = fmt.Sprintf("tenant %q", m.Tenant)
		}
		return errs.New(errs.PermissionDenied, "", "the image belongs to %s; a tenant imports only its own images", owner)
	}
	if m.Tenant != "" && (known == nil || !known(m.Tenant)) {
		return errs.New(errs.FailedPrecondition, "", "the image belongs to tenant %q, which this host does not know; add the tenant (with the same token file) to gpud's --tenants file here", m.Tenant)
	}
	return nil
}

// receiveChunks reads chunk records up to and including the trailer,
// checking each against want (digest to size; nil accepts any digest) and
// storing it through in, in parallel. It returns the digests received.
func receiveChunks(ctx context.Context, st *store.Store, in *store.Ingest, rr *recordReader, want map[store.Digest]int64, keep func(store.Digest, []byte)) (map[store.Digest]bool, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	frames := make(chan store.Frame, 2*st.Workers())
	var wg sync.WaitGroup
	for range st.Workers() {
		wg.Go(func() {
			// Each worker takes what has queued up, up to a batch, so
			// that the look-up costs one transaction per batch.
			const batch = 16
			var fs []store.Frame
			for f := range frames {
				fs = append(fs[:0], f)
			more:
				for len(fs) < batch {
					select {
					case f, ok := <-frames:
						if !ok {
							break more
						}
						fs = append(fs, f)
					default:
						break more
					}
				}
				if ctx.Err() != nil {
					continue
				}
				if in == nil {
					// Staged in memory only: checked, not stored.
					for _, f := range fs {
						raw, err := st.DecodeFrame(f)
						if err != nil {
							cancel(err)
							break
						}
						keep(f.Digest, raw)
					}
					continue
				}
				if _, err := in.PutFrames(ctx, fs); err != nil {
					cancel(err)
					continue
				}
				if keep != nil {
					keepFrames(st, fs, keep)
				}
			}
		})
	}
	got, err := readChunkRecords(ctx, rr, want, frames)
	close(frames)
	wg.Wait()
	// A chunk that failed its check says more than what the reader saw
	// after it (often just the trailer's checksum).
	if cerr := context.Cause(ctx); cerr != nil {
		return nil, cerr
	}
	if err != nil {
		return nil, err
	}
	if rr.prog != nil {
		rr.prog(-1)
	}
	return got, nil
}

// keepFrames hands keep the content of frames the store accepted: a raw
// frame is its content, a compressed one is decoded again.
func keepFrames(st *store.Store, fs []store.Frame, keep func(store.Digest, []byte)) {
	for _, f := range fs {
		if !f.Zstd {
			keep(f.Digest, f.Payload)
			continue
		}
		if raw, err := st.DecodeFrame(f); err == nil {
			keep(f.Digest, raw)
		}
	}
}

func readChunkRecords(ctx context.Context, rr *recordReader, want map[store.Digest]int64, frames chan<- store.Frame) (map[store.Digest]bool, error) {
	got := map[store.Digest]bool{}
	limit := func(t byte) int {
		switch t {
		case recChunk:
			return maxChunkRecord
		case recEnd:
			return 8 + sha256.Size
		}
		return -1
	}
	var records uint64
	for {
		if err := context.Cause(ctx); err != nil {
			return nil, err
		}
		typ, body, before, err := rr.next(limit)
		if err != nil {
			return nil, err
		}
		if typ == recEnd {
			if len(body) != 8+sha256.Size {
				return nil, fmt.Errorf("trailer is %d bytes, want %d", len(body), 8+sha256.Size)
			}
			if n := binary.BigEndian.Uint64(body); n != records {
				return nil, fmt.Errorf("trailer counts %d chunk records, the stream has %d", n, records)
			}
			if !bytes.Equal(body[8:], before) {
				return nil, fmt.Errorf("the stream's checksum does not match its trailer: the file is damaged")
			}
			var extra [1]byte
			if n, _ := rr.r.Read(extra[:]); n > 0 {
				return nil, fmt.Errorf("data after the trailer")
			}
			return got, nil
		}
		records++
		if len(body) < chunkHeader {
			return nil, fmt.Errorf("chunk record %d is %d bytes, too short", records, len(body))
		}
		var f store.Frame
		copy(f.Digest[:], body)
		if body[32]&^1 != 0 {
			return nil, fmt.Errorf("chunk %s: unknown flags %#x", f.Digest, body[32])
		}
		f.Zstd = body[32]&1 == 1
		f.Raw = int(binary.BigEndian.Uint32(body[33:]))
		f.Payload = body[chunkHeader:]
		if want != nil {
			size, ok := want[f.Digest]
			switch {
			case !ok:
				return nil, fmt.Errorf("chunk %s is not part of the image", f.Digest)
			case int64(f.Raw) != size:
				return nil, fmt.Errorf("chunk %s claims %d bytes, the manifest says %d", f.Digest, f.Raw, size)
			}
		}
		if f.Raw <= 0 || f.Raw > store.MaxChunkSize {
			return nil, fmt.Errorf("chunk %s claims %d bytes, outside 1..%d", f.Digest, f.Raw, store.MaxChunkSize)
		}
		if got[f.Digest] {
			return nil, fmt.Errorf("chunk %s comes twice", f.Digest)
		}
		got[f.Digest] = true
		select {
		case frames <- f:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// PutChunks receives a chunk stream (kind 'C': chunk records and a
// trailer) ahead of the manifest that will use the chunks, checking each
// like Import does. The chunks stay pending in the store, kept by GC for
// store.Options.PendingGrace. It returns how many chunks came and the
// bytes they added.
//
// Chunks cross between hosts, under the host token: a tenant may not put
// chunks into the store, where they could stand in for others' images.
func PutChunks(ctx context.Context, st *store.Store, r io.Reader) (int, int64, error) {
	return PutChunksKeep(ctx, st, r, nil)
}

// PutChunksKeep is PutChunks that also hands keep each chunk's content
// once the store has checked it: a migration target stages pre-copied
// device memory that way (package migrate/stage).
func PutChunksKeep(ctx context.Context, st *store.Store, r io.Reader, keep func(store.Digest, []byte)) (int, int64, error) {
	in := st.NewIngest()
	defer in.Abort()
	got, err := acceptChunks(ctx, st, in, r, keep)
	if err != nil {
		return 0, 0, err
	}
	stored := in.StoredBytes()
	if err := in.Commit(ctx, nil); err != nil {
		return 0, 0, refused(err)
	}
	return len(got), stored, nil
}

// StageChunks receives a chunk stream as PutChunks does, checking every
// chunk, but hands each to keep only and stores none: a memory pre-copy's
// target stages a session's device memory this way (api.MemoryParam). It
// returns how many chunks came.
func StageChunks(ctx context.Context, st *store.Store, r io.Reader, keep func(store.Digest, []byte)) (int, error) {
	got, err := acceptChunks(ctx, st, nil, r, keep)
	return len(got), err
}

// acceptChunks reads a chunk stream from another host into in (nil:
// checked and kept only) and keep.
func acceptChunks(ctx context.Context, st *store.Store, in *store.Ingest, r io.Reader, keep func(store.Digest, []byte)) (map[store.Digest]bool, error) {
	if err := tenant.RequireAdmin(ctx, "the chunk transfer between hosts"); err != nil {
		return nil, err
	}
	rr := newRecordReader(r, nil)
	defer rr.close()
	if err := rr.header(kindChunks); err != nil {
		return nil, refused(err)
	}
	got, err := receiveChunks(ctx, st, in, rr, nil, keep)
	if err != nil {
		return nil, refused(err)
	}
	return got, nil
}

// refused is a chunk stream's error: the sender's fault unless it says
// otherwise.
func refused(err error) error {
	kind := errs.KindOf(err)
	if kind == errs.Unknown {
		kind = errs.InvalidArgument
	}
	return errs.Wrap(err, kind, "", "chunk stream refused")
}

// WriteChunks writes ds from st as a chunk stream for PutChunks.
func WriteChunks(ctx context.Context, st *store.Store, ds []store.Digest, w io.Writer) (int64, error) {
	ew := newRecordWriter(w)
	defer ew.close()
	ew.header(kindChunks)
	infos, err := st.StatAll(ctx, ds)
	if err != nil {
		return ew.n, err
	}
	stored := make([]int64, len(infos))
	for i, ci := range infos {
		stored[i] = int64(ci.Stored)
	}
	if err := writeFrames(ctx, st, ew, ds, stored, nil); err != nil {
		return ew.n, err
	}
	ew.end()
	return ew.n, ew.err
}

// WriteRawChunks writes data (chunk contents, whose digests ds the caller
// computed) as a chunk stream for PutChunks, uncompressed: a migration's
// pre-copy sends blocks from memory this way, at the speed of the link
// rather than of the store it reads back from. The receiver checks every
// digest as for any stream.
func WriteRawChunks(ctx context.Context, ds []store.Digest, data [][]byte, w io.Writer) (int64, error) {
	if len(ds) != len(data) {
		return 0, errs.New(errs.Internal, "", "%d digests for %d chunks", len(ds), len(data))
	}
	cs := NewChunkStream(w)
	for i, b := range data {
		if err := ctx.Err(); err != nil {
			return cs.abort(), err
		}
		if cs.Put(ds[i], b) != nil {
			break
		}
	}
	return cs.Close()
}

// ChunkStream writes a chunk stream for PutChunks one chunk at a time,
// uncompressed, for a sender that does not have the chunks all at once
// (a migration sends the process image's chunks as its store makes
// them). It is not safe for concurrent use.
type ChunkStream struct{ ew *recordWriter }

// NewChunkStream starts a chunk stream on w.
func NewChunkStream(w io.Writer) *ChunkStream {
	ew := newRecordWriter(w)
	ew.header(kindChunks)
	return &ChunkStream{ew: ew}
}

// Put writes chunk b, whose digest the caller computed as d (the
// receiver checks it); the first write error stays.
func (cs *ChunkStream) Put(d store.Digest, b []byte) error {
	cs.ew.chunk(store.Frame{Digest: d, Raw: len(b), Payload: b})
	return cs.ew.err
}

// abort stops the stream without its trailer, so that the receiver
// refuses it as truncated, and returns the bytes written.
func (cs *ChunkStream) abort() int64 {
	cs.ew.close()
	return cs.ew.n
}

// Close ends the stream with its trailer and returns the bytes written.
func (cs *ChunkStream) Close() (int64, error) {
	cs.ew.end()
	cs.ew.close()
	return cs.ew.n, cs.ew.err
}
