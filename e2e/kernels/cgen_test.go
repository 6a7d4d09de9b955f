package kernels

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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
				want := p.Value()
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

// TestCParserRejectsWhatGoRejects feeds both parsers the same bad case files:
// each must refuse every one, the C side with exit status 2 and a message
// naming the file and line.
func TestCParserRejectsWhatGoRejects(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed")
	}
	bin := filepath.Join(t.TempDir(), "casegen")
	if out, err := exec.Command(gcc, "-O2", "-std=c11", "-Wall", "-Werror", "-ffp-contract=off", "-o", bin, "kernelrun/casegen.c").CombinedOutput(); err != nil {
		t.Fatalf("build casegen: %v\n%s", err, out)
	}
	const head = "case c\n module m\n kernel k\n"
	for _, tt := range []struct{ name, text string }{
		{"no case line", "kernel k\n"},
		{"unknown directive", head + " frob 1\nend\n"},
		{"no end", head},
		{"no kernel", "case c\n module m\nend\n"},
		{"bad type", head + " buf a i33 4 zero\nend\n"},
		{"zero count", head + " buf a i32 0 zero\nend\n"},
		{"too big", head + " buf a f64 200000000 zero\nend\n"},
		{"rand on floats", head + " buf a f32 4 rand:1\nend\n"},
		{"randf on ints", head + " buf a i32 4 randf:1:0:1\nend\n"},
		{"seed zero", head + " buf a i32 4 rand:0\nend\n"},
		{"randi reversed", head + " buf a i32 4 randi:1:5:-5\nend\n"},
		{"bad const", head + " buf a i32 4 const:1.5\nend\n"},
		{"octal", head + " scalar n i32 010\nend\n"},
		{"empty hex", head + " scalar n i32 0x\nend\n"},
		{"keep on buffer", head + " buf a i32 4 keep\nend\n"},
		{"duplicate name", head + " buf a i32 4 zero\n scalar a i32 1\nend\n"},
		{"check unknown", head + " check a exact\nend\n"},
		{"tolerance on ints", head + " buf a i32 4 zero\n check a ulp:1\nend\n"},
		{"big block", head + " block 1024 2\nend\n"},
		{"case after expect", head + " expect CUDA_ERROR_ILLEGAL_ADDRESS\nend\ncase d\n module m\n kernel k\nend\n"},
		{"bad expect", head + " expect ILLEGAL\nend\n"},
		{"odd raw", head + " scalar s raw 123\nend\n"},
		{"raw buffer", head + " buf a raw 4 zero\nend\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Parse(strings.NewReader(tt.text), "bad.case"); err == nil {
				t.Errorf("Go accepted it")
			}
			f := filepath.Join(t.TempDir(), "bad.case")
			os.WriteFile(f, []byte(tt.text), 0o644)
			out, err := exec.Command(bin, f, t.TempDir()).CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "bad.case:") {
				t.Errorf("casegen: %v, output %q; want exit 2 naming bad.case:LINE", err, out)
			}
		})
	}
}
