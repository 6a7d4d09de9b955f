package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/e2e/harness"
)

// nvccDir finds the CUDA toolkit `make deps` installs (scripts/nvcc.sh),
// or the one GPUCTL_NVCC_DIR names.
func nvccDir(t *testing.T, root string) string {
	t.Helper()
	dir := os.Getenv("GPUCTL_NVCC_DIR")
	if dir == "" {
		dir = filepath.Join(root, ".deps/nvcc")
	}
	if _, err := os.Stat(filepath.Join(dir, "bin/nvcc")); err != nil {
		t.Fatalf("no nvcc at %s: run `make deps` (scripts/nvcc.sh installs CUDA 12.4 there) or set GPUCTL_NVCC_DIR", dir)
	}
	return dir
}

// runtimeProgram is one of e2e/runtime/testdata's CUDA runtime programs.
type runtimeProgram struct {
	name   string
	shared bool // also built against the shared cudart
}

// TestRuntimeAPIPrograms compiles CUDA runtime-API programs from source
// with nvcc (PTX only, so the emulated device runs them: the emulator
// takes the PTX out of cudart's fatbins) against static and shared cudart,
// and runs each through gpuctl on the emulated device. Every program
// checks its own results and ends with "<name> ok"; none may need a call
// that falls through to a not-supported stub. Where runtimeRecordPath
// holds a GPU's hashes of a program's outputs, the emulated run must print
// the same.
func TestRuntimeAPIPrograms(t *testing.T) {
	c := harness.New(t)
	nvcc := nvccDir(t, c.Build.Root)
	progs := []runtimeProgram{
		{"vadd", true}, {"reduce", false}, {"streams", true}, {"symbols", true},
		{"dynshared", false}, {"errors", true}, {"thrust", false},
	}
	bins := compileRuntime(t, nvcc, filepath.Join(c.Build.Root, "e2e/runtime/testdata"), progs)

	recorded := readRuntimeRecord(t, filepath.Join(c.Build.Root, runtimeRecordPath))
	host := c.NewHost("gpu-a", harness.HostOptions{Args: []string{"--grace", "1s"}})
	client := c.NewNode("client")
	for _, b := range bins {
		t.Run(b.label, func(t *testing.T) {
			r := client.RunClient(host, 3*time.Minute, nil, b.path)
			want := b.name + " ok"
			if r.Code != 0 || !strings.Contains(r.Stdout, want) {
				t.Fatalf("exit %d after %v, want %q\nstdout: %s\nstderr: %s", r.Code, r.Duration, want, r.Stdout, r.Stderr)
			}
			if rec, ok := recorded[b.name]; ok {
				if got := hashLines(r.Stdout); !slices.Equal(got, rec) {
					t.Errorf("outputs differ from the GPU's (%s):\nemulated: %q\nrecorded: %q", runtimeRecordPath, got, rec)
				}
			}
			for _, line := range strings.Split(r.Stderr, "\n") {
				if !strings.HasPrefix(line, "gpuctl: ") {
					continue
				}
				if strings.Contains(line, "not supported") || strings.Contains(line, "not implemented") ||
					strings.Contains(line, "unknown export table") {
					t.Errorf("the program reached an unimplemented call: %s", line)
				}
			}
			t.Logf("%s in %v: %s", b.label, r.Duration.Round(time.Millisecond), strings.TrimSpace(r.Stdout))
		})
	}
}

// runtimeRecordPath holds the programs' output hashes as an H200 computed
// them (e2e/gpu/runtime-record.sh): lines "PROGRAM hash LABEL HEX".
const runtimeRecordPath = "e2e/testdata/runtime-h200.txt"

// readRuntimeRecord reads runtimeRecordPath into each program's hash
// lines ("hash LABEL HEX", in order); a missing file is an empty record.
func readRuntimeRecord(t *testing.T, path string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Logf("no %s: outputs are checked by the programs alone", runtimeRecordPath)
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	rec := map[string][]string{}
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		prog, rest, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(rest, "hash ") || len(strings.Fields(rest)) != 3 {
			t.Fatalf("%s:%d: %q is not \"PROGRAM hash LABEL HEX\"", path, i+1, line)
		}
		rec[prog] = append(rec[prog], rest)
	}
	return rec
}

// hashLines is a program's "hash LABEL HEX" output lines, in order.
func hashLines(stdout string) []string {
	var out []string
	for _, line := range strings.Split(stdout, "\n") {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, "hash ") {
			out = append(out, line)
		}
	}
	return out
}

type runtimeBinary struct {
	name, label, path string
}

// compileRuntime builds every program with static cudart, and those
// marked shared also with -cudart shared (run path to the toolkit's
// libcudart.so.12), two at a time.
func compileRuntime(t *testing.T, nvcc, src string, progs []runtimeProgram) []runtimeBinary {
	t.Helper()
	out := t.TempDir()
	var bins []runtimeBinary
	for _, p := range progs {
		bins = append(bins, runtimeBinary{p.name, p.name + "-static", filepath.Join(out, p.name+"-static")})
		if p.shared {
			bins = append(bins, runtimeBinary{p.name, p.name + "-shared", filepath.Join(out, p.name+"-shared")})
		}
	}
	start := time.Now()
	errs := make([]error, len(bins))
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, b := range bins {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			rt := strings.TrimPrefix(b.label, b.name+"-")
			// compute_80 PTX only: nvcc 12.4's newest PTX the emulator
			// parses, and no SASS the emulated device could not run.
			args := []string{"-O2", "-gencode", "arch=compute_80,code=compute_80", "-cudart", rt,
				"-o", b.path, filepath.Join(src, b.name+".cu")}
			if rt == "shared" {
				args = append(args, "-Xlinker", "-rpath="+filepath.Join(nvcc, "lib"))
			}
			if o, err := exec.Command(filepath.Join(nvcc, "bin/nvcc"), args...).CombinedOutput(); err != nil {
				errs[i] = fmt.Errorf("nvcc %s: %v\n%s", b.label, err, o)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("compiled %d programs in %v", len(bins), time.Since(start).Round(time.Millisecond))
	return bins
}

// TestCallTracer runs a CUDA runtime program through gpuctl on the
// emulated device with and without e2e/gpu/tools/cudiff.c preloaded: the
// program's output must not change, the trace must record the runtime's
// questions with their answers and handles by name, two traced runs must
// compare equal under e2e/gpu/cudiff.sh --diff, and an answer changed in
// one of them must be reported as the first difference.
func TestCallTracer(t *testing.T) {
	c := harness.New(t)
	nvcc := nvccDir(t, c.Build.Root)
	bins := compileRuntime(t, nvcc, filepath.Join(c.Build.Root, "e2e/runtime/testdata"), []runtimeProgram{{"vadd", false}})
	dir := t.TempDir()
	tracer := filepath.Join(dir, "cudiff.so")
	if o, err := exec.Command("gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC", "-o", tracer,
		filepath.Join(c.Build.Root, "e2e/gpu/tools/cudiff.c"), "-ldl", "-lpthread").CombinedOutput(); err != nil {
		t.Fatalf("gcc cudiff.c: %v\n%s", err, o)
	}

	host := c.NewHost("gpu-a", harness.HostOptions{Args: []string{"--grace", "1s"}})
	client := c.NewNode("client")
	plain := client.RunClient(host, 3*time.Minute, nil, bins[0].path)
	if plain.Code != 0 {
		t.Fatalf("untraced run: exit %d\nstdout: %s\nstderr: %s", plain.Code, plain.Stdout, plain.Stderr)
	}
	traced := func(name string) string {
		out := filepath.Join(dir, name)
		r := client.RunClient(host, 3*time.Minute, nil, "env", "CUDIFF_OUT="+out, "LD_PRELOAD="+tracer, bins[0].path)
		if r.Code != 0 || r.Stdout != plain.Stdout {
			t.Fatalf("traced run: exit %d, stdout %q (untraced: %q)\nstderr: %s", r.Code, r.Stdout, plain.Stdout, r.Stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	a, b := filepath.Join(dir, "a.trace"), filepath.Join(dir, "b.trace")
	trace := traced("a.trace")
	traced("b.trace")
	for _, want := range []string{
		"cuGetProcAddress_v2 sym=cuDeviceGetAttribute ver=", // the runtime's look-ups
		"cuDeviceGetAttribute attr=16 dev=0 -> 0 v=",        // answers to them
		"cuDevicePrimaryCtxRetain dev=0 -> 0 ctx=ctx1",      // contexts by order
		"cuGetExportTable uuid=42d85a8123f6cb478298f6e78a3aecdc -> 0 size=0x18",
		"ET 263e8860[2] ctx=ctx1 -> 0 flags=0", // a decoded export-table slot
		"cuFuncGetAttribute attr=0 fn=_Z3addPKfS0_Pfi -> 0 v=",
		"cuLaunchKernel fn=_Z3addPKfS0_Pfi grid=", // functions by name
		"# 1 cuModuleGetLoadingMode -> 0 v=",      // counts at exit
	} {
		if !strings.Contains(trace, want) {
			t.Errorf("the trace lacks %q", want)
		}
	}
	if t.Failed() {
		t.Fatalf("trace:\n%s", trace)
	}

	script := filepath.Join(c.Build.Root, "e2e/gpu/cudiff.sh")
	if o, err := exec.Command(script, "--diff", a, b).CombinedOutput(); err != nil || !strings.Contains(string(o), "no difference") {
		t.Fatalf("two traced runs of one program differ (%v):\n%s", err, o)
	}
	// One answer changed: the report names the question and both answers.
	var changed []string
	for _, line := range strings.Split(trace, "\n") {
		if strings.Contains(line, "cuDeviceGetAttribute attr=16 dev=0 -> 0 v=") {
			line = line[:strings.LastIndex(line, "v=")] + "v=0"
		}
		changed = append(changed, line)
	}
	if err := os.WriteFile(b, []byte(strings.Join(changed, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := exec.Command(script, "--diff", a, b).CombinedOutput()
	report := string(o)
	if code := exitCode(err); code != 1 || !strings.Contains(report, "answers that differ (in the order the program first asked): 1\n  cuDeviceGetAttribute attr=16 dev=0\n") ||
		!strings.Contains(report, "gpuctl:  0 v=0") {
		t.Fatalf("a changed answer: exit %d, report:\n%s", code, report)
	}
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}
