package precopy_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/gpuctl/gpuctl/migrate/precopy"
	"github.com/gpuctl/gpuctl/store"
)

// TestStream: chunks observed in batches from several goroutines, one of
// them twice, reach the target's store in one stream; a target that is
// gone makes Wait say so, and Observe never blocks the store meanwhile.
func TestStream(t *testing.T) {
	ctx := context.Background()
	var (
		ds   []store.Digest
		data [][]byte
	)
	for i := range 200 {
		b := bytes.Repeat(fmt.Appendf(nil, "process image chunk %d ", i), 400)
		ds, data = append(ds, store.Sum(b)), append(data, b)
	}
	observe := func(s *precopy.Stream) {
		done := make(chan struct{})
		for w := range 4 {
			go func() {
				defer func() { done <- struct{}{} }()
				for k := w * 50; k < (w+1)*50; k += 10 {
					// The store's slices are reused after the call.
					batch := make([][]byte, 10)
					for j := range batch {
						batch[j] = bytes.Clone(data[k+j])
					}
					s.Observe(ds[k:k+10], batch)
					for _, b := range batch {
						clear(b)
					}
				}
			}()
		}
		for range 4 {
			<-done
		}
		s.Observe(ds[:1], [][]byte{data[0]}) // a repeat
	}

	t.Run("delivered", func(t *testing.T) {
		stB := openStore(t)
		cl, _ := target(t, stB)
		s := precopy.StartStream(ctx, cl)
		observe(s)
		sent, skipped, err := s.Wait()
		if err != nil || skipped != 0 || sent == 0 {
			t.Fatalf("Wait = %d sent, %d skipped, %v; want all sent", sent, skipped, err)
		}
		if missing, err := stB.Missing(ctx, ds); err != nil || len(missing) > 0 {
			t.Fatalf("the target lacks %d of %d streamed chunks (%v)", len(missing), len(ds), err)
		}
		if again, _, _ := s.Wait(); again != sent {
			t.Fatalf("a second Wait says %d bytes, the first %d", again, sent)
		}
	})
	t.Run("target gone", func(t *testing.T) {
		stB := openStore(t)
		cl, srv := target(t, stB)
		srv.Close()
		s := precopy.StartStream(ctx, cl)
		observe(s)
		sent, _, err := s.Wait()
		if err == nil || sent != 0 {
			t.Fatalf("Wait to a closed target = %d sent, %v; want an error", sent, err)
		}
		t.Logf("error: %v", err)
	})
	t.Run("nothing observed", func(t *testing.T) {
		cl, srv := target(t, openStore(t))
		srv.Close() // no request is made
		if sent, skipped, err := precopy.StartStream(ctx, cl).Wait(); sent != 0 || skipped != 0 || err != nil {
			t.Fatalf("Wait with nothing observed = %d, %d, %v", sent, skipped, err)
		}
	})
}
