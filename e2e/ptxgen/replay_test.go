package ptxgen

import (
	"bufio"
	"compress/gzip"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
)

const corpusPath = "corpus/h200.txt"

// readOpen reads the seeds the emulator does not reproduce yet.
func readOpen(t *testing.T, path string) map[uint64]bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	open := map[uint64]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		s, err := strconv.ParseUint(strings.Fields(l)[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", path, l, err)
		}
		open[s] = true
	}
	return open
}

// TestCorpusReplay replays every kernel an H200 ran (corpus/h200.txt) on
// the emulator and requires its exact outputs bit for bit and its
// approximate outputs within the ISA's bounds. The seeds listed in
// corpus/h200.open are known not to match yet: they are reported, and one
// that starts matching must be removed from the list.
func TestCorpusReplay(t *testing.T) {
	c, err := ReadCorpus(corpusPath)
	if err != nil {
		t.Fatal(err)
	}
	open := readOpen(t, "corpus/h200.open")
	res := Replay(context.Background(), c, 0)
	var known, refused int
	for _, r := range res {
		switch {
		case r.Outcome == Refused:
			refused++
			t.Logf("seed %d refused: %s", r.Seed, r.Detail)
		case r.Outcome.Failed() && open[r.Seed]:
			known++
		case r.Outcome.Failed():
			t.Errorf("seed %d: %s: %s (ptxgen show -seed %d; ptxgen check -seed %d)", r.Seed, r.Outcome, r.Detail, r.Seed, r.Seed)
		case open[r.Seed]:
			t.Errorf("seed %d now matches the device: remove it from corpus/h200.open", r.Seed)
		}
	}
	t.Logf("%s", Summary(res))
	t.Logf("%d of them known not to match yet (corpus/h200.open), %d refused with CUDA_ERROR_NOT_SUPPORTED", known, refused)
}

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
