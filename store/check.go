package store

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	bolt "go.etcd.io/bbolt"

	"github.com/gpuctl/gpuctl/errs"
)

// Check verifies that the index agrees with itself and with the files: the
// schema version, every image's chunks exist, reference counts equal the
// images that use each chunk, every chunk lies inside an existing pack, and
// pack accounting adds up. It reads no chunk content (Verify does). It
// returns an errs.DataLoss error listing the first problems found.
func (s *Store) Check(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.sweep.RLock()
	defer s.sweep.RUnlock()
	var probs []string
	add := func(format string, args ...any) {
		if len(probs) < 20 {
			probs = append(probs, fmt.Sprintf(format, args...))
		}
	}
	err := s.view(func(tx *bolt.Tx) error {
		if v := schemaVersion(tx); v != SchemaVersion {
			add("schema version %d, want %d", v, SchemaVersion)
		}
		chunks, packs := tx.Bucket(bucketChunks), tx.Bucket(bucketPacks)
		counted := map[Digest]uint32{}
		sessions := map[string][]string{}
		err := tx.Bucket(bucketImages).ForEachBucket(func(id []byte) error {
			b := tx.Bucket(bucketImages).Bucket(id)
			refs, err := splitRefs(string(id), b.Get(keyRefs))
			if err != nil {
				add("%v", err)
				return nil
			}
			if !slices.IsSortedFunc(refs, cmpDigest) || len(slices.CompactFunc(slices.Clone(refs), func(a, b Digest) bool { return a == b })) != len(refs) {
				add("%s: refs not sorted and distinct", errs.Image(string(id)))
			}
			for _, d := range refs {
				counted[d]++
				if chunks.Get(d[:]) == nil {
					add("%s: %s is missing", errs.Image(string(id)), chunkSubject(d))
				}
			}
			if b.Get(keyInfo) == nil || b.Get(keyManifest) == nil {
				add("%s: info or manifest missing", errs.Image(string(id)))
			}
			if sess := sessionOfInfo(b.Get(keyInfo)); sess != "" {
				sessions[sess] = append(sessions[sess], string(id))
			}
			return nil
		})
		if err != nil {
			return err
		}
		live := map[Digest]packRecord{}
		err = chunks.ForEach(func(k, v []byte) error {
			var d Digest
			copy(d[:], k)
			r, ok := decodeChunkRecord(v)
			if len(k) != 32 || !ok {
				add("chunk %x: bad record", k)
				return nil
			}
			if r.Refs != counted[d] {
				add("%s: %d references recorded, %d images use it", chunkSubject(d), r.Refs, counted[d])
			}
			p, ok := decodePackRecord(packs.Get(r.Pack[:]))
			if !ok {
				add("%s: in unknown pack %s", chunkSubject(d), r.Pack.Short())
				return nil
			}
			if r.Offset+uint64(r.Stored) > p.Size {
				add("%s: lies past the end of pack %s", chunkSubject(d), r.Pack.Short())
			}
			l := live[r.Pack]
			l.LiveChunks++
			l.LiveBytes += uint64(r.Stored)
			live[r.Pack] = l
			return nil
		})
		if err != nil {
			return err
		}
		err = packs.ForEach(func(k, v []byte) error {
			id, _ := packID(k)
			p, ok := decodePackRecord(v)
			if !ok {
				add("pack %x: bad record", k)
				return nil
			}
			if l := live[id]; l.LiveChunks != p.LiveChunks || l.LiveBytes != p.LiveBytes {
				add("pack %s: records %d chunks/%d bytes live, index has %d/%d", id.Short(), p.LiveChunks, p.LiveBytes, l.LiveChunks, l.LiveBytes)
			}
			fi, err := os.Stat(s.packPath(id))
			switch {
			case err != nil:
				add("pack %s: %v", id.Short(), err)
			case uint64(fi.Size()) != p.Size:
				add("pack %s: file is %d bytes, index says %d", id.Short(), fi.Size(), p.Size)
			}
			return nil
		})
		if err != nil {
			return err
		}
		idx := tx.Bucket(bucketBySession)
		n := 0
		err = idx.ForEachBucket(func(sess []byte) error {
			var ids []string
			_ = idx.Bucket(sess).ForEach(func(k, _ []byte) error {
				ids = append(ids, string(k))
				return nil
			})
			n++
			if !slices.Equal(ids, sessions[string(sess)]) {
				add("session index for %q lists %v, images say %v", sess, ids, sessions[string(sess)])
			}
			return nil
		})
		if n != len(sessions) {
			add("session index has %d sessions, images name %d", n, len(sessions))
		}
		return err
	})
	if err != nil {
		return dbErr(err, "check")
	}
	if len(probs) > 0 {
		return errs.New(errs.DataLoss, "", "store check failed: %s", strings.Join(probs, "; "))
	}
	return nil
}

func cmpDigest(a, b Digest) int { return strings.Compare(string(a[:]), string(b[:])) }

// BadChunk is a chunk whose content failed verification.
type BadChunk struct {
	Digest Digest
	Err    error
}

// Progress reports work done out of a total (bytes or items); total < 0
// means unknown. It may be nil.
type Progress func(done, total int64)

// Verify reads every chunk in ds (every indexed chunk when ds is nil),
// decompresses it and checks its digest, in parallel. It returns the
// chunks that failed; the error is for failures to run at all.
func (s *Store) Verify(ctx context.Context, ds []Digest, progress Progress) ([]BadChunk, error) {
	if ds == nil {
		err := s.view(func(tx *bolt.Tx) error {
			return tx.Bucket(bucketChunks).ForEach(func(k, _ []byte) error {
				var d Digest
				copy(d[:], k)
				ds = append(ds, d)
				return nil
			})
		})
		if err != nil {
			return nil, dbErr(err, "verify")
		}
	}
	var (
		mu   sync.Mutex
		bad  []BadChunk
		done atomic.Int64
		next atomic.Int64
		wg   sync.WaitGroup
	)
	total := int64(len(ds))
	for range s.opts.Workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= total || ctx.Err() != nil {
					return
				}
				if _, err := s.ReadChunk(ctx, ds[i]); err != nil && ctx.Err() == nil {
					mu.Lock()
					bad = append(bad, BadChunk{Digest: ds[i], Err: err})
					mu.Unlock()
				}
				if n := done.Add(1); progress != nil && (n%256 == 0 || n == total) {
					progress(n, total)
				}
			}
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return bad, err
	}
	slices.SortFunc(bad, func(a, b BadChunk) int { return cmpDigest(a.Digest, b.Digest) })
	return bad, nil
}
