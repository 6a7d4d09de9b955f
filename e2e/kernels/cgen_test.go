package kernels

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestCGeneratorMatchesGo builds casegen (the C runner's parser and input
// generator) and requires that it produce, for every case file, the same
// bytes as Inputs and the same scalar values as the Go parser.
func TestCGeneratorMatchesGo(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed")
	}
	bin := filepath.Join(t.TempDir(), "casegen")
	if out, err := exec.Command(gcc, "-O2", "-std=c11", "-Wall", "-Werror", "-ffp-contract=off", "-o", bin, "kernelrun/casegen.c").CombinedOutput(); err != nil {
		t.Fatalf("build casegen: %v\n%s", err, out)
	}
	files, _ := filepath.Glob("cases/*.case")
	compared := 0
	for _, f := range files {
		dir := t.TempDir()
		if out, err := exec.Command(bin, f, dir).CombinedOutput(); err != nil {
			t.Fatalf("casegen %s: %v\n%s", f, err, out)
		}
		fh, _ := os.Open(f)
		cases, err := Parse(fh, f)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		for i := range cases {
			c := &cases[i]
			in, _ := c.Inputs()
			for name, want := range in {
				got, err := os.ReadFile(filepath.Join(dir, c.Name+"."+name+".in"))
				if err != nil {
					t.Errorf("%s: %v", c.Name, err)
					continue
				}
				if i := firstDiff(got, want); i >= 0 {
					t.Errorf("%s: buffer %s differs at byte %d (C %d bytes, Go %d bytes)", c.Name, name, i, len(got), len(want))
				}
				compared++
			}
			for _, p := range c.Params {
				if p.Buffer != nil {
					continue
				}
				got, err := os.ReadFile(filepath.Join(dir, c.Name+"."+p.Name+".scalar"))
				want := make([]byte, p.Type.Size())
				store(want, p.Type, p.Bits)
				if err != nil || !slices.Equal(got, want) {
					t.Errorf("%s: scalar %s: C %x, Go %x (%v)", c.Name, p.Name, got, want, err)
				}
			}
		}
	}
	if compared < 100 {
		t.Fatalf("compared only %d buffers", compared)
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
