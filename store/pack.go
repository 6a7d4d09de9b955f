package store

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/gpuctl/gpuctl/errs"
)

// A pack file is the magic followed by entries, each a header and a payload:
//
//	magic "GPUPACK1" | 16 random bytes
//	entry: digest [32] | encoding u8 | raw length u32 | stored length u32 | payload
//
// The index records each chunk's payload offset, so reads never parse the
// file; the headers make a pack self-describing for offline recovery. A
// pack is named by 32 random bytes (the first 16 also follow the magic):
// two ingests writing the same chunks never share a file that one of them
// might later delete.
var packMagic = []byte("GPUPACK1")

const packEntryHeader = 32 + 1 + 4 + 4

// packWriter appends entries to a temporary file while hashing it. mu
// serializes appends; index, users and full belong to the ingest and are
// guarded by its lock.
type packWriter struct {
	mu    sync.Mutex
	index int  // in the ingest's list of packs
	users int  // appends that chose this pack and have not finished
	full  bool // reached the pack size; seal once users is 0

	f    *os.File
	name string // base name in blobs/tmp
	w    *bufio.Writer
	h    hash.Hash32 // CRC-32C of everything written
	id   Digest
	off  int64
	n    int // entries
}

// castagnoli is CRC-32C, which the CPU computes in hardware: the pack
// check guards against lost or torn writes, while every chunk read is
// still checked against its BLAKE3 digest.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func (s *Store) newPackWriter() (*packWriter, error) {
	var rnd [16]byte // id and header nonce
	_, _ = rand.Read(rnd[:])
	name := hex.EncodeToString(rnd[:8]) + ".pack.tmp"
	s.setInflight(name, true)
	f, err := os.OpenFile(filepath.Join(s.tmpDir(), name), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		s.setInflight(name, false)
		return nil, errs.Wrap(err, errs.Internal, "", "create pack")
	}
	pw := &packWriter{f: f, name: name, w: bufio.NewWriterSize(f, 1<<20), h: crc32.New(castagnoli)}
	copy(pw.id[:], rnd[:])
	_, _ = rand.Read(pw.id[16:])
	if err := pw.write(append(slices.Clone(packMagic), rnd[:]...)); err != nil {
		pw.discard(s)
		return nil, err
	}
	return pw, nil
}

func (pw *packWriter) write(b []byte) error {
	if _, err := pw.w.Write(b); err != nil {
		return errs.Wrap(err, errs.ResourceExhausted, "", "write pack %s; is the state dir's disk full?", pw.name)
	}
	pw.h.Write(b)
	pw.off += int64(len(b))
	return nil
}

// append writes one entry and returns the payload's offset.
func (pw *packWriter) append(d Digest, enc uint8, raw int, payload []byte) (int64, error) {
	var hdr [packEntryHeader]byte
	copy(hdr[:], d[:])
	hdr[32] = enc
	binary.BigEndian.PutUint32(hdr[33:], uint32(raw))
	binary.BigEndian.PutUint32(hdr[37:], uint32(len(payload)))
	if err := pw.write(hdr[:]); err != nil {
		return 0, err
	}
	off := pw.off
	if err := pw.write(payload); err != nil {
		return 0, err
	}
	pw.n++
	return off, nil
}

// seal makes the pack durable under its name: flush, fsync, re-read and
// verify the checksum, rename into packs/, fsync the directory.
// The pack stays in the inflight set until its ingest indexes or drops it.
func (s *Store) seal(pw *packWriter) (id Digest, size int64, err error) {
	tmp := filepath.Join(s.tmpDir(), pw.name)
	defer func() {
		if err != nil {
			pw.discard(s)
		}
	}()
	if err := pw.w.Flush(); err != nil {
		return id, 0, errs.Wrap(err, errs.ResourceExhausted, "", "write pack %s; is the state dir's disk full?", pw.name)
	}
	if !s.opts.NoSync {
		if err := pw.f.Sync(); err != nil {
			return id, 0, errs.Wrap(err, errs.Internal, "", "fsync pack %s", pw.name)
		}
	}
	if err := pw.f.Close(); err != nil {
		return id, 0, errs.Wrap(err, errs.Internal, "", "close pack %s", pw.name)
	}
	id = pw.id
	if err := verifyFileChecksum(tmp, pw.h.Sum32()); err != nil {
		return id, 0, err
	}
	final := id.String() + ".pack"
	s.setInflight(final, true)
	if err := os.Rename(tmp, s.packPath(id)); err != nil {
		s.setInflight(final, false)
		return id, 0, errs.Wrap(err, errs.Internal, "", "rename pack %s", pw.name)
	}
	s.setInflight(pw.name, false)
	if err := s.syncDir(s.packsDir()); err != nil {
		_ = os.Remove(s.packPath(id))
		s.setInflight(final, false)
		return id, 0, errs.Wrap(err, errs.Internal, "", "fsync %s", s.packsDir())
	}
	return id, pw.off, nil
}

// discard removes an unsealed pack.
func (pw *packWriter) discard(s *Store) {
	_ = pw.f.Close()
	_ = os.Remove(filepath.Join(s.tmpDir(), pw.name))
	s.setInflight(pw.name, false)
}

// verifyFileChecksum re-reads path and checks its CRC-32C, so that what
// the index will point at is what was meant to be written.
func verifyFileChecksum(path string, want uint32) error {
	f, err := os.Open(path)
	if err != nil {
		return errs.Wrap(err, errs.Internal, "", "re-read pack")
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	if _, err := io.Copy(h, f); err != nil {
		return errs.Wrap(err, errs.Internal, "", "re-read pack %s", filepath.Base(path))
	}
	if got := h.Sum32(); got != want {
		return errs.New(errs.DataLoss, "", "pack %s reads back with checksum %08x, not %08x: the disk under the state dir is losing writes", filepath.Base(path), got, want)
	}
	return nil
}
