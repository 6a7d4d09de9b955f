// Command benchstore measures the image store on realistic checkpoint data
// against the zstd command line over the same bytes in the same run, and
// prints one table of ratios. `make bench-store` runs it.
//
// The data: SIZE bytes of memory-like pages (zero, incompressible and
// repetitive, in runs like buffers and mappings) as a CRIU pages file plus
// small metadata files. Puts go through images.Commit with fsync on, gets
// through images.Checkout, and a transfer through images.Export into
// images.Import on a second store; zstd runs with -T0 -1, as the fastest
// setting a person would pick by hand.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/images/imagegen"
	"github.com/gpuctl/gpuctl/store"
)

func main() {
	size := flag.Int("size", 1<<30, "bytes of page data")
	dir := flag.String("dir", "", "scratch directory (default: a new one under $TMPDIR), removed afterwards")
	prof := flag.String("cpuprofile", "", "write a CPU profile of the store's work here")
	flag.Parse()
	if *prof != "" {
		f, err := os.Create(*prof)
		if err == nil {
			_ = pprof.StartCPUProfile(f)
			defer pprof.StopCPUProfile()
		}
	}
	if err := run(*size, *dir); err != nil {
		fmt.Fprintln(os.Stderr, "bench-store:", err)
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

func run(size int, scratch string) error {
	ctx := context.Background()
	if _, err := exec.LookPath("zstd"); err != nil {
		return fmt.Errorf("the zstd command is needed for the baseline: apt-get install zstd")
	}
	if scratch == "" {
		d, err := os.MkdirTemp("", "bench-store-")
		if err != nil {
			return err
		}
		scratch = d
	}
	defer os.RemoveAll(scratch)
	size &^= imagegen.PageSize - 1
	fmt.Printf("generating %d MiB of page data (%.0f%% zero, %.0f%% incompressible, %.0f%% repetitive; runs of ~%d pages) on %d CPUs, GOMAXPROCS %d\n",
		size>>20, 100*imagegen.Realistic.Zero, 100*imagegen.Realistic.Random, 100*imagegen.Realistic.Repetitive, imagegen.Realistic.RunPages, runtime.NumCPU(), runtime.GOMAXPROCS(0))
	pages := imagegen.Pages(1, size, imagegen.Realistic)
	dump := func(name string, p []byte) (string, error) {
		d := filepath.Join(scratch, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return "", err
		}
		files := map[string][]byte{
			"pages-1.img":   p,
			"pagemap-1.img": bytes.Repeat([]byte("pagemap entry\x00"), 2000),
			"core-1.img":    bytes.Repeat([]byte("regs"), 1000),
			"mm-1.img":      bytes.Repeat([]byte("vma"), 3000),
		}
		for n, b := range files {
			if err := os.WriteFile(filepath.Join(d, n), b, 0o600); err != nil {
				return "", err
			}
		}
		return d, nil
	}
	src1, err := dump("dump1", pages)
	if err != nil {
		return err
	}
	logical := dirBytes(src1)

	// Every timed phase starts with nothing dirty in the page cache, so
	// that one phase's write-back does not land on the next.
	settle()
	// Baseline: zstd over the same files, into a file and back out.
	zfile := filepath.Join(scratch, "baseline.zst")
	zPut, err := timeCmd("sh", "-c", fmt.Sprintf("cat %s/* | zstd -q -T0 -1 -c > %s && sync %s", src1, zfile, zfile))
	if err != nil {
		return err
	}
	zBytes := fileBytes(zfile)
	settle()
	zGet, err := timeCmd("sh", "-c", fmt.Sprintf("zstd -q -d -T0 -c %s > %s/baseline.out", zfile, scratch))
	if err != nil {
		return err
	}
	_ = os.Remove(filepath.Join(scratch, "baseline.out"))
	settle()

	st, err := store.Open(ctx, filepath.Join(scratch, "state"), store.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer st.Close()
	var m1 *images.Manifest
	var s1 images.Stats
	put, err := timeSelf(func() (err error) {
		m1, s1, err = images.Commit(ctx, st, src1, images.Meta{Session: "s-bench", Host: "bench"})
		return err
	})
	if err != nil {
		return err
	}
	settle()
	get, err := timeSelf(func() error {
		_, err := images.Checkout(ctx, st, m1.ID, filepath.Join(scratch, "out1"))
		return err
	})
	if err != nil {
		return err
	}
	_ = os.RemoveAll(filepath.Join(scratch, "out1"))

	// Push without the network: the first image exported into a pipe and
	// imported, every chunk checked, into a second store (what a
	// migration's push does on the sending and the receiving gpud).
	st2, err := store.Open(ctx, filepath.Join(scratch, "state2"), store.Options{Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		return err
	}
	defer st2.Close()
	settle()
	xfer, err := timeSelf(func() error {
		pr, pw := io.Pipe()
		go func() {
			_, err := images.Export(ctx, st, m1.ID, pw, nil)
			pw.CloseWithError(err)
		}()
		_, _, err := images.Import(ctx, st2, pr, images.ImportOptions{})
		_ = pr.CloseWithError(io.ErrClosedPipe)
		return err
	})
	if err != nil {
		return err
	}

	type second struct {
		name  string
		stats images.Stats
		cost  cost
	}
	var seconds []second
	for i, sc := range []struct {
		name string
		runs int
	}{{"5% of pages changed, in runs (mean 16 pages)", 16}, {"5% of pages changed, scattered single pages", 1}} {
		p := bytes.Clone(pages)
		imagegen.Change(uint64(10+i), p, 0.05, sc.runs)
		src, err := dump(fmt.Sprintf("dump%d", i+2), p)
		if err != nil {
			return err
		}
		settle()
		var s images.Stats
		c, err := timeSelf(func() (err error) {
			_, s, err = images.Commit(ctx, st, src, images.Meta{Session: "s-bench", Parent: m1.ID})
			return err
		})
		if err != nil {
			return err
		}
		seconds = append(seconds, second{sc.name, s, c})
		_ = os.RemoveAll(src)
	}
	if rep, err := images.Verify(ctx, st, "", nil); err != nil || !rep.OK() {
		return fmt.Errorf("verify after the bench: %v %v", err, rep.Err())
	}

	mb := func(d time.Duration) float64 { return float64(logical) / d.Seconds() / 1e6 }
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	row := func(what string, ours, theirs float64, unit, target string) {
		fmt.Fprintf(tw, "%s\t%.0f %s\t%.0f %s\t%.2fx\t%s\t\n", what, ours, unit, theirs, unit, ours/theirs, target)
	}
	fmt.Fprintf(tw, "measure\tstore\tzstd -T0 -1\tstore/zstd\ttarget\t\n")
	row("put, wall clock (fsync'd)", mb(put.wall), mb(zPut.wall), "MB/s", "")
	row("put, per CPU second", mb(put.cpu), mb(zPut.cpu), "MB/s", "")
	row("get, wall clock (verified)", mb(get.wall), mb(zGet.wall), "MB/s", "")
	row("get, per CPU second", mb(get.cpu), mb(zGet.cpu), "MB/s", "")
	fmt.Fprintf(tw, "export+import, wall clock (fsync'd)\t%.0f MB/s\t-\t\t\t\n", mb(xfer.wall))
	fmt.Fprintf(tw, "export+import, per CPU second\t%.0f MB/s\t-\t\t\t\n", mb(xfer.cpu))
	fmt.Fprintf(tw, "stored / logical bytes\t%.3f\t%.3f\t%.2fx\t\t\n", float64(s1.StoredBytes)/float64(logical), float64(zBytes)/float64(logical), float64(s1.StoredBytes)/float64(zBytes))
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println()
	tw = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "second put\tnew bytes / first put's\tnew bytes / logical\tspeedup, wall\tspeedup, CPU\t\n")
	for _, s := range seconds {
		fmt.Fprintf(tw, "%s\t%.1f%%\t%.1f%%\t%.1fx\t%.1fx\t\n", s.name,
			100*float64(s.stats.StoredBytes)/float64(s1.StoredBytes), 100*float64(s.stats.StoredBytes)/float64(logical),
			put.wall.Seconds()/s.cost.wall.Seconds(), put.cpu.Seconds()/s.cost.cpu.Seconds())
	}
	fmt.Fprintf(tw, "target\t<= 10%%\t\t>= 5x\t\t\n")
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Printf("\nlogical %d MiB; first put %v wall, %v CPU (%d MiB stored, %d chunks, %d MiB zero); get %v; zstd put %v, get %v\n",
		logical>>20, put.wall.Round(time.Millisecond), put.cpu.Round(time.Millisecond), s1.StoredBytes>>20, s1.Chunks, s1.ZeroBytes>>20,
		get.wall.Round(time.Millisecond), zPut.wall.Round(time.Millisecond), zGet.wall.Round(time.Millisecond))
	fmt.Printf("export+import %v wall, %v CPU\n", xfer.wall.Round(time.Millisecond), xfer.cpu.Round(time.Millisecond))
	for _, s := range seconds {
		fmt.Printf("second put (%s): %v wall, %v CPU, %d KiB stored, %d of %d chunks new\n", s.name, s.cost.wall.Round(time.Millisecond),
			s.cost.cpu.Round(time.Millisecond), s.stats.StoredBytes>>10, s.stats.NewChunks, s.stats.Chunks)
	}
	return nil
}

// cost is what a phase took: wall-clock time, and CPU time (user plus
// system) of the process or of the commands it ran. CPU time is the fairer
// comparison on a machine others are using.
type cost struct{ wall, cpu time.Duration }

func rusage(who int) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(who, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func timeSelf(fn func() error) (cost, error) {
	c0, t0 := rusage(syscall.RUSAGE_SELF), time.Now()
	err := fn()
	return cost{time.Since(t0), rusage(syscall.RUSAGE_SELF) - c0}, err
}

// settle flushes dirty pages to disk.
func settle() { _ = exec.Command("sync").Run() }

func timeCmd(name string, args ...string) (cost, error) {
	c0, t0 := rusage(syscall.RUSAGE_CHILDREN), time.Now()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return cost{}, fmt.Errorf("%s %v: %v: %s", name, args, err, out)
	}
	return cost{time.Since(t0), rusage(syscall.RUSAGE_CHILDREN) - c0}, nil
}

func fileBytes(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func dirBytes(d string) int64 {
	var n int64
	ents, _ := os.ReadDir(d)
	for _, e := range ents {
		n += fileBytes(filepath.Join(d, e.Name()))
	}
	return n
}
