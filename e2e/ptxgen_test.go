package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
	"github.com/gpuctl/gpuctl/e2e/ptxgen"
)

// TestPTXGenRunner runs gpurun, the runner that records the generated
// kernels on a GPU (e2e/ptxgen/gpurun), through libcuda.so.1 against the
// emulated device: a plain batch, an instrumented one, and one with a
// kernel that faults. The device is the emulator itself, so every output
// must be the emulator's, every trace must match, and the faulting kernel
// must end the process with status 3 and name where to resume.
func TestPTXGenRunner(t *testing.T) {
	c := harness.New(t)
	host := c.NewHost("gpu-a", harness.HostOptions{})
	client := c.NewNode("client")
	gpurun := c.CompileC(filepath.Join(c.Build.Root, "e2e/ptxgen/gpurun/gpurun.c"))
	ctx := context.Background()
	dir := t.TempDir()
	var plain, traced []ptxgen.BatchKernel
	// The first six seeds the emulator runs rather than refuses (a
	// double operation on two different NaNs).
	for s := uint64(1); len(plain) < 6; s++ {
		p := ptxgen.Generate(s)
		if _, _, err := ptxgen.RunEmulator(ctx, p, 1); err != nil {
			continue
		}
		plain = append(plain, ptxgen.BatchKernel{ID: s, Program: p})
		traced = append(traced, ptxgen.BatchKernel{ID: s, Program: p, Trace: p.Trace()})
	}
	third, fourth := plain[2].ID, plain[3].ID
	run := func(name string, ks []ptxgen.BatchKernel, start int, edit func(batch string)) (harness.Result, string) {
		t.Helper()
		batch := filepath.Join(dir, name)
		if err := ptxgen.WriteBatch(batch, ptxgen.Version, ks); err != nil {
			t.Fatal(err)
		}
		if edit != nil {
			edit(batch)
		}
		res := filepath.Join(dir, name+".bin")
		return client.RunClient(host, 60*time.Second, nil, gpurun, batch, res, "0", "1", strconv.Itoa(start)), res
	}

	t.Run("plain", func(t *testing.T) {
		r, res := run("plain", plain, 0, nil)
		if r.Code != 0 {
			t.Fatalf("gpurun: exit %d\n%s", r.Code, r.Stderr)
		}
		recs, err := ptxgen.ReadResultFiles(res)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range plain {
			out, _, err := ptxgen.RunEmulator(ctx, k.Program, 1)
			if err != nil {
				t.Fatal(err)
			}
			rec, ok := recs[k.ID]
			if !ok || rec.Status != 0 || ptxgen.Digest(rec.Data[:k.Program.OutLen()]) != ptxgen.Digest(out) {
				t.Errorf("seed %d: the runner's record differs from the emulator's outputs", k.ID)
			}
		}
	})

	t.Run("traced", func(t *testing.T) {
		r, res := run("traced", traced, 0, nil)
		if r.Code != 0 {
			t.Fatalf("gpurun: exit %d\n%s", r.Code, r.Stderr)
		}
		recs, err := ptxgen.ReadResultFiles(res)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range traced {
			red, err := ptxgen.ReduceTrace(ctx, k.Trace, recs[k.ID], 8, 4096)
			if err != nil {
				t.Fatalf("seed %d: %v", k.ID, err)
			}
			dt, err := ptxgen.DecodeDeviceTrace(red)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := ptxgen.CompareTrace(ctx, dt)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Differ != 0 || !rep.OutsMatch {
				t.Errorf("seed %d: %d of %d traces differ, outputs match %v", k.ID, rep.Differ, rep.Threads, rep.OutsMatch)
			}
		}
	})

	t.Run("a kernel that faults", func(t *testing.T) {
		// The third kernel's first input load, moved far outside its
		// buffer.
		fault := func(batch string) {
			path := filepath.Join(batch, fmt.Sprintf("%d.ptx", third))
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			s := strings.Replace(string(b), "+0];", "+900000000];", 1)
			if s == string(b) {
				t.Fatalf("seed %d has no load at offset 0 to move", third)
			}
			os.WriteFile(path, []byte(s), 0o644)
		}
		r, res := run("fault", plain, 0, fault)
		next, _ := os.ReadFile(res + ".next")
		if r.Code != 3 || strings.TrimSpace(string(next)) != "3" {
			t.Fatalf("gpurun: exit %d, next %q; want 3 and index 3\n%s", r.Code, next, r.Stderr)
		}
		recs, err := ptxgen.ReadResultFiles(res)
		if err != nil {
			t.Fatal(err)
		}
		if rec := recs[third]; len(recs) != 3 || rec.Status != 2 || !strings.HasPrefix(string(rec.Data), "CUDA_ERROR_ILLEGAL_ADDRESS") {
			t.Fatalf("%d records, seed %d's %d %q; want 3, and its launch error", len(recs), third, rec.Status, rec.Data)
		}
		// Resumed from the next kernel, the rest of the batch runs.
		r, res = run("fault", plain, 3, fault)
		recs, err = ptxgen.ReadResultFiles(res)
		if r.Code != 0 || err != nil || len(recs) != 3 || recs[fourth].Status != 0 {
			t.Fatalf("resumed gpurun: exit %d, %d records (%v)\n%s", r.Code, len(recs), err, r.Stderr)
		}
	})
}
