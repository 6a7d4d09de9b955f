package ptxgen

import (
	"bufio"
	"compress/gzip"
	"context"
	"flag"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const corpusPath = "corpus/h200.txt"

var updateExpect = flag.Bool("update-expect", false, "rewrite corpus/h200.refused from this replay")

// refusedAt is where a refusal's error says the emulator stopped: the
// instruction's line and text ("line 155 `mul.rn.f64 %fd5, %fd0, %fd2`").
var refusedAt = regexp.MustCompile("at (line \\d+ `[^`]*`)")

// readExpect reads a file of `SEED TEXT` lines (TEXT may be empty).
func readExpect(t *testing.T, path string) map[uint64]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[uint64]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		seed, rest, _ := strings.Cut(l, " ")
		s, err := strconv.ParseUint(seed, 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, l, err)
		}
		m[s] = strings.TrimSpace(rest)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func writeExpect(t *testing.T, path, header string, m map[uint64]string) {
	t.Helper()
	var seeds []uint64
	for s := range m {
		seeds = append(seeds, s)
	}
	sort.Slice(seeds, func(i, j int) bool { return seeds[i] < seeds[j] })
	var b strings.Builder
	b.WriteString(header)
	for _, s := range seeds {
		fmt.Fprintf(&b, "%d %s\n", s, m[s])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// readMiscompiled reads corpus/h200.miscompiled: a `version N` line, then
// `SEED DIGEST NOTE` lines, each the digest of the exact outputs an H200
// computed for the seed's kernel instrumented for a trace, in place of the
// plain kernel's, which ptxas compiled into something else.
func readMiscompiled(t *testing.T, path string) (version int, digests map[uint64]string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	digests = map[uint64]string{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 0 || strings.HasPrefix(f[0], "#"):
		case f[0] == "version" && len(f) == 2:
			if version, err = strconv.Atoi(f[1]); err != nil {
				t.Fatalf("%s: %q: %v", path, l, err)
			}
		default:
			s, err := strconv.ParseUint(f[0], 10, 64)
			if err != nil || len(f) < 2 || len(f[1]) != 16 {
				t.Fatalf("%s: %q: want `version N` or `SEED DIGEST NOTE`", path, l)
			}
			digests[s] = f[1]
		}
	}
	if version == 0 {
		t.Fatalf("%s: no `version N` line", path)
	}
	return version, digests
}

// TestCorpusReplay replays every kernel an H200 ran (corpus/h200.txt) on
// the emulator and requires its exact outputs bit for bit and its
// approximate outputs within the ISA's bounds. A kernel may instead be
// refused with CUDA_ERROR_NOT_SUPPORTED where the device's result is not
// established (a double operation on two different NaNs, a bfi.b32
// constant shape nothing recorded): corpus/h200.refused lists exactly
// those seeds and the instruction each stops at, and a refusal elsewhere,
// or at another instruction, fails. The kernels ptxas miscompiled
// (corpus/h200.miscompiled) are held to the device's outputs of the same
// kernel instrumented, which ptxas compiled as written. Any other
// difference fails.
func TestCorpusReplay(t *testing.T) {
	c, err := ReadCorpus(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	refusedWant := readExpect(t, "corpus/h200.refused")
	mv, miscompiled := readMiscompiled(t, "corpus/h200.miscompiled")
	if mv != c.Version {
		t.Errorf("corpus/h200.miscompiled is for generator version %d, the corpus is version %d: establish which kernels ptxas miscompiled again (gpu-record.sh's trace.txt, bisect.txt, jit-o0-report.txt)", mv, c.Version)
		miscompiled = nil
	}
	plain := map[uint64]string{}
	for i, e := range c.Entries {
		if d, ok := miscompiled[e.Seed]; ok {
			plain[e.Seed] = e.Hash
			if d == e.Hash {
				t.Errorf("seed %d: corpus/h200.miscompiled gives the plain kernel's own digest %s: the device computed it as written, remove the seed", e.Seed, d)
			}
			c.Entries[i].Hash = d
		}
	}
	for seed := range miscompiled {
		if _, ok := plain[seed]; !ok {
			t.Errorf("seed %d of corpus/h200.miscompiled is not in the corpus", seed)
		}
	}
	res := Replay(context.Background(), c, 0)
	refusedGot := map[uint64]string{}
	for _, r := range res {
		switch {
		case r.Outcome == Refused:
			at := "?"
			if m := refusedAt.FindStringSubmatch(r.Detail); m != nil {
				at = m[1]
			}
			refusedGot[r.Seed] = at
			if want, ok := refusedWant[r.Seed]; !ok {
				t.Errorf("seed %d refused, which corpus/h200.refused does not expect: %s", r.Seed, r.Detail)
			} else if want != at {
				t.Errorf("seed %d refused at %s; corpus/h200.refused expects %s: %s", r.Seed, at, want, r.Detail)
			}
		case r.Outcome.Failed() && plain[r.Seed] != "":
			t.Errorf("seed %d: %s against the device's instrumented kernel (corpus/h200.miscompiled): %s", r.Seed, r.Outcome, r.Detail)
		case r.Outcome.Failed():
			t.Errorf("seed %d: %s: %s (ptxgen show -seed %d; ptxgen check -seed %d)", r.Seed, r.Outcome, r.Detail, r.Seed, r.Seed)
		}
		if _, ok := refusedWant[r.Seed]; ok && r.Outcome != Refused {
			t.Errorf("seed %d: %s, but corpus/h200.refused expects a refusal at %s", r.Seed, r.Outcome, refusedWant[r.Seed])
		}
	}
	if *updateExpect {
		writeExpect(t, "corpus/h200.refused", refusedHeader, refusedGot)
	}
	t.Logf("%s", Summary(res))
	t.Logf("%d refused with CUDA_ERROR_NOT_SUPPORTED, as corpus/h200.refused expects; %d miscompiled by ptxas, held to the instrumented kernel's outputs (corpus/h200.miscompiled)", len(refusedGot), len(plain))
}

const refusedHeader = `# Seeds of h200.txt the emulator refuses with CUDA_ERROR_NOT_SUPPORTED, and
# the instruction each stops at: the device's result there is not established
# (see docs/ptx-interpreter.md). TestCorpusReplay requires exactly these
# refusals; go test ./e2e/ptxgen -run TestCorpusReplay -update-expect rewrites
# this file from a replay.
`

// TestProbes holds the emulator to an H200's outputs of the probe kernels
// (bit-field edges, NaNs through every float format, float atomics),
// exactly.
func TestProbes(t *testing.T) {
	f, err := os.Open("corpus/h200-probes.bin.gz")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := ReadResults(zr)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range Probes() {
		r, ok := dev[p.Seed]
		if !ok || r.Status != 0 {
			t.Errorf("probe %s: no device output recorded", p.Name)
			continue
		}
		ds, err := CheckProbe(p, r.Data)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if i == 10 {
				t.Errorf("probe %s: %d outputs differ in all", p.Name, len(ds))
				break
			}
			t.Errorf("probe %s, %s, %s: emulator %#x, device %#x", p.Name, d.Col, d.Inputs, d.Emu, d.Dev)
		}
	}
}

// TestJITLevel0 replays the kernels the version-3 recording did not
// reproduce as an H200 ran them compiled at JIT optimisation level 0
// (corpus/h200-jit-o0.txt). The five of corpus/h200.miscompiled whose
// only difference was the moved instruction match exactly; 598 is refused
// as in the corpus; 1395 and 3427 differ where the emulator follows folds
// that ptxas makes only when it optimises (shl.b64 of cvt.s64.u32, and a
// max.f32 of a register with itself, a move).
func TestJITLevel0(t *testing.T) {
	c, err := ReadCorpus("corpus/h200-jit-o0.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint64]Outcome{598: Refused, 1395: Mismatch, 1879: Exact, 1978: Exact, 2826: Exact, 3148: Exact, 3394: Exact, 3427: Mismatch}
	res := Replay(context.Background(), c, 0)
	if len(res) != len(want) {
		t.Fatalf("corpus/h200-jit-o0.txt holds %d kernels, want %d", len(res), len(want))
	}
	for _, r := range res {
		if w, ok := want[r.Seed]; !ok || r.Outcome != w {
			t.Errorf("seed %d at JIT level 0: %s, want %s (%s)", r.Seed, r.Outcome, w, r.Detail)
		}
	}
}
