package restore

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/images"
)

// TestPrepareStream: the dump's files and the header cross a prepared
// restore's stream as they were; a stream without the header, or with a
// file that would land outside the restore's directory or is not a plain
// file, is refused.
func TestPrepareStream(t *testing.T) {
	src := t.TempDir()
	files := map[string]string{"core-1.img": "core", "pages-1.img": strings.Repeat("p", 1<<20), "sub/x.img": "x"}
	if err := os.Mkdir(filepath.Join(src, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	h := PrepareHeader{Meta: images.Meta{Session: "s-0123456789ab", AttachNonce: "n"}, Gen: 7}
	if err := WritePrepare(context.Background(), &buf, h, src); err != nil {
		t.Fatal(err)
	}
	got, write, err := readPrepare(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.Meta.Session != h.Meta.Session || got.Meta.AttachNonce != "n" || got.Gen != 7 {
		t.Errorf("header %+v, want %+v", got, h)
	}
	dst := t.TempDir()
	if err := write(dst); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil || string(b) != body {
			t.Errorf("%s: %d bytes (%v), want %d", name, len(b), err, len(body))
		}
	}

	bad := func(entries ...tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, e := range entries {
			body := "{}"
			if e.Typeflag == tar.TypeReg {
				e.Size = int64(len(body))
			}
			if err := tw.WriteHeader(&e); err != nil {
				t.Fatal(err)
			}
			if e.Typeflag == tar.TypeReg {
				tw.Write([]byte(body))
			}
		}
		tw.Close()
		return b.Bytes()
	}
	head := tar.Header{Name: headerName, Typeflag: tar.TypeReg, Mode: 0o600}
	for _, c := range []struct {
		name   string
		stream []byte
		header bool // refused at the header
	}{
		{"no header", bad(tar.Header{Name: "core-1.img", Typeflag: tar.TypeReg, Mode: 0o600}), true},
		{"empty", nil, true},
		{"escapes", bad(head, tar.Header{Name: "../evil", Typeflag: tar.TypeReg, Mode: 0o600}), false},
		{"absolute", bad(head, tar.Header{Name: "/tmp/evil", Typeflag: tar.TypeReg, Mode: 0o600}), false},
		{"symlink", bad(head, tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}), false},
	} {
		_, write, err := readPrepare(bytes.NewReader(c.stream))
		if c.header {
			if err == nil {
				t.Errorf("%s: the header was accepted", c.name)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: header refused: %v", c.name, err)
			continue
		}
		dst := t.TempDir()
		if err := write(dst); err == nil {
			t.Errorf("%s: the stream was written", c.name)
		}
	}
}
