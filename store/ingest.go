package store

import (
	"bytes"
	"context"
	"os"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// Ingest is one in-flight write: it appends new chunks to packs and, on
// Commit, indexes them (and an image) in one transaction. Put is safe for
// concurrent use; Commit and Abort end the ingest.
//
// Chunks go to one of a few open packs (one per eight workers), each with
// its own lock, so that many cores compressing at once do not queue on a
// single file. A full pack is sealed (flushed, fsynced, re-read, renamed)
// in the background while the workers fill the next; Commit waits for
// every seal before it indexes anything, so the order that makes a crash
// safe is the same for each pack: write temp, fsync, verify, rename, fsync
// dir, then index in one transaction.
type Ingest struct {
	s *Store

	mu      sync.Mutex
	open    []*packWriter // open packs, by stripe; nil until first used
	next    int           // stripe the next chunk goes to
	sealed  []sealedPack  // every pack this ingest started, by index
	written map[Digest]newChunk
	leased  []Digest
	held    map[Digest]bool
	stored  int64 // payload bytes written
	done    bool
	failed  error // the first write or seal that failed

	active  sync.WaitGroup // appends between reserving a pack and recording the offset
	sealing sync.WaitGroup // background seals
}

// sealedPack is a pack's name and size once sealed; ok is false until then
// (and stays false if the seal failed).
type sealedPack struct {
	id   Digest
	size int64
	ok   bool
}

// newChunk is where this ingest put a chunk: pack indexes sealed.
type newChunk struct {
	pack   int
	offset int64
	stored uint32
	raw    uint32
	enc    uint8
}

// NewIngest starts a write.
func (s *Store) NewIngest() *Ingest {
	return &Ingest{s: s, written: map[Digest]newChunk{}, held: map[Digest]bool{}, open: make([]*packWriter, s.packStripes())}
}

// holdLocked leases d once per ingest. Callers hold in.mu.
func (in *Ingest) holdLocked(d Digest) {
	if !in.held[d] {
		in.held[d] = true
		in.leased = append(in.leased, d)
		in.s.lease(d)
	}
}

// holdAllLocked is holdLocked for many digests, taking the store's lease
// lock once: with every core putting chunks, that lock is shared by all.
// Callers hold in.mu.
func (in *Ingest) holdAllLocked(ds []Digest) {
	first := len(in.leased)
	for _, d := range ds {
		if !in.held[d] {
			in.held[d] = true
			in.leased = append(in.leased, d)
		}
	}
	in.s.leaseAll(in.leased[first:])
}

// Put stores data as a chunk unless the store already has it, and returns
// its digest and how many bytes it added (0 for a chunk already present).
// A new chunk is compressed, and the compressed form decoded and compared
// with the input before it is written.
func (in *Ingest) Put(ctx context.Context, data []byte) (Digest, int64, error) {
	d := Sum(data)
	n, err := in.putData(ctx, d, data)
	return d, n, err
}

func (in *Ingest) putData(ctx context.Context, d Digest, data []byte) (int64, error) {
	_, added, _, err := in.putBatch(ctx, [][]byte{data}, []Digest{d})
	return added, err
}

// PutBatch is Put for several chunks: they are hashed, then looked up in
// one read transaction, and only the missing ones are compressed and
// written. It returns the digests in order, the bytes added and how many
// chunks were new.
func (in *Ingest) PutBatch(ctx context.Context, data [][]byte) ([]Digest, int64, int, error) {
	ds := make([]Digest, len(data))
	for i, b := range data {
		ds[i] = Sum(b)
	}
	return in.putBatch(ctx, data, ds)
}

func (in *Ingest) putBatch(ctx context.Context, data [][]byte, ds []Digest) ([]Digest, int64, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, 0, err
	}
	for i, b := range data {
		if len(b) == 0 || len(b) > MaxChunkSize {
			return nil, 0, 0, errs.New(errs.InvalidArgument, chunkSubject(ds[i]), "size %d is outside 1..%d", len(b), MaxChunkSize)
		}
	}
	skip, err := in.present(ds)
	if err != nil {
		return nil, 0, 0, err
	}
	var added int64
	var fresh int
	// The compressed form and its check are copied into the pack, so two
	// scratch buffers serve the whole batch: a gigabyte committed is
	// otherwise a gigabyte of garbage for the collector.
	cbuf, dbuf := in.s.scratch.Get().(*[]byte), in.s.scratch.Get().(*[]byte)
	defer in.s.scratch.Put(cbuf)
	defer in.s.scratch.Put(dbuf)
	for i, d := range ds {
		if skip[i] {
			continue
		}
		raw := data[i]
		enc, payload := uint8(encZstd), in.s.enc.EncodeAll(raw, (*cbuf)[:0])
		*cbuf = payload[:0]
		if len(payload) >= len(raw)-len(raw)/32 {
			enc, payload = encRaw, raw
		} else if err := in.s.roundTrip(d, raw, payload, dbuf); err != nil {
			return nil, 0, 0, err
		}
		n, err := in.appendChunk(d, len(raw), enc, payload)
		if err != nil {
			return nil, 0, 0, err
		}
		if n > 0 {
			added += n
			fresh++
		}
		// A repeat later in the batch is now this ingest's.
		for j := i + 1; j < len(ds); j++ {
			skip[j] = skip[j] || ds[j] == d
		}
	}
	return ds, added, fresh, nil
}

// present leases ds and reports which of them the store or this ingest
// already has, looked up in one read transaction. Leasing comes first:
// once held, gc cannot take a chunk between the look-up and the commit.
func (in *Ingest) present(ds []Digest) ([]bool, error) {
	skip := make([]bool, len(ds))
	in.mu.Lock()
	if in.done {
		in.mu.Unlock()
		return nil, errs.New(errs.FailedPrecondition, "", "ingest already committed or aborted")
	}
	in.holdAllLocked(ds)
	for i, d := range ds {
		_, skip[i] = in.written[d]
	}
	in.mu.Unlock()
	err := in.s.view(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketChunks)
		for i, d := range ds {
			skip[i] = skip[i] || b.Get(d[:]) != nil
		}
		return nil
	})
	if err != nil {
		return nil, dbErr(err, "look up chunks")
	}
	return skip, nil
}

// put appends a checked payload unless the store or this ingest has d.
func (in *Ingest) put(ctx context.Context, d Digest, raw int, enc uint8, payload []byte) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	in.mu.Lock()
	if in.done {
		in.mu.Unlock()
		return 0, errs.New(errs.FailedPrecondition, "", "ingest already committed or aborted")
	}
	in.holdLocked(d)
	_, mine := in.written[d]
	in.mu.Unlock()
	if mine {
		return 0, nil
	}
	if has, err := in.s.has(d); err != nil || has {
		return 0, err
	}
	return in.appendChunk(d, raw, enc, payload)
}

// appendChunk writes a leased, looked-up chunk to an open pack unless
// another worker of this ingest wrote it meanwhile. The chunk is claimed
// and its pack chosen under in.mu; the write itself holds only the pack's
// own lock.
func (in *Ingest) appendChunk(d Digest, raw int, enc uint8, payload []byte) (int64, error) {
	in.mu.Lock()
	if in.done {
		in.mu.Unlock()
		return 0, errs.New(errs.FailedPrecondition, "", "ingest already committed or aborted")
	}
	if in.failed != nil {
		in.mu.Unlock()
		return 0, in.failed
	}
	if _, ok := in.written[d]; ok {
		in.mu.Unlock()
		return 0, nil
	}
	stripe := in.next
	in.next = (in.next + 1) % len(in.open)
	pw := in.open[stripe]
	if pw == nil {
		var err error
		if pw, err = in.s.newPackWriter(); err != nil {
			in.failed = err
			in.mu.Unlock()
			return 0, err
		}
		pw.index = len(in.sealed)
		in.sealed = append(in.sealed, sealedPack{})
		in.open[stripe] = pw
	}
	// Claim d now so that no other worker writes it too; the offset is
	// filled in below, before Commit can look at it (it waits on active).
	in.written[d] = newChunk{pack: pw.index, stored: uint32(len(payload)), raw: uint32(raw), enc: enc}
	in.stored += int64(len(payload))
	pw.users++
	in.active.Add(1)
	in.mu.Unlock()
	defer in.active.Done()

	pw.mu.Lock()
	off, err := pw.append(d, enc, raw, payload)
	full := pw.off >= in.s.opts.PackSize
	pw.mu.Unlock()

	in.mu.Lock()
	defer in.mu.Unlock()
	pw.users--
	if err != nil {
		if in.failed == nil {
			in.failed = err
		}
		return 0, err
	}
	c := in.written[d]
	c.offset = off
	in.written[d] = c
	if full && in.open[stripe] == pw {
		in.open[stripe] = nil // the next chunk for this stripe starts a new pack
		pw.full = true
	}
	if pw.full && pw.users == 0 {
		in.sealAsyncLocked(pw)
	}
	return int64(len(payload)), nil
}

// sealAsyncLocked seals a detached pack on its own goroutine, so that the
// fsync and the re-read overlap the writes to the next pack. Callers hold
// in.mu and have made sure no one else writes to pw.
func (in *Ingest) sealAsyncLocked(pw *packWriter) {
	pw.full = false // seal once
	in.sealing.Add(1)
	go func() {
		defer in.sealing.Done()
		id, size, err := in.s.seal(pw)
		in.mu.Lock()
		defer in.mu.Unlock()
		if err != nil {
			if in.failed == nil {
				in.failed = err
			}
			return
		}
		in.sealed[pw.index] = sealedPack{id: id, size: size, ok: true}
	}()
}

// Require leases ds for this ingest and returns those the store lacks and
// this ingest has not written. A commit that references chunks it did not
// Put must Require them first.
func (in *Ingest) Require(ctx context.Context, ds []Digest) ([]Digest, error) {
	in.mu.Lock()
	in.holdAllLocked(ds)
	in.mu.Unlock()
	missing, err := in.s.Missing(ctx, ds)
	if err != nil {
		return nil, err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	out := missing[:0]
	for _, d := range missing {
		if _, ok := in.written[d]; !ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// StoredBytes is how many compressed bytes this ingest has written.
func (in *Ingest) StoredBytes() int64 {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stored
}

// finish ends the ingest for writers: it waits for appends in flight,
// seals the open packs and waits for every seal. It returns the first
// write or seal error. Callers must not hold in.mu.
func (in *Ingest) finish() error {
	in.active.Wait()
	in.mu.Lock()
	for i, pw := range in.open {
		if pw != nil {
			in.open[i] = nil
			in.sealAsyncLocked(pw)
		}
	}
	in.mu.Unlock()
	in.sealing.Wait()
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.failed
}

// ImageRecord is what an image commit indexes. Info and Manifest are
// opaque to the store; Info must be a JSON object whose "session" member
// names the session.
type ImageRecord struct {
	ID       string
	Info     []byte
	Manifest []byte
	Refs     []Digest // every non-zero chunk the image uses; duplicates allowed
}

// Commit makes the ingest's chunks durable and indexes them, with img if it
// is not nil, in one transaction. Without an image the new chunks are
// pending: gc keeps them for Options.PendingGrace waiting for the image
// that will use them.
func (in *Ingest) Commit(ctx context.Context, img *ImageRecord) error {
	in.mu.Lock()
	if in.done {
		in.mu.Unlock()
		return errs.New(errs.FailedPrecondition, "", "ingest already committed or aborted")
	}
	in.done = true
	in.mu.Unlock()
	t0 := time.Now()
	ferr := in.finish()
	sealed := time.Since(t0)
	in.mu.Lock()
	defer in.mu.Unlock()
	defer in.cleanupLocked()
	if ferr == nil {
		ferr = ctx.Err()
	}
	if ferr != nil {
		in.dropPacksLocked()
		return ferr
	}
	var refs []Digest
	if img != nil {
		if img.ID == "" {
			in.dropPacksLocked()
			return errs.New(errs.InvalidArgument, "", "image id is empty")
		}
		refs = slices.Clone(img.Refs)
		slices.SortFunc(refs, func(a, b Digest) int { return bytes.Compare(a[:], b[:]) })
		refs = slices.Compact(refs)
		for _, d := range refs {
			if !in.held[d] {
				in.dropPacksLocked()
				return errs.New(errs.Internal, errs.Image(img.ID), "%s was neither put nor required by this ingest", chunkSubject(d))
			}
		}
	}
	pending := int64(0)
	if img == nil {
		pending = time.Now().Add(in.s.opts.PendingGrace).UnixNano()
	}
	// New chunks in digest order make the B+tree inserts sequential.
	news := make([]Digest, 0, len(in.written))
	for d := range in.written {
		news = append(news, d)
	}
	slices.SortFunc(news, func(a, b Digest) int { return bytes.Compare(a[:], b[:]) })

	err := in.s.update(ctx, func(tx *bolt.Tx) error {
		chunks, packs := tx.Bucket(bucketChunks), tx.Bucket(bucketPacks)
		live := make([]packRecord, len(in.sealed))
		for i, p := range in.sealed {
			live[i].Size = uint64(p.size)
		}
		for _, d := range news {
			c := in.written[d]
			if v := chunks.Get(d[:]); v != nil {
				// Indexed meanwhile by another ingest: our copy is dead
				// weight in our pack until gc rewrites it.
				if r, ok := decodeChunkRecord(v); ok && img == nil && r.Refs == 0 && r.Pending < pending {
					r.Pending = pending
					if err := chunks.Put(d[:], r.encode()); err != nil {
						return err
					}
				}
				continue
			}
			r := chunkRecord{Pack: in.sealed[c.pack].id, Offset: uint64(c.offset), Stored: c.stored, Raw: c.raw, Enc: c.enc, Pending: pending}
			if err := chunks.Put(d[:], r.encode()); err != nil {
				return err
			}
			live[c.pack].LiveChunks++
			live[c.pack].LiveBytes += uint64(c.stored)
		}
		for i, p := range in.sealed {
			if err := packs.Put(p.id[:], live[i].encode()); err != nil {
				return err
			}
		}
		if img == nil {
			return nil
		}
		return putImage(tx, img, refs)
	})
	if err != nil {
		in.dropPacksLocked()
		return dbErr(err, "index commit")
	}
	for _, p := range in.sealed {
		in.s.setInflight(p.id.String()+".pack", false)
	}
	in.s.log.Debug("ingest committed", "packs", len(in.sealed), "new_chunks", len(news), "refs", len(refs),
		"seal", sealed, "index", time.Since(t0)-sealed)
	in.sealed = nil
	return nil
}

func putImage(tx *bolt.Tx, img *ImageRecord, refs []Digest) error {
	images, chunks := tx.Bucket(bucketImages), tx.Bucket(bucketChunks)
	if images.Bucket([]byte(img.ID)) != nil {
		return errs.New(errs.AlreadyExists, errs.Image(img.ID), "already in the store; remove it first with `gpuctl images rm %s`", img.ID)
	}
	flat := make([]byte, 0, len(refs)*32)
	for _, d := range refs {
		v := chunks.Get(d[:])
		if v == nil {
			return errs.New(errs.FailedPrecondition, errs.Image(img.ID), "%s is not in the store", chunkSubject(d))
		}
		r, ok := decodeChunkRecord(v)
		if !ok {
			return must(false, "%s has a bad record", chunkSubject(d))
		}
		r.Refs++
		r.Pending = 0
		if err := chunks.Put(d[:], r.encode()); err != nil {
			return err
		}
		flat = append(flat, d[:]...)
	}
	b, err := images.CreateBucket([]byte(img.ID))
	if err != nil {
		return err
	}
	for k, v := range map[string][]byte{string(keyInfo): img.Info, string(keyManifest): img.Manifest, string(keyRefs): flat} {
		if err := b.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return indexSession(tx.Bucket(bucketBySession), sessionOfInfo(img.Info), []byte(img.ID))
}

// Abort drops everything the ingest wrote. It is safe after Commit (then
// it does nothing) and may be deferred.
func (in *Ingest) Abort() {
	in.mu.Lock()
	if in.done {
		in.mu.Unlock()
		return
	}
	in.done = true
	in.mu.Unlock()
	_ = in.finish() // a pack being sealed must land before it can be removed
	in.mu.Lock()
	defer in.mu.Unlock()
	in.dropPacksLocked()
	in.cleanupLocked()
}

// dropPacksLocked removes this ingest's packs. Only after finish: no pack
// is open or being sealed.
func (in *Ingest) dropPacksLocked() {
	for _, p := range in.sealed {
		if p.ok {
			_ = os.Remove(in.s.packPath(p.id))
			in.s.setInflight(p.id.String()+".pack", false)
		}
	}
	in.sealed = nil
}

func (in *Ingest) cleanupLocked() {
	in.s.release(in.leased)
	in.leased = nil
	in.held = map[Digest]bool{}
}
