package dispatch

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"strings"
	"sync"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/wire"
)

// memCache is a ModuleCache in memory.
type memCache struct {
	mu   sync.Mutex
	m    map[[32]byte][]byte
	puts int
}

func (c *memCache) Get(sum [32]byte) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, ok := c.m[sum]
	return b, ok
}

func (c *memCache) Put(sum [32]byte, b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[sum] = append([]byte(nil), b...)
	c.puts++
}

const cachePTX = `
.version 8.0
.target sm_90
.address_size 64

.visible .entry nop()
{
	ret;
}
`

func TestModuleUploadOnce(t *testing.T) {
	mc := &memCache{m: map[[32]byte][]byte{}}
	img := []byte(cachePTX + strings.Repeat("// padding\n", 100))
	sum := sha256.Sum256(img)
	loadCached := func(tc *tclient, ctx uint64, hash []byte) (cu.Result, uint64, bool) {
		r, d, _ := tc.call(wire.OpModuleLoadCached, enc(func(e *wire.Enc) { e.U64(ctx); e.Bytes(hash); e.U64(uint64(len(img))) }), nil)
		if r != cu.Success {
			return r, 0, false
		}
		return r, d.U64(), d.Bool()
	}

	// First session: the host lacks the module, so the client uploads it.
	s1 := newSession(t)
	s1.SetModuleCache(mc)
	tc1, _, _ := serve(t, s1, context.Background())
	ctx1 := tc1.mustCtx()
	if r, _, found := loadCached(tc1, ctx1, sum[:]); r != cu.Success || found {
		t.Fatalf("first load by hash: %v found=%v, want a miss", r, found)
	}
	r, d, _ := tc1.call(wire.OpModuleUpload, enc(func(e *wire.Enc) { e.U64(ctx1); e.Bytes(sum[:]) }), img)
	if r != cu.Success || d.U64() == 0 {
		t.Fatalf("upload: %v", r)
	}
	s1.FlushModuleCache()
	if mc.puts != 1 {
		t.Fatalf("%d images kept after one upload", mc.puts)
	}

	// Second session, same host: found by hash, and it works.
	s2 := newSession(t)
	s2.SetModuleCache(mc)
	tc2, _, _ := serve(t, s2, context.Background())
	ctx2 := tc2.mustCtx()
	r, m, found := loadCached(tc2, ctx2, sum[:])
	if r != cu.Success || !found || m == 0 {
		t.Fatalf("second load by hash: %v found=%v m=%#x", r, found, m)
	}
	r, _, _ = tc2.call(wire.OpModuleGetFunction, enc(func(e *wire.Enc) { e.U64(ctx2); e.U64(m); e.Str("nop") }), nil)
	if r != cu.Success {
		t.Fatalf("the cached module has no kernel: %v", r)
	}

	// An upload whose bytes do not match its hash is refused, is not
	// kept, and the session goes on.
	bad := sha256.Sum256([]byte("something else"))
	r, _, _ = tc2.call(wire.OpModuleUpload, enc(func(e *wire.Enc) { e.U64(ctx2); e.Bytes(bad[:]) }), img)
	if r != cu.ErrorInvalidImage {
		t.Fatalf("mismatched upload: %v, want INVALID_IMAGE", r)
	}
	s2.FlushModuleCache()
	if _, ok := mc.Get(bad); ok || mc.puts != 1 {
		t.Fatal("a mismatched upload was kept")
	}
	// Garbage that matches its hash is refused by the device and not kept.
	junk := []byte(strings.Repeat("junk", 100))
	js := sha256.Sum256(junk)
	r, _, _ = tc2.call(wire.OpModuleUpload, enc(func(e *wire.Enc) { e.U64(ctx2); e.Bytes(js[:]) }), junk)
	s2.FlushModuleCache()
	if r == cu.Success || mc.puts != 1 {
		t.Fatalf("garbage upload: %v, %d kept", r, mc.puts)
	}
	for _, tc := range []struct {
		name string
		hash []byte
		want cu.Result
	}{
		{"short hash", sum[:16], cu.ErrorInvalidValue},
		{"no hash", nil, cu.ErrorInvalidValue},
	} {
		if r, _, _ := loadCached(tc2, ctx2, tc.hash); r != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, r, tc.want)
		}
	}
	if r, _, _ := tc2.call(wire.OpCtxSynchronize, enc(func(e *wire.Enc) { e.U64(ctx2) }), nil); r != cu.Success {
		t.Fatalf("the session is unwell after refused uploads: %v", r)
	}

	// Without a cache every load by hash misses.
	s3 := newSession(t)
	tc3, _, _ := serve(t, s3, context.Background())
	if r, _, found := loadCached(tc3, tc3.mustCtx(), sum[:]); r != cu.Success || found {
		t.Fatalf("no cache: %v found=%v", r, found)
	}
}

func TestDeviceAttributesAtOnce(t *testing.T) {
	s := newSession(t)
	tc, _, _ := serve(t, s, context.Background())
	r, d, _ := tc.call(wire.OpDeviceAttributes, enc(func(e *wire.Enc) { e.I32(0); e.U32(140) }), nil)
	if r != cu.Success {
		t.Fatal(r)
	}
	b := d.Bytes()
	if len(b) != 8*140 {
		t.Fatalf("%d bytes for 140 attributes", len(b))
	}
	at := func(a int) (cu.Result, int32) {
		return cu.Result(binary.LittleEndian.Uint32(b[8*a:])), int32(binary.LittleEndian.Uint32(b[8*a+4:]))
	}
	for _, a := range []int{1, 10, 75, 102} {
		res, v := at(a)
		r1, d1, _ := tc.call(wire.OpDeviceAttribute, enc(func(e *wire.Enc) { e.I32(int32(a)); e.I32(0) }), nil)
		if res != r1 || v != d1.I32() {
			t.Errorf("attribute %d: bulk %v/%d, single %v", a, res, v, r1)
		}
	}
	if res, _ := at(0); res != cu.ErrorInvalidValue {
		t.Errorf("attribute 0: %v, want INVALID_VALUE", res)
	}
	if r, _, _ := tc.call(wire.OpDeviceAttributes, enc(func(e *wire.Enc) { e.I32(3); e.U32(10) }), nil); r != cu.ErrorInvalidDevice {
		t.Errorf("device 3: %v", r)
	}
	if r, _, _ := tc.call(wire.OpDeviceAttributes, enc(func(e *wire.Enc) { e.I32(0); e.U32(1 << 20) }), nil); r != cu.ErrorInvalidValue {
		t.Errorf("a million attributes: %v", r)
	}
}
