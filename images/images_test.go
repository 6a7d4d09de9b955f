package images

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/store"
)

// openStore opens a store in a fresh dir; the store's consistency check
// runs when the test ends.
func openStore(t testing.TB) *store.Store {
	t.Helper()
	return openStoreWorkers(t, 0)
}

// openStoreWorkers is openStore with that many workers (0: one a core).
func openStoreWorkers(t testing.TB, workers int) *store.Store {
	t.Helper()
	st, err := store.Open(context.Background(), t.TempDir(), store.Options{Workers: workers, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Check(context.Background()); err != nil {
			t.Errorf("consistency check at end of test: %v", err)
		}
		_ = st.Close()
	})
	return st
}

// dumpDir writes a CRIU-shaped image directory: a large pages file, small
// metadata files, an empty file, a subdirectory and a symlink.
func dumpDir(t testing.TB, pages []byte) string {
	t.Helper()
	dir := t.TempDir()
	files := map[string][]byte{
		"pages-1.img":   pages,
		"pagemap-1.img": bytes.Repeat([]byte("pagemap entry "), 300),
		"core-1.img":    []byte("core registers and such"),
		"mm-1.img":      imagegen.Pages(9, 3*imagegen.PageSize, imagegen.Realistic),
		"empty.img":     nil,
		"gpu/state.bin": bytes.Repeat([]byte{0, 1, 2, 3}, 5000),
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("gpu/state.bin", filepath.Join(dir, "state-link")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sameTree fails unless a and b hold the same files, links, modes and bytes.
func sameTree(t testing.TB, a, b string) {
	t.Helper()
	if err := treeDiff(a, b); err != nil {
		t.Fatal(err)
	}
}

// treeDiff says how a and b differ, for use off the test goroutine.
func treeDiff(a, b string) error {
	list := func(root string) (map[string]string, error) {
		out := map[string]string{}
		err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if rel == "." {
				return nil
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			desc := fi.Mode().String()
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				l, _ := os.Readlink(p)
				desc += " -> " + l
			case fi.Mode().IsRegular():
				c, _ := os.ReadFile(p)
				desc += " " + store.Sum(c).Short()
			}
			out[rel] = desc
			return nil
		})
		return out, err
	}
	la, err := list(a)
	if err != nil {
		return err
	}
	lb, err := list(b)
	if err != nil {
		return err
	}
	for k, v := range la {
		if lb[k] != v {
			return fmt.Errorf("%s: %q in source, %q in checkout", k, v, lb[k])
		}
	}
	if len(la) != len(lb) {
		return fmt.Errorf("%d entries in source, %d in checkout", len(la), len(lb))
	}
	return nil
}

func TestCommitCheckoutRoundTrip(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	pages := imagegen.Pages(1, 16<<20, imagegen.Realistic)
	src := dumpDir(t, pages)
	meta := Meta{Session: "s-0123456789ab", Host: "hostA", Backend: "cuda", Driver: "580.159.04",
		GPUs: []backend.GPU{
			{Index: 1, Name: "NVIDIA H200", UUID: "GPU-1", MemoryBytes: 150754820096, PCIBusID: "00000000:19:00.0"},
			{Index: 0, Name: "NVIDIA H200", UUID: "GPU-0", MemoryBytes: 150754820096, PCIBusID: "00000000:18:00.0"},
		},
		CRIU: "4.1.1", Kernel: "6.18", AttachNonce: "n0nce", Labels: map[string]string{"step": "1"}}
	m, stats, err := Commit(ctx, st, src, meta)
	if err != nil {
		t.Fatal(err)
	}
	if stats.LogicalBytes != m.Bytes() || stats.StoredBytes <= 0 || stats.StoredBytes >= stats.LogicalBytes || stats.ZeroBytes == 0 {
		t.Fatalf("stats %+v", stats)
	}
	// Every fact the pipeline gave comes back, GPU memory and PCI bus
	// included.
	want := meta
	want.ID = m.ID
	got, err := Get(ctx, st, m.ID)
	if err != nil || !reflect.DeepEqual(got.Meta, want) {
		t.Fatalf("get: %+v, %v\nwant %+v", got, err, want)
	}
	dst := filepath.Join(t.TempDir(), "out")
	if out, err := Checkout(ctx, st, m.ID, dst); err != nil || !reflect.DeepEqual(out.Meta, want) {
		t.Fatalf("checkout: %+v, %v", out, err)
	}
	sameTree(t, src, dst)
	if _, err := Checkout(ctx, st, m.ID, dst); !errs.IsFailedPrecondition(err) {
		t.Fatalf("checkout into a non-empty dir: %v", err)
	}

	// A second checkpoint with 5% of its pages changed.
	imagegen.Change(2, pages, 0.05, 16)
	src2 := dumpDir(t, pages)
	m2, stats2, err := Commit(ctx, st, src2, Meta{Session: meta.Session, Parent: m.ID})
	if err != nil {
		t.Fatal(err)
	}
	if share := float64(stats2.StoredBytes) / float64(stats.StoredBytes); share > 0.15 {
		t.Fatalf("second commit stored %d bytes, %.0f%% of the first", stats2.StoredBytes, 100*share)
	}
	list, err := List(ctx, st)
	if err != nil || len(list) != 2 || list[1].ID != m2.ID || list[1].Parent != m.ID || list[0].Bytes != stats.LogicalBytes {
		t.Fatalf("list: %+v, %v", list, err)
	}
	rep, err := Verify(ctx, st, "", nil)
	if err != nil || !rep.OK() || rep.Images != 2 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}

func TestCommitRefuses(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	tests := []struct {
		name  string
		setup func(dir string) error
		meta  Meta
		want  string
	}{
		{"link out of the image", func(d string) error { return os.Symlink("../../etc/passwd", filepath.Join(d, "x")) }, Meta{}, "points out of the image"},
		{"absolute link", func(d string) error { return os.Symlink("/etc/passwd", filepath.Join(d, "x")) }, Meta{}, "absolute"},
		{"fifo", func(d string) error { return mkfifo(filepath.Join(d, "p")) }, Meta{}, "only files, directories and symlinks"},
		{"bad id", func(string) error { return nil }, Meta{ID: "../x"}, "not a valid image id"},
		{"missing dir", func(d string) error { return os.RemoveAll(d) }, Meta{}, "read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := tt.setup(dir); err != nil {
				t.Fatal(err)
			}
			_, _, err := Commit(ctx, st, dir, tt.meta)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want %q", err, tt.want)
			}
		})
	}
	if l, _ := List(ctx, st); len(l) != 0 {
		t.Fatalf("refused commits left images: %v", l)
	}
}

func TestShrunkFileFailsTheCommitNotTheProcess(t *testing.T) {
	p := filepath.Join(t.TempDir(), "pages-1.img")
	if err := os.WriteFile(p, imagegen.Pages(4, 1<<20, imagegen.Mix{Random: 1, RunPages: 4}), 0o600); err != nil {
		t.Fatal(err)
	}
	data, err := mapFile(p, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer unixMunmap(data)
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	err = faultSafe(errs.Image("img-x"), func() error {
		_ = store.Sum(data[512<<10 : 528<<10]) // past the new end
		return nil
	})
	if !errs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "shrank") {
		t.Fatalf("got %v", err)
	}
}
