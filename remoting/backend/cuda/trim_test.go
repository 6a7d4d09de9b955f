package cuda

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/devmem"
)

// TestContextTrim checks on a GPU that trimming the contexts' stack gives
// its reservation back to the device (cuMemGetInfo) and that the untrim
// sets the program's limit back exactly.
func TestContextTrim(t *testing.T) {
	ctx := context.Background()
	d, c := gpuDevice(t, Options{})
	const set = 4096
	if err := d.CtxSetLimit(ctx, c, limitStackSize, set); err != nil {
		t.Fatal(err)
	}
	// The reservation is made for a launch: the hash kernel's.
	p, err := d.MemAlloc(ctx, c, 4<<20)
	if err != nil {
		t.Fatal(err)
	}
	regs, err := d.MemRegions(ctx)
	if err != nil || len(regs) == 0 {
		t.Fatalf("regions %v, %v", regs, err)
	}
	if err := d.HashBlocks(ctx, regs[0], devmem.DefaultBlock, 1, make([]uint64, devmem.BlocksOf(regs[0].Size, devmem.DefaultBlock))); err != nil {
		t.Fatal(err)
	}
	free0, _, err := d.MemGetInfo(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := d.TrimContexts(ctx); err != nil {
		t.Fatal(err)
	}
	took := time.Since(t0)
	free1, _, _ := d.MemGetInfo(ctx, c)
	got, err := d.CtxGetLimit(ctx, c, limitStackSize)
	if err != nil || got > 1024 {
		t.Errorf("trimmed stack limit %d, %v; want at most 1 KiB", got, err)
	}
	t0 = time.Now()
	if err := d.UntrimContexts(ctx); err != nil {
		t.Fatal(err)
	}
	took2 := time.Since(t0)
	if got, err := d.CtxGetLimit(ctx, c, limitStackSize); err != nil || got != set {
		t.Errorf("stack limit after the untrim %d, %v; want the %d set", got, err, set)
	}
	t.Logf("trim gave back %d MiB of device memory in %v; untrim took %v", (int64(free1)-int64(free0))>>20, took, took2)
	if int64(free1)-int64(free0) < 64<<20 {
		t.Errorf("trimming the stack gave back %d bytes of device memory; want the driver's reservation (hundreds of MiB)", int64(free1)-int64(free0))
	}
	// Launches work with the stack set back.
	if err := d.HashBlocks(ctx, regs[0], devmem.DefaultBlock, 1, make([]uint64, devmem.BlocksOf(regs[0].Size, devmem.DefaultBlock))); err != nil {
		t.Fatalf("hash kernel after the untrim: %v", err)
	}
	_ = d.MemFree(ctx, c, p)
}

// TestDeviceMemoryTimings times, on a GPU, the parts of a save and a
// reload of GPUCTL_TIMING_MIB (default 1024) MiB and the ways to move the
// bytes: pinning the memfd in parts of several sizes, direct copies into
// and out of it, and copies through the ring. It checks the round trip
// bit-exact; the timings are for reading (go test -v).
func TestDeviceMemoryTimings(t *testing.T) {
	ctx := context.Background()
	d, c := gpuDevice(t, Options{})
	mib := 1024
	if v, err := strconv.Atoi(os.Getenv("GPUCTL_TIMING_MIB")); err == nil && v > 0 {
		mib = v
	}
	n := uint64(mib) << 20
	p, err := d.MemAlloc(ctx, c, n)
	if err != nil {
		t.Fatal(err)
	}
	host := make([]byte, n)
	rng := rand.New(rand.NewPCG(1, uint64(mib)))
	for i := 0; i+8 <= len(host); i += 8 {
		binary.LittleEndian.PutUint64(host[i:], rng.Uint64())
	}
	regs, err := d.MemRegions(ctx)
	if err != nil || len(regs) != 1 {
		t.Fatalf("regions %v, %v", regs, err)
	}
	r := regs[0]
	lap := func(what string, f func() error) {
		t.Helper()
		t0 := time.Now()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		el := time.Since(t0)
		t.Logf("%-44s %8.1f ms  %6.1f GB/s", what, float64(el.Microseconds())/1000, float64(n)/1e9/el.Seconds())
	}
	// The ring, parallel: what a copy without pinning costs.
	lap("htod through the ring, 16 at once", func() error {
		return pieces16(n, func(off, k uint64) error { return d.WriteMem(ctx, r, off, host[off:off+k]) })
	})
	mf := func() []byte {
		fd, err := unix.MemfdCreate("timing", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "timing")
		t.Cleanup(func() { f.Close() })
		if err := f.Truncate(int64(n)); err != nil {
			t.Fatal(err)
		}
		b, err := unix.Mmap(fd, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return b
	}
	b := mf()
	lap("populate a fresh memfd (MADV_POPULATE_WRITE, 16 parts)", func() error {
		return pieces16(n, func(off, k uint64) error { return unix.Madvise(b[off:off+k], unix.MADV_POPULATE_WRITE) })
	})
	lap("dtoh through the ring into the memfd, 16 at once", func() error {
		return pieces16(n, func(off, k uint64) error { return d.ReadMem(ctx, r, off, b[off:off+k]) })
	})
	for _, part := range []uint64{n, 256 << 20, 64 << 20, 16 << 20} {
		if part > n {
			continue
		}
		var unpins []func()
		var mu sync.Mutex
		lap(fmt.Sprintf("pin the memfd in %d MiB parts, in parallel", part>>20), func() error {
			return inParts(n, part, func(off, k uint64) error {
				u, err := d.PinHost(ctx, b[off:off+k])
				mu.Lock()
				unpins = append(unpins, u)
				mu.Unlock()
				return err
			})
		})
		if part == 64<<20 {
			lap("htod direct from the pinned memfd, 32 MiB pieces", func() error {
				return inParts(n, 32<<20, func(off, k uint64) error { return d.WriteMem(ctx, r, off, b[off:off+k]) })
			})
			lap("dtoh direct into the pinned memfd, 32 MiB pieces", func() error {
				return inParts(n, 32<<20, func(off, k uint64) error { return d.ReadMem(ctx, r, off, b[off:off+k]) })
			})
		}
		lap(fmt.Sprintf("unpin %d MiB parts, in parallel", part>>20), func() error {
			return inParts(uint64(len(unpins)), 1, func(i, _ uint64) error { unpins[i](); return nil })
		})
	}
	hs := make([]uint64, devmem.BlocksOf(r.Size, devmem.DefaultBlock))
	lap("hash, first (ring, kernel load)", func() error { return d.HashBlocks(ctx, r, devmem.DefaultBlock, 1, hs) })
	lap("hash, again", func() error { return d.HashBlocks(ctx, r, devmem.DefaultBlock, 1, hs) })
	lap("release", func() error { return d.ReleaseMem(ctx) })
	lap("back again (cuMemCreate, cuMemMap, zero)", func() error { return d.RestoreMem(ctx) })
	lap("htod through the ring again (after release)", func() error {
		return pieces16(n, func(off, k uint64) error { return d.WriteMem(ctx, r, off, host[off:off+k]) })
	})
	// The save and reload as a checkpoint runs them, pinning the memfd
	// and not.
	tr := devmem.NewTracker()
	for _, pin := range []bool{true, false} {
		tr.Pin = pin
		var sv devmem.Saved
		var f *os.File
		lap(fmt.Sprintf("save, pin=%v (hash, prepare, copy, release, trim)", pin), func() error {
			var err error
			f, sv, err = tr.Save(ctx, d, devmem.SaveRequest{All: true, Release: true})
			return err
		})
		t.Logf("save, pin=%v: hash %v, prepare %v, copy %v, release+trim %v; pinned %d (%s)", pin, time.Duration(sv.HashNS), time.Duration(sv.PrepareNS),
			time.Duration(sv.CopyNS), time.Duration(sv.ReleaseNS), sv.PinnedBytes, sv.PinError)
		lap(fmt.Sprintf("reload, pin=%v", pin), func() error { return tr.Reload(ctx, d, f, sv.LayoutOff, sv.LayoutLen) })
		st := tr.LastReload
		t.Logf("reload, pin=%v: back %v, scan %v, pin %v, copy %v, unpin %v, untrim %v", pin, time.Duration(st.BackNS), time.Duration(st.ScanNS),
			time.Duration(st.PinNS), time.Duration(st.CopyNS), time.Duration(st.UnpinNS), time.Duration(st.UntrimNS))
		f.Close()
		got := make([]byte, n)
		if err := d.ReadMem(ctx, r, 0, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, host) {
			t.Fatalf("pin=%v: the memory differs after save and reload", pin)
		}
	}
	_ = d.MemFree(ctx, c, p)
}

// pieces16 runs f over n bytes in 16 parts at once.
func pieces16(n uint64, f func(off, k uint64) error) error {
	return inParts(n, (n/16+4095)&^4095, f)
}

// inParts runs f over [0, n) in parts of part bytes, all at once.
func inParts(n, part uint64, f func(off, k uint64) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n/part+1)
	for off := uint64(0); off < n; off += part {
		wg.Go(func() {
			if err := f(off, min(part, n-off)); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}
