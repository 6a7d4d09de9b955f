package checkpoint

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint/criu"
	"github.com/gpuctl/gpuctl/checkpoint/proctest"
)

// BenchmarkCRIU measures what CRIU alone costs for worker-shaped processes
// holding 16 MiB, 256 MiB and 1 GiB of memory: a dump that leaves the
// process running, and a restore beside it. It is the floor under the
// checkpoint and restore pipelines' times (make bench prints both).
func BenchmarkCRIU(b *testing.B) {
	h := proctest.New(b)
	for _, mib := range []int{16, 256, 1024} {
		b.Run(fmt.Sprintf("%dMiB", mib), func(b *testing.B) {
			child := h.StartSized(mib)
			pid := child.Process.Pid
			ctx := context.Background()
			var dump, rest time.Duration
			var size int64
			for i := 0; i < b.N; i++ {
				dir := b.TempDir()
				t0 := time.Now()
				if err := criu.Dump(ctx, pid, dir, criu.Options{LeaveRunning: true}); err != nil {
					b.Fatal(err)
				}
				dump += time.Since(t0)
				size = dirBytes(dir)
				t0 = time.Now()
				rp, err := criu.Restore(ctx, dir, criu.Options{})
				if err != nil {
					b.Fatal(err)
				}
				rest += time.Since(t0)
				h.Next(rp) // it runs
				_ = syscall.Kill(rp, syscall.SIGKILL)
				var ws syscall.WaitStatus
				_, _ = syscall.Wait4(rp, &ws, 0, nil)
				os.RemoveAll(dir)
			}
			b.ReportMetric(float64(dump.Milliseconds())/float64(b.N), "dump-ms")
			b.ReportMetric(float64(rest.Milliseconds())/float64(b.N), "restore-ms")
			b.ReportMetric(float64(size)/(1<<20), "image-MiB")
		})
	}
}

func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}
