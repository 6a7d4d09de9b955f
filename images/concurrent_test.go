package images

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpuctl/gpuctl/images/imagegen"
)

// Commits of overlapping dumps, checkouts, deletes and gcs all at once: the
// store must stay consistent (checked at cleanup) and every image that
// exists must check out byte for byte.
func TestConcurrentCommitsCheckoutsAndGC(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	base := imagegen.Pages(21, 2<<20, imagegen.Realistic)
	srcs := make([]string, 4)
	for i := range srcs {
		p := append([]byte(nil), base...)
		imagegen.Change(uint64(i), p, 0.1, 8)
		srcs[i] = dumpDir(t, p)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	for w := range 4 {
		wg.Go(func() {
			for n := range 3 {
				id := fmt.Sprintf("img-%d-%d", w, n)
				src := srcs[(w+n)%len(srcs)]
				if _, _, err := Commit(ctx, st, src, Meta{ID: id, Session: "s-c"}); err != nil {
					errc <- err
					return
				}
				out := filepath.Join(t.TempDir(), id)
				if _, err := Checkout(ctx, st, id, out); err != nil {
					errc <- fmt.Errorf("checkout %s: %w", id, err)
					return
				}
				if err := treeDiff(src, out); err != nil {
					errc <- fmt.Errorf("%s: %w", id, err)
					return
				}
				if n != 2 {
					if err := Delete(ctx, st, id); err != nil {
						errc <- err
						return
					}
				}
			}
		})
	}
	wg.Go(func() {
		for range 6 {
			if _, err := GC(ctx, st); err != nil {
				errc <- err
				return
			}
		}
	})
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if _, err := GC(ctx, st); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(ctx, st, "", nil)
	if err != nil || !rep.OK() || rep.Images != 4 {
		t.Fatalf("verify: %+v %v", rep, err)
	}
}
