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

var updateExpect = flag.Bool("update-expect", false, "rewrite corpus/h200.refused and corpus/h200.unexplained from this replay")

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

// TestCorpusReplay replays every kernel an H200 ran (corpus/h200.txt) on
// the emulator and requires its exact outputs bit for bit and its
// approximate outputs within the ISA's bounds. A kernel may instead be
// refused with CUDA_ERROR_NOT_SUPPORTED where the device's result is not
// established (a double operation on two different NaNs, a bfi.b32
// constant shape nothing recorded): corpus/h200.refused lists exactly
// those seeds and the instruction each stops at, and a refusal elsewhere,
// or at another instruction, fails. corpus/h200.unexplained lists the
// kernels whose difference is not understood yet, with the first
// differing instruction of the device's trace; each is reported, and one
// that starts matching must be removed from it.
func TestCorpusReplay(t *testing.T) {
	c, err := ReadCorpus(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	refusedWant := readExpect(t, "corpus/h200.refused")
	unexplained := readExpect(t, "corpus/h200.unexplained")
	res := Replay(context.Background(), c, 0)
	refusedGot := map[uint64]string{}
	newUnexplained := map[uint64]string{}
	var known int
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
		case r.Outcome.Failed() && unexplained[r.Seed] != "":
			known++
			newUnexplained[r.Seed] = unexplained[r.Seed]
			t.Logf("seed %d: %s, not explained yet (device trace: %s)", r.Seed, r.Outcome, unexplained[r.Seed])
		case r.Outcome.Failed():
			newUnexplained[r.Seed] = "?"
			t.Errorf("seed %d: %s: %s (ptxgen show -seed %d; ptxgen check -seed %d)", r.Seed, r.Outcome, r.Detail, r.Seed, r.Seed)
		case unexplained[r.Seed] != "":
			t.Errorf("seed %d now matches the device: remove it from corpus/h200.unexplained", r.Seed)
		}
		if _, ok := refusedWant[r.Seed]; ok && r.Outcome != Refused {
			t.Errorf("seed %d: %s, but corpus/h200.refused expects a refusal at %s", r.Seed, r.Outcome, refusedWant[r.Seed])
		}
	}
	if *updateExpect {
		writeExpect(t, "corpus/h200.refused", refusedHeader, refusedGot)
		writeExpect(t, "corpus/h200.unexplained", unexplainedHeader, newUnexplained)
	}
	t.Logf("%s", Summary(res))
	t.Logf("%d refused with CUDA_ERROR_NOT_SUPPORTED, as corpus/h200.refused expects; %d differ unexplained (corpus/h200.unexplained)", len(refusedGot), known)
}

const refusedHeader = `# Seeds of h200.txt the emulator refuses with CUDA_ERROR_NOT_SUPPORTED, and
# the instruction each stops at: the device's result there is not established
# (see docs/ptx-interpreter.md). TestCorpusReplay requires exactly these
# refusals; go test ./e2e/ptxgen -run TestCorpusReplay -update-expect rewrites
# this file from a replay.
`

const unexplainedHeader = `# Seeds of h200.txt whose outputs the emulator does not reproduce, for a
# reason not understood yet, with the first instruction whose result differs
# in the device's instruction trace (see README.md). TestCorpusReplay reports
# them and fails on any other difference and on a listed seed that matches.
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
