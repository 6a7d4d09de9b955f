package images

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/store"
)

// exported commits a small dump and returns the store, the manifest and
// its export.
func exported(t testing.TB) (*store.Store, *Manifest, []byte, string) {
	t.Helper()
	st := openStore(t)
	src := dumpDir(t, imagegen.Pages(3, 2<<20, imagegen.Realistic))
	m, _, err := Commit(context.Background(), st, src, Meta{ID: "img-export", Session: "s-1", AttachNonce: "abc"})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Export(context.Background(), st, m.ID, &buf, nil); err != nil {
		t.Fatal(err)
	}
	return st, m, buf.Bytes(), src
}

func TestExportImportRoundTrip(t *testing.T) {
	ctx := context.Background()
	_, m, file, src := exported(t)
	dst := openStore(t)
	var last int64
	got, stats, err := Import(ctx, dst, bytes.NewReader(file), ImportOptions{Progress: func(done, _ int64) { last = done }})
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != m.ID || got.AttachNonce != "abc" || stats.StoredBytes <= 0 || last != int64(len(file)) {
		t.Fatalf("import: id %s nonce %q, %+v, progress %d", got.ID, got.AttachNonce, stats, last)
	}
	out := filepath.Join(t.TempDir(), "out")
	if _, err := Checkout(ctx, dst, m.ID, out); err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, out)
	if _, _, err := Import(ctx, dst, bytes.NewReader(file), ImportOptions{}); !errs.IsAlreadyExists(err) || !strings.Contains(err.Error(), "images rm") {
		t.Fatalf("second import: %v", err)
	}
}

// stream builds an export by hand, so tests can write what Export never
// would.
type stream struct {
	version uint16
	kind    byte
	m       *Manifest
	rawM    []byte // used instead of m when set
	frames  []store.Frame
	cut     int // drop this many bytes from the end
	extra   []byte
	badSum  bool
	count   int // added to the trailer's chunk count
}

func (s stream) bytes(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	rw := newRecordWriter(&buf)
	defer rw.close()
	hdr := binary.BigEndian.AppendUint16([]byte(exportMagic), s.version)
	rw.write(append(hdr, s.kind))
	if s.rawM != nil {
		rw.record(recManifest, s.rawM)
	} else if s.m != nil {
		body, err := encodeManifest(s.m)
		if err != nil {
			t.Fatal(err)
		}
		rw.record(recManifest, body)
	}
	for _, f := range s.frames {
		rw.chunk(f)
	}
	rw.chunks += uint64(s.count)
	sum := rw.h.sum()
	if s.badSum {
		sum[0] ^= 1
	}
	rw.record(recEnd, binary.BigEndian.AppendUint64(nil, rw.chunks), sum)
	_ = rw.w.Flush()
	b := buf.Bytes()
	return append(b[:len(b)-s.cut], s.extra...)
}

func rawFrame(data []byte) store.Frame {
	return store.Frame{Digest: store.Sum(data), Raw: len(data), Payload: data}
}

func oneFile(id string, f File) *Manifest {
	return &Manifest{Version: ManifestVersion, Meta: Meta{ID: id, Session: "s-x"}, Files: []File{f}}
}

func dataFile(path string, data []byte) File {
	return File{Path: path, Type: TypeFile, Mode: 0o600, Size: int64(len(data)), Chunks: []Chunk{{Size: int64(len(data)), Digest: store.Sum(data)}}}
}

func TestImportRefuses(t *testing.T) {
	ctx := context.Background()
	_, _, good, _ := exported(t)
	data := []byte("hello chunk")
	ok := func() stream {
		return stream{version: ExportVersion, kind: kindImage, m: oneFile("img-t", dataFile("a", data)), frames: []store.Frame{rawFrame(data)}}
	}
	with := func(f func(*stream)) []byte {
		s := ok()
		f(&s)
		return s.bytes(t)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)-200] ^= 0xff

	tests := []struct {
		name  string
		input []byte
		want  string
	}{
		{"empty", nil, "not a gpuctl image export"},
		{"bad magic", []byte("GPUCTL-IMAGX\n\x00\x01I"), "bad magic"},
		{"newer version", with(func(s *stream) { s.version = 9 }), "export format version 9"},
		{"chunk stream", with(func(s *stream) { s.kind = kindChunks }), "stream kind"},
		{"truncated export", good[:len(good)/2], "truncated"},
		{"truncated by one byte", good[:len(good)-1], "truncated"},
		{"flipped byte", flipped, "chunk"},
		{"trailing data", with(func(s *stream) { s.extra = []byte{0} }), "after the trailer"},
		{"bad checksum", with(func(s *stream) { s.badSum = true }), "checksum"},
		{"bad count", with(func(s *stream) { s.count = 1 }), "trailer counts"},
		{"dot-dot path", with(func(s *stream) { s.m.Files[0].Path = "../evil" }), "leaves the image"},
		{"dot-dot inside", with(func(s *stream) { s.m.Files[0].Path = "a/../../evil" }), "clean form"},
		{"absolute path", with(func(s *stream) { s.m.Files[0].Path = "/etc/cron.d/x" }), "absolute path"},
		{"link out", with(func(s *stream) {
			s.m.Files = append(s.m.Files, File{Path: "l", Type: TypeSymlink, Mode: 0o777, Link: "../../etc/shadow"})
		}), "points out of the image"},
		{"absolute link", with(func(s *stream) {
			s.m.Files = append(s.m.Files, File{Path: "l", Type: TypeSymlink, Mode: 0o777, Link: "/etc/shadow"})
		}), "absolute path"},
		{"file under a link", with(func(s *stream) {
			s.m.Files = append([]File{{Path: "d", Type: TypeSymlink, Mode: 0o777, Link: "."}}, File{Path: "d/x", Type: TypeFile})
		}), "parent directory"},
		{"sizes disagree", with(func(s *stream) { s.m.Files[0].Size = 1 << 40 }), "add up"},
		{"huge chunk", with(func(s *stream) { s.m.Files[0].Chunks[0].Size = 1 << 30; s.m.Files[0].Size = 1 << 30 }), "outside 1.."},
		{"mode bits", with(func(s *stream) { s.m.Files[0].Mode = 0o4755 | 1<<31 }), "mode"},
		{"old manifest version", with(func(s *stream) { s.m.Version = 7 }), "manifest version 7"},
		{"bad id", with(func(s *stream) { s.m.ID = "a/b" }), "not a valid image id"},
		{"bad owner", with(func(s *stream) { s.m.Tenant = "Not A Tenant" }), `tenant name "Not A Tenant"`},
		{"unknown owner", with(func(s *stream) { s.m.Tenant = "carol" }), `tenant "carol", which this host does not know`},
		{"manifest not zstd", with(func(s *stream) { s.rawM = []byte("{}") }), "manifest"},
		{"no manifest", with(func(s *stream) { s.m = nil }), "does not start with a manifest"},
		{"chunk not in image", with(func(s *stream) { s.frames = append(s.frames, rawFrame([]byte("stranger"))) }), "not part of the image"},
		{"chunk twice", with(func(s *stream) { s.frames = append(s.frames, rawFrame(data)) }), "comes twice"},
		{"chunk lies about size", with(func(s *stream) { s.frames[0].Raw = 5 }), "claims 5 bytes"},
		{"chunk content wrong", with(func(s *stream) { s.frames[0].Payload = []byte("hello chunK") }), "does not match its digest"},
		{"chunk bomb", with(func(s *stream) {
			enc, _ := zstd.NewWriter(nil)
			big := make([]byte, store.MaxChunkSize)
			s.frames[0] = store.Frame{Digest: store.Sum(data), Raw: len(data), Zstd: true, Payload: enc.EncodeAll(big, nil)}
		}), "chunk"},
		{"chunk missing", with(func(s *stream) { s.frames = nil }), "neither in the stream nor in this store"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := openStore(t)
			_, _, err := Import(ctx, st, bytes.NewReader(tt.input), ImportOptions{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if errs.KindOf(err) != errs.InvalidArgument && errs.KindOf(err) != errs.FailedPrecondition {
				t.Fatalf("kind %s for %v", errs.KindOf(err), err)
			}
			if l, _ := List(ctx, st); len(l) != 0 {
				t.Fatalf("a refused import left an image: %v", l)
			}
			if _, err := st.GC(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A manifest that inflates past the limit is refused without inflating
// all of it (the real limit is 1 GiB; this uses 1 MiB).
func TestManifestBomb(t *testing.T) {
	enc, _ := zstd.NewWriter(nil)
	bomb := enc.EncodeAll(bytes.Repeat([]byte(" "), 8<<20), nil)
	if _, err := decodeManifestLimit(bomb, 1<<20); !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "inflates past 1048576 bytes") {
		t.Fatalf("got %v", err)
	}
	if len(bomb) > 64<<10 {
		t.Fatalf("bomb is %d bytes, not much of a bomb", len(bomb))
	}
}

func TestImportRecordHeaders(t *testing.T) {
	tests := []struct {
		name  string
		claim uint32
		want  string
	}{
		{"over the limit", 1 << 31, "larger than"},
		{"large claim, little data", 700 << 20, "truncated"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := binary.BigEndian.AppendUint16([]byte(exportMagic), ExportVersion)
			b = append(b, kindImage, recManifest)
			b = binary.BigEndian.AppendUint32(b, tt.claim)
			b = append(b, make([]byte, 3<<20)...)
			_, _, err := Import(context.Background(), openStore(t), bytes.NewReader(b), ImportOptions{})
			if !errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v", err)
			}
		})
	}
}

// FuzzImport feeds arbitrary streams to Import. It must never panic or
// hang, and whatever it accepts must check out and verify.
func FuzzImport(f *testing.F) {
	// Small seeds: the fuzzer's cost grows with the input's size.
	src := f.TempDir()
	page := bytes.Repeat([]byte{7}, imagegen.PageSize)
	_ = os.WriteFile(filepath.Join(src, "pages-1.img"), append(append(bytes.Clone(page), make([]byte, imagegen.PageSize)...), page[:100]...), 0o600)
	_ = os.Mkdir(filepath.Join(src, "d"), 0o700)
	_ = os.WriteFile(filepath.Join(src, "d", "core.img"), []byte("core"), 0o600)
	_ = os.Symlink("d/core.img", filepath.Join(src, "link"))
	seedStore := openStore(f)
	m, _, err := Commit(context.Background(), seedStore, src, Meta{ID: "img-seed", Session: "s-f"})
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := Export(context.Background(), seedStore, m.ID, &buf, nil); err != nil {
		f.Fatal(err)
	}
	good := buf.Bytes()
	f.Add(good)
	f.Add(good[:len(good)/3])
	f.Add([]byte(exportMagic))
	data := []byte("x")
	f.Add(stream{version: ExportVersion, kind: kindImage, m: oneFile("img-f", dataFile("a", data)), frames: []store.Frame{rawFrame(data)}}.bytes(f))
	st := openStore(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		ctx := context.Background()
		m, _, err := Import(ctx, st, bytes.NewReader(in), ImportOptions{})
		if err != nil {
			if errs.KindOf(err) == errs.Internal || errs.KindOf(err) == errs.Unknown {
				t.Fatalf("import failed with kind %s: %v", errs.KindOf(err), err)
			}
			return
		}
		defer func() {
			if err := Delete(ctx, st, m.ID); err != nil {
				t.Fatal(err)
			}
		}()
		if rep, err := Verify(ctx, st, m.ID, nil); err != nil || !rep.OK() {
			t.Fatalf("accepted import does not verify: %+v %v", rep, err)
		}
		out := filepath.Join(t.TempDir(), "out")
		if _, err := Checkout(ctx, st, m.ID, out); err != nil {
			t.Fatalf("accepted import does not check out: %v", err)
		}
		if _, err := os.Stat(out); err != nil {
			t.Fatal(err)
		}
	})
}
