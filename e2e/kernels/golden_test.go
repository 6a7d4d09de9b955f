package kernels

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGolden records reference outputs as a golden set and checks that
// CheckGolden accepts them, rejects an exact output that changed, accepts an
// approximation within its tolerance, rejects one beyond it, and counts
// cases the record does not have.
func TestGolden(t *testing.T) {
	all := loadCorpus(t)
	var cases []Case
	for _, c := range all {
		if c.Name == "float_math" || c.Name == "scan_warp_inclusive" || c.Name == "oob_read" {
			cases = append(cases, c)
		}
	}
	if len(cases) != 3 {
		t.Fatalf("picked %d cases", len(cases))
	}
	out, golden := t.TempDir(), t.TempDir()
	for i := range cases {
		c := &cases[i]
		if c.Expect != "" {
			os.WriteFile(ErrorPath(out, c), []byte(c.Expect+"\n"), 0o644)
			continue
		}
		in, _ := c.Inputs()
		want, err := c.Reference(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, ck := range c.Checks {
			os.WriteFile(OutputPath(out, c, ck.Name), want[ck.Name], 0o644)
		}
	}
	if err := WriteGolden(cases, out, golden, "test record"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(golden, "float_math.approx.bin")); err != nil {
		t.Errorf("approximations keep their bytes: %v", err)
	}
	if _, err := os.Stat(filepath.Join(golden, "float_math.exact.bin")); err == nil {
		t.Errorf("exact outputs keep only a digest")
	}
	rep, err := CheckGolden(cases, out, golden)
	if err != nil || rep.Bitwise != 3 || rep.Errors != 1 {
		t.Fatalf("identical outputs: %v, %v", rep, err)
	}

	nudge := func(file string, delta float64) {
		p := filepath.Join(out, file)
		b, _ := os.ReadFile(p)
		f := Get[float32](Mem{"x": b}, "x")
		f[0] = float32(float64(f[0]) + delta)
		m := Mem{"x": b}
		Put(m, "x", f)
		os.WriteFile(p, m["x"], 0o644)
	}
	nudge("float_math.approx.bin", 1e-7) // within tol:1e-6:4e-6
	if rep, err := CheckGolden(cases, out, golden); err != nil || rep.Tolerance != 1 {
		t.Fatalf("approximation within tolerance: %v, %v", rep, err)
	}
	nudge("float_math.approx.bin", 0.5)
	if _, err := CheckGolden(cases, out, golden); err == nil || !strings.Contains(err.Error(), "approx[0]") {
		t.Fatalf("approximation beyond tolerance: %v", err)
	}
	nudge("float_math.approx.bin", -0.5-1e-7)
	p := filepath.Join(out, "scan_warp_inclusive.out.bin")
	b, _ := os.ReadFile(p)
	b[17] ^= 0x40
	os.WriteFile(p, b, 0o644)
	if _, err := CheckGolden(cases, out, golden); err == nil || !strings.Contains(err.Error(), "out differs from the GPU's") {
		t.Fatalf("changed exact output: %v", err)
	}
	b[17] ^= 0x40
	os.WriteFile(p, b, 0o644)

	extra := append(cases, all[0]) // all[0] is not in the record
	if rep, err := CheckGolden(extra, out, golden); err != nil || rep.Missing == 0 {
		t.Errorf("a case absent from the record is counted as missing, not failed: %v, %v", rep, err)
	}
}
