// Package modcache is a host's content-addressed cache of module images
// (the fatbins, cubins and PTX that clients load), shared by every session
// of the host, so that the second process to load a large library's
// kernels does not send them again.
//
// The cache is a directory of files named by the SHA-256 of their bytes.
// Several processes (gpud's session workers) use one directory at once
// without talking to each other:
//   - an entry is written to a temporary file and renamed into place, so a
//     reader sees a whole image or none;
//   - an entry is the image followed by a trailer holding the image's
//     CRC-32C and a magic number; every read checks it, so a damaged file
//     is a miss (and is removed), never a wrong module. (The SHA-256 in the
//     name was checked when the image arrived; the checksum only guards
//     the disk, at a tenth of the cost of hashing again.)
//   - a read touches the file's modification time, which orders entries
//     from least to most recently used;
//   - after a write the writer trims the directory to its byte bound,
//     oldest first. Two trims at once may remove a little more than
//     needed; a cache may always forget.
//
// Nothing in a session depends on an entry staying: a module, once
// loaded, lives in the session's device state, and a client that loads by
// hash on a host that lacks the entry uploads it.
package modcache

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpuctl/gpuctl/errs"
)

// DefaultBytes is the cache's bound when none is configured.
const DefaultBytes = 4 << 30

// tmpPrefix starts the names of entries being written.
const tmpPrefix = ".tmp-"

// trailer follows the image in an entry: CRC-32C, then trailerMagic.
const (
	trailerLen   = 8
	trailerMagic = 0x3143_4d47 // "GMC1"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// staleTemp is how old a temporary file must be before a trim removes it
// (its writer died).
const staleTemp = time.Hour

// Cache is one cache directory with its byte bound. It is safe for
// concurrent use by goroutines and processes.
type Cache struct {
	dir   string
	limit int64
	log   *slog.Logger
}

// Open uses dir (created if missing) as a cache of at most limit bytes.
func Open(dir string, limit int64, log *slog.Logger) (*Cache, error) {
	if limit <= 0 {
		return nil, errs.New(errs.InvalidArgument, "", "module cache %s: a bound of %d bytes; give a positive size", dir, limit)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, errs.Wrap(err, errs.Internal, "", "module cache %s", dir)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Cache{dir: dir, limit: limit, log: log}, nil
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// Limit is the cache's bound in bytes.
func (c *Cache) Limit() int64 { return c.limit }

func (c *Cache) path(sum [32]byte) string { return filepath.Join(c.dir, hex.EncodeToString(sum[:])) }

// Get returns the image whose SHA-256 is sum, and marks it used.
func (c *Cache) Get(sum [32]byte) ([]byte, bool) {
	p := c.path(sum)
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, false
	}
	n := len(b) - trailerLen
	if n < 0 || binary.LittleEndian.Uint32(b[n+4:]) != trailerMagic ||
		binary.LittleEndian.Uint32(b[n:]) != crc32.Checksum(b[:n], castagnoli) {
		c.log.Warn("module cache entry is damaged; removing it", "entry", filepath.Base(p))
		os.Remove(p)
		return nil, false
	}
	b = b[:n:n]
	now := time.Now()
	_ = os.Chtimes(p, now, now)
	return b, true
}

// Put keeps image under sum, which the caller has checked is its
// SHA-256, then trims the cache to its bound. An image larger than the bound is not kept. Put
// reports nothing: a cache that cannot keep an entry only loses speed,
// and says so in the log.
func (c *Cache) Put(sum [32]byte, image []byte) {
	if int64(len(image))+trailerLen > c.limit {
		return
	}
	p := c.path(sum)
	if _, err := os.Stat(p); err == nil {
		now := time.Now()
		_ = os.Chtimes(p, now, now)
		return
	}
	if err := c.write(p, image); err != nil {
		c.log.Warn("module cache: cannot keep an image", "bytes", len(image), "err", err)
		return
	}
	if err := c.Trim(); err != nil {
		c.log.Warn("module cache: trim failed", "err", err)
	}
}

func (c *Cache) write(p string, image []byte) error {
	f, err := os.CreateTemp(c.dir, tmpPrefix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	var tr [trailerLen]byte
	binary.LittleEndian.PutUint32(tr[:], crc32.Checksum(image, castagnoli))
	binary.LittleEndian.PutUint32(tr[4:], trailerMagic)
	_, err = f.Write(image)
	if err == nil {
		_, err = f.Write(tr[:])
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", filepath.Base(p), err)
	}
	return nil
}

// entry is one cached image as a trim sees it.
type entry struct {
	name string
	size int64
	used time.Time
}

// Trim removes the least recently used entries until the cache holds at
// most its bound, and temporary files that writers left behind.
func (c *Cache) Trim() error {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("list %s: %w", c.dir, err)
	}
	var es []entry
	var total int64
	for _, de := range des {
		fi, err := de.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue // removed meanwhile, or not ours
		}
		if strings.HasPrefix(de.Name(), tmpPrefix) {
			if time.Since(fi.ModTime()) > staleTemp {
				os.Remove(filepath.Join(c.dir, de.Name()))
			}
			continue
		}
		es = append(es, entry{de.Name(), fi.Size(), fi.ModTime()})
		total += fi.Size()
	}
	if total <= c.limit {
		return nil
	}
	slices.SortFunc(es, func(a, b entry) int { return a.used.Compare(b.used) })
	for _, e := range es {
		if total <= c.limit {
			break
		}
		if err := os.Remove(filepath.Join(c.dir, e.name)); err == nil || os.IsNotExist(err) {
			total -= e.size
		}
	}
	return nil
}

// Stats returns the number of entries and the bytes they take on disk.
func (c *Cache) Stats() (entries int, bytes int64) {
	des, err := os.ReadDir(c.dir)
	if err != nil {
		return 0, 0
	}
	for _, de := range des {
		if strings.HasPrefix(de.Name(), tmpPrefix) {
			continue
		}
		if fi, err := de.Info(); err == nil && fi.Mode().IsRegular() {
			entries++
			bytes += fi.Size()
		}
	}
	return entries, bytes
}
