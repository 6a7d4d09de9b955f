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
type Ingest struct {
	s *Store

	mu      sync.Mutex
	cur     *packWriter
	sealed  []sealedPack
	written map[Digest]newChunk // chunks this ingest wrote
	leased  []Digest
	held    map[Digest]bool
	stored  int64 // payload bytes written
	done    bool
}

type sealedPack struct {
	id   Digest
	size int64
}

// newChunk is where this ingest put a chunk. pack indexes sealed once the
// pack is sealed; until then it is -1 and the chunk is in cur.
type newChunk struct {
	pack   int
	cur    *packWriter
	offset int64
	stored uint32
	raw    uint32
	enc    uint8
}

// NewIngest starts a write.
func (s *Store) NewIngest() *Ingest {
	return &Ingest{s: s, written: map[Digest]newChunk{}, held: map[Digest]bool{}}
}

// holdLocked leases d once per ingest. Callers hold in.mu.
func (in *Ingest) holdLocked(d Digest) {
	if !in.held[d] {
		in.held[d] = true
		in.leased = append(in.leased, d)
		in.s.lease(d)
	}
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
	// Lease first: once held, gc cannot take a chunk between the look-up
	// and the commit.
	skip := make([]bool, len(ds))
	in.mu.Lock()
	if in.done {
		in.mu.Unlock()
		return nil, 0, 0, errs.New(errs.FailedPrecondition, "", "ingest already committed or aborted")
	}
	for i, d := range ds {
		in.holdLocked(d)
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
		return nil, 0, 0, dbErr(err, "look up chunks")
	}
	var added int64
	var fresh int
	for i, d := range ds {
		if skip[i] {
			continue
		}
		raw := data[i]
		enc, payload := uint8(encZstd), in.s.enc.EncodeAll(raw, make([]byte, 0, len(raw)/2))
		if len(payload) >= len(raw)-len(raw)/32 {
			enc, payload = encRaw, raw
		} else if err := in.s.roundTrip(d, raw, payload); err != nil {
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

// appendChunk writes a leased, looked-up chunk to the current pack unless
// another worker of this ingest wrote it meanwhile.
func (in *Ingest) appendChunk(d Digest, raw int, enc uint8, payload []byte) (int64, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.done {
		return 0, errs.New(errs.FailedPrecondition, "", "ingest already committed or aborted")
	}
	if _, ok := in.written[d]; ok {
		return 0, nil
	}
	if in.cur == nil {
		pw, err := in.s.newPackWriter()
		if err != nil {
			return 0, err
		}
		in.cur = pw
	}
	off, err := in.cur.append(d, enc, raw, payload)
	if err != nil {
		return 0, err
	}
	in.written[d] = newChunk{pack: -1, cur: in.cur, offset: off, stored: uint32(len(payload)), raw: uint32(raw), enc: enc}
	in.stored += int64(len(payload))
	if in.cur.off >= in.s.opts.PackSize {
		if err := in.sealLocked(); err != nil {
			return 0, err
		}
	}
	return int64(len(payload)), nil
}

// Require leases ds for this ingest and returns those the store lacks and
// this ingest has not written. A commit that references chunks it did not
// Put must Require them first.
func (in *Ingest) Require(ctx context.Context, ds []Digest) ([]Digest, error) {
	in.mu.Lock()
	for _, d := range ds {
		in.holdLocked(d)
	}
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

func (in *Ingest) sealLocked() error {
	pw := in.cur
	in.cur = nil
	id, size, err := in.s.seal(pw)
	if err != nil {
		return err
	}
	idx := len(in.sealed)
	in.sealed = append(in.sealed, sealedPack{id: id, size: size})
	for d, c := range in.written {
		if c.pack == -1 && c.cur == pw {
			c.pack, c.cur = idx, nil
			in.written[d] = c
		}
	}
	return nil
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
	defer in.mu.Unlock()
	if in.done {
		return errs.New(errs.FailedPrecondition, "", "ingest already committed or aborted")
	}
	in.done = true
	defer in.cleanupLocked()
	if err := ctx.Err(); err != nil {
		return err
	}
	t0 := time.Now()
	if in.cur != nil {
		if err := in.sealLocked(); err != nil {
			return err
		}
	}
	sealed := time.Since(t0)
	var refs []Digest
	if img != nil {
		if img.ID == "" {
			return errs.New(errs.InvalidArgument, "", "image id is empty")
		}
		refs = slices.Clone(img.Refs)
		slices.SortFunc(refs, func(a, b Digest) int { return bytes.Compare(a[:], b[:]) })
		refs = slices.Compact(refs)
		for _, d := range refs {
			if !in.held[d] {
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
	defer in.mu.Unlock()
	if in.done {
		return
	}
	in.done = true
	in.dropPacksLocked()
	in.cleanupLocked()
}

func (in *Ingest) dropPacksLocked() {
	if in.cur != nil {
		in.cur.discard(in.s)
		in.cur = nil
	}
	for _, p := range in.sealed {
		_ = os.Remove(in.s.packPath(p.id))
		in.s.setInflight(p.id.String()+".pack", false)
	}
	in.sealed = nil
}

func (in *Ingest) cleanupLocked() {
	if in.cur != nil {
		in.cur.discard(in.s)
		in.cur = nil
	}
	in.s.release(in.leased)
	in.leased = nil
	in.held = map[Digest]bool{}
}
