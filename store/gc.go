package store

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// GCStats says what a collection reclaimed.
type GCStats struct {
	ChunksRemoved  int   `json:"chunks_removed"`
	PacksRemoved   int   `json:"packs_removed"`
	PacksRewritten int   `json:"packs_rewritten"`
	OrphanFiles    int   `json:"orphan_files"` // left by crashed or failed writes
	BytesFreed     int64 `json:"bytes_freed"`
}

// GC removes chunks no image uses (unless leased by an in-flight ingest or
// still pending), deletes packs with nothing live, rewrites packs that are
// less than half live, and deletes files no index entry points at: the
// leftovers of crashed writes. Ingests block while it runs.
func (s *Store) GC(ctx context.Context) (GCStats, error) {
	s.sweep.Lock()
	defer s.sweep.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	var st GCStats
	now := time.Now()
	var dead []Digest
	var rewrite []Digest
	err := s.update(ctx, func(tx *bolt.Tx) error {
		chunks, packs := tx.Bucket(bucketChunks), tx.Bucket(bucketPacks)
		var drop [][]byte
		live := map[Digest]packRecord{}
		err := chunks.ForEach(func(k, v []byte) error {
			r, ok := decodeChunkRecord(v)
			if !ok {
				return must(false, "chunk %x has a bad record", k)
			}
			var d Digest
			copy(d[:], k)
			if r.Refs > 0 || r.pending(now) || s.leases[d] > 0 {
				return nil
			}
			drop = append(drop, k)
			p, ok := live[r.Pack]
			if !ok {
				if p, ok = decodePackRecord(packs.Get(r.Pack[:])); !ok {
					return must(false, "chunk %x is in unknown pack %s", k, r.Pack.Short())
				}
			}
			p.LiveChunks--
			p.LiveBytes -= uint64(r.Stored)
			live[r.Pack] = p
			return nil
		})
		if err != nil {
			return err
		}
		for _, k := range drop {
			if err := chunks.Delete(k); err != nil {
				return err
			}
		}
		st.ChunksRemoved = len(drop)
		for id, p := range live {
			if err := packs.Put(id[:], p.encode()); err != nil {
				return err
			}
		}
		return packs.ForEach(func(k, v []byte) error {
			id, _ := packID(k)
			p, ok := decodePackRecord(v)
			if !ok {
				return must(false, "pack %x has a bad record", k)
			}
			switch {
			case p.LiveChunks == 0:
				dead = append(dead, id)
			case p.LiveBytes*2 < p.Size:
				rewrite = append(rewrite, id)
			}
			return nil
		})
	})
	if err != nil {
		return st, dbErr(err, "gc")
	}
	if err := s.update(ctx, func(tx *bolt.Tx) error {
		for _, id := range dead {
			if err := tx.Bucket(bucketPacks).Delete(id[:]); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return st, dbErr(err, "gc")
	}
	for _, id := range dead {
		st.BytesFreed += s.removePack(id)
		st.PacksRemoved++
	}
	for _, id := range rewrite {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		freed, err := s.rewritePack(ctx, id)
		if err != nil {
			s.log.Warn("gc: pack left as it is", "pack", id.Short(), "err", err)
			continue
		}
		st.BytesFreed += freed
		st.PacksRewritten++
	}
	n, b, err := s.removeOrphans()
	st.OrphanFiles, st.BytesFreed = n, st.BytesFreed+b
	if st.ChunksRemoved+st.PacksRemoved+st.PacksRewritten+st.OrphanFiles > 0 {
		s.log.Info("gc", "chunks", st.ChunksRemoved, "packs", st.PacksRemoved, "rewritten", st.PacksRewritten, "orphans", st.OrphanFiles, "freed", st.BytesFreed)
	}
	return st, err
}

// removePack deletes a pack file the index no longer names and returns
// its size.
func (s *Store) removePack(id Digest) int64 {
	s.packsMu.Lock()
	s.closePackLocked(id)
	s.packsMu.Unlock()
	var size int64
	if fi, err := os.Stat(s.packPath(id)); err == nil {
		size = fi.Size()
	}
	if err := os.Remove(s.packPath(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		s.log.Warn("gc: remove pack", "pack", id.Short(), "err", err)
	}
	_ = s.syncDir(s.packsDir())
	return size
}

// removeOrphans deletes temporary files and packs that nothing indexes and
// no ingest is writing. The order matters: list the files, then snapshot
// the in-flight marks, then read the index. A file listed but no longer
// marked was either indexed before the index read or abandoned.
func (s *Store) removeOrphans() (n int, freed int64, err error) {
	type file struct {
		dir string
		ent os.DirEntry
	}
	var files []file
	for _, dir := range []string{s.tmpDir(), s.packsDir()} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return 0, 0, errs.Wrap(err, errs.Internal, "", "gc: list %s", dir)
		}
		for _, e := range ents {
			if dir == s.packsDir() && !strings.HasSuffix(e.Name(), ".pack") {
				continue // not ours
			}
			files = append(files, file{dir, e})
		}
	}
	s.inflightMu.Lock()
	inflight := maps.Clone(s.inflight)
	s.inflightMu.Unlock()
	known := map[string]bool{}
	err = s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketPacks).ForEach(func(k, _ []byte) error {
			id, _ := packID(k)
			known[id.String()+".pack"] = true
			return nil
		})
	})
	if err != nil {
		return 0, 0, dbErr(err, "gc")
	}
	for _, f := range files {
		name := f.ent.Name()
		if known[name] || inflight[name] {
			continue
		}
		if fi, err := f.ent.Info(); err == nil {
			freed += fi.Size()
		}
		if err := os.Remove(filepath.Join(f.dir, name)); err == nil {
			n++
		}
	}
	return n, freed, nil
}

// rewritePack copies a pack's live chunks into a new pack, points the index
// at the copy and deletes the original. A chunk that fails verification
// stops the rewrite, so corruption stays where verify can name it. Callers
// hold s.mu.
func (s *Store) rewritePack(ctx context.Context, old Digest) (int64, error) {
	type item struct {
		d Digest
		r chunkRecord
	}
	var items []item
	err := s.view(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketChunks).ForEach(func(k, v []byte) error {
			r, ok := decodeChunkRecord(v)
			if ok && r.Pack == old {
				var d Digest
				copy(d[:], k)
				items = append(items, item{d, r})
			}
			return nil
		})
	})
	if err != nil {
		return 0, dbErr(err, "gc")
	}
	pw, err := s.newPackWriter()
	if err != nil {
		return 0, err
	}
	offs := make([]int64, len(items))
	for i, it := range items {
		payload, err := s.readPayload(it.r)
		if err != nil {
			pw.discard(s)
			return 0, errs.Wrap(err, errs.DataLoss, chunkSubject(it.d), "read")
		}
		if _, err := s.decode(it.d, it.r.Enc, it.r.Raw, payload); err != nil {
			pw.discard(s)
			return 0, err
		}
		if offs[i], err = pw.append(it.d, it.r.Enc, int(it.r.Raw), payload); err != nil {
			pw.discard(s)
			return 0, err
		}
	}
	id, size, err := s.seal(pw)
	if err != nil {
		return 0, err
	}
	defer s.setInflight(id.String()+".pack", false)
	err = s.update(ctx, func(tx *bolt.Tx) error {
		chunks, packs := tx.Bucket(bucketChunks), tx.Bucket(bucketPacks)
		var live packRecord
		live.Size = uint64(size)
		for i, it := range items {
			r, ok := decodeChunkRecord(chunks.Get(it.d[:]))
			if !ok || r.Pack != old {
				continue
			}
			r.Pack, r.Offset = id, uint64(offs[i])
			if err := chunks.Put(it.d[:], r.encode()); err != nil {
				return err
			}
			live.LiveChunks++
			live.LiveBytes += uint64(r.Stored)
		}
		if err := packs.Put(id[:], live.encode()); err != nil {
			return err
		}
		return packs.Delete(old[:])
	})
	if err != nil {
		_ = os.Remove(s.packPath(id))
		return 0, dbErr(err, "gc")
	}
	return s.removePack(old) - size, nil
}
