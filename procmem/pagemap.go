package procmem

import (
	"encoding/binary"
	"fmt"
	"os"
)

// Bits of a /proc/PID/pagemap entry (the kernel's
// Documentation/admin-guide/mm/pagemap.rst).
const (
	PagePresent = 1 << 63
	PageSwapped = 1 << 62
	PageFile    = 1 << 61 // a page of a file or of shared memory, not anonymous
)

// PageMap reads the calling process's page map: one 64-bit entry per
// page of its address space.
type PageMap struct {
	f   *os.File
	buf []byte
}

// OpenPageMap opens the calling process's page map.
func OpenPageMap() (*PageMap, error) {
	f, err := os.Open("/proc/self/pagemap")
	if err != nil {
		return nil, fmt.Errorf("read the process's page map: %w", err)
	}
	return &PageMap{f: f}, nil
}

// Close closes the page map.
func (p *PageMap) Close() error { return p.f.Close() }

// Read fills ents with the entries of the len(ents) pages from page
// number page (an address divided by the page size) on. A PageMap is
// not safe for concurrent Reads; Clone gives each goroutine its own.
func (p *PageMap) Read(page uint64, ents []uint64) error {
	if cap(p.buf) < 8*len(ents) {
		p.buf = make([]byte, 8*len(ents))
	}
	b := p.buf[:8*len(ents)]
	if _, err := p.f.ReadAt(b, int64(page)*8); err != nil {
		return fmt.Errorf("read the page map at page %#x: %w", page, err)
	}
	for i := range ents {
		ents[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return nil
}

// Clone is a PageMap on the same file with a buffer of its own.
func (p *PageMap) Clone() *PageMap { return &PageMap{f: p.f} }
