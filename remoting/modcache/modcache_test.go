package modcache

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func img(n int, seed byte) ([]byte, [32]byte) {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i) ^ seed
	}
	return b, sha256.Sum256(b)
}

func TestPutGet(t *testing.T) {
	c, err := Open(filepath.Join(t.TempDir(), "m"), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, sum := img(1000, 1)
	if _, ok := c.Get(sum); ok {
		t.Fatal("an empty cache had an entry")
	}
	c.Put(sum, b)
	got, ok := c.Get(sum)
	if !ok || !bytes.Equal(got, b) {
		t.Fatalf("got %d bytes, %v", len(got), ok)
	}
	if n, size := c.Stats(); n != 1 || size != 1000+trailerLen {
		t.Fatalf("stats %d entries, %d bytes", n, size)
	}
	// A second cache on the same directory (another worker) sees it.
	c2, _ := Open(c.Dir(), 1<<20, nil)
	if _, ok := c2.Get(sum); !ok {
		t.Fatal("a second process does not see the entry")
	}
}

func TestDamagedEntryIsAMiss(t *testing.T) {
	c, _ := Open(t.TempDir(), 1<<20, nil)
	b, sum := img(4096, 2)
	c.Put(sum, b)
	p := filepath.Join(c.Dir(), hex.EncodeToString(sum[:]))
	good, _ := os.ReadFile(p)
	good[10] ^= 1 // one flipped bit
	if err := os.WriteFile(p, good, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Get(sum); ok {
		t.Fatal("a damaged entry was returned")
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("the damaged entry was not removed: %v", err)
	}
}

func TestEvictsLeastRecentlyUsedByBytes(t *testing.T) {
	c, _ := Open(t.TempDir(), 10_000+4*trailerLen, nil)
	var sums [4][32]byte
	base := time.Now().Add(-time.Hour)
	for i := range sums {
		var b []byte
		b, sums[i] = img(3000, byte(10+i))
		c.Put(sums[i], b)
		// Distinct ages, oldest first, whatever the clock's resolution.
		p := filepath.Join(c.Dir(), hex.EncodeToString(sums[i][:]))
		at := base.Add(time.Duration(i) * time.Minute)
		os.Chtimes(p, at, at)
	}
	// Four of 3000 bytes do not fit in 10000: the oldest went at the
	// fourth put. Using entry 1 now makes entry 2 the oldest.
	if _, ok := c.Get(sums[0]); ok {
		t.Fatal("the least recently used entry was kept")
	}
	if _, ok := c.Get(sums[1]); !ok {
		t.Fatal("entry 1 was evicted too")
	}
	b, sum := img(3000, 99)
	c.Put(sum, b)
	if _, ok := c.Get(sums[2]); ok {
		t.Fatal("entry 2, now the least recently used, was kept")
	}
	for _, s := range [][32]byte{sums[1], sums[3], sum} {
		if _, ok := c.Get(s); !ok {
			t.Fatalf("entry %x evicted", s[:4])
		}
	}
	if _, size := c.Stats(); size > c.Limit() {
		t.Fatalf("%d bytes held, bound %d", size, c.Limit())
	}
}

func TestTooLargeAndStaleTemporaries(t *testing.T) {
	c, _ := Open(t.TempDir(), 100, nil)
	b, sum := img(100-trailerLen+1, 3)
	c.Put(sum, b)
	if n, _ := c.Stats(); n != 0 {
		t.Fatal("an image larger than the whole cache was kept")
	}
	stale := filepath.Join(c.Dir(), tmpPrefix+"dead")
	fresh := filepath.Join(c.Dir(), tmpPrefix+"live")
	os.WriteFile(stale, []byte("x"), 0o600)
	os.WriteFile(fresh, []byte("x"), 0o600)
	old := time.Now().Add(-2 * staleTemp)
	os.Chtimes(stale, old, old)
	if err := c.Trim(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatal("a temporary file left by a dead writer was kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Fatal("a temporary file being written was removed")
	}
	if _, err := Open(c.Dir(), 0, nil); err == nil {
		t.Fatal("a zero bound was accepted")
	}
}

func TestConcurrentWriters(t *testing.T) {
	dir := t.TempDir()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := Open(dir, 1<<20, nil)
			for i := 0; i < 20; i++ {
				b, sum := img(2000+i, byte(i))
				c.Put(sum, b)
				if got, ok := c.Get(sum); ok && !bytes.Equal(got, b) {
					panic(fmt.Sprintf("entry %d read back wrong", i))
				}
			}
		}()
	}
	wg.Wait()
	c, _ := Open(dir, 1<<20, nil)
	if n, _ := c.Stats(); n != 20 {
		t.Fatalf("%d entries after 8 writers put the same 20", n)
	}
}
