package images

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/store"
)

// damage flips a byte in the pack holding d, found by its entry header.
func damage(t *testing.T, st *store.Store, d store.Digest) {
	t.Helper()
	packs, _ := filepath.Glob(filepath.Join(st.Dir(), "blobs", "packs", "*.pack"))
	for _, p := range packs {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i := strings.Index(string(b), string(d[:])); i >= 0 {
			b[i+32+9+10] ^= 0xff // inside the payload
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			return
		}
	}
	t.Fatalf("chunk %s not found in any pack", d.Short())
}

func TestDamagedChunk(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	srcA := dumpDir(t, imagegen.Pages(1, 1<<20, imagegen.Realistic))
	a, _, err := Commit(ctx, st, srcA, Meta{ID: "img-a", Session: "s-1"})
	if err != nil {
		t.Fatal(err)
	}
	pagesB := imagegen.Pages(2, 1<<20, imagegen.Mix{Random: 1, RunPages: 8})
	b, _, err := Commit(ctx, st, dumpDir(t, pagesB), Meta{ID: "img-b", Session: "s-2"})
	if err != nil {
		t.Fatal(err)
	}
	// A chunk only img-b uses.
	refsA, _ := a.Refs()
	inA := map[store.Digest]bool{}
	for _, d := range refsA {
		inA[d] = true
	}
	var victim store.Digest
	for _, f := range b.Files {
		if f.Path == "pages-1.img" {
			victim = f.Chunks[3].Digest
		}
	}
	if inA[victim] {
		t.Fatal("victim chunk is shared")
	}
	damage(t, st, victim)

	tests := []struct {
		name    string
		id      string
		wantBad bool
	}{{"all", "", true}, {"damaged image", "img-b", true}, {"other image", "img-a", false}}
	for _, tt := range tests {
		t.Run("verify "+tt.name, func(t *testing.T) {
			rep, err := Verify(ctx, st, tt.id, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() == tt.wantBad {
				t.Fatalf("report %+v", rep)
			}
			if tt.wantBad {
				msg := rep.Err().Error()
				if !errs.Is(rep.Err(), errs.DataLoss) || !strings.Contains(msg, "img-b") || !strings.Contains(msg, victim.String()) {
					t.Fatalf("error does not name image and chunk: %v", msg)
				}
			}
		})
	}
	dst := filepath.Join(t.TempDir(), "b")
	_, err = Checkout(ctx, st, "img-b", dst)
	if !errs.Is(err, errs.DataLoss) || !strings.Contains(err.Error(), victim.String()) || !strings.Contains(err.Error(), "img-b") {
		t.Fatalf("checkout of damaged image: %v", err)
	}
	if ents, _ := os.ReadDir(dst); len(ents) != 0 {
		t.Fatalf("failed checkout left %d entries", len(ents))
	}
	out := filepath.Join(t.TempDir(), "a")
	if _, err := Checkout(ctx, st, "img-a", out); err != nil {
		t.Fatalf("other image: %v", err)
	}
	sameTree(t, srcA, out)
	// The consistency check at cleanup must still pass: the index is fine,
	// only content is damaged.
}
