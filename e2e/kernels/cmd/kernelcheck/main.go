// Command kernelcheck checks a directory of kernel outputs written by
// kernelrun (or the emulator tests) against the corpus's CPU references,
// against another such directory, or against a golden record of a GPU run.
//
//	kernelcheck -out DIR                        # against the CPU references
//	kernelcheck -out DIR -against OTHER         # e.g. the emulator's against a GPU's
//	kernelcheck -out DIR -golden GOLDEN         # against a recorded GPU run
//	kernelcheck -out GPUDIR -write-golden GOLDEN -note "nvcc 13.0, H200"
//
// -write-golden records DIR as the golden set (digests of exact outputs,
// bytes of approximations) and then checks DIR against the CPU references,
// reporting any disagreement; the record is written either way, because it
// holds what the hardware did. Exit status: 0 when everything matches, 1 on
// a mismatch, 2 for bad usage.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuctl/gpuctl/e2e/kernels"
)

func main() {
	out := flag.String("out", "", "directory of <case>.<buffer>.bin outputs to check (required)")
	against := flag.String("against", "", "compare with this output directory instead of the CPU references")
	golden := flag.String("golden", "", "compare with this golden directory (MANIFEST) instead of the CPU references")
	writeGolden := flag.String("write-golden", "", "record -out as the golden set in this directory, then check it against the CPU references")
	note := flag.String("note", "", "with -write-golden: a comment for the manifest's header (compiler, GPU, driver)")
	casesDir := flag.String("cases", defaultCases(), "directory of *.case files")
	skipTag := flag.String("skip-tag", "", "leave out cases with this tag (e.g. bench)")
	flag.Parse()
	modes := 0
	for _, s := range []string{*against, *golden, *writeGolden} {
		if s != "" {
			modes++
		}
	}
	if *out == "" || flag.NArg() != 0 || modes > 1 {
		fmt.Fprintln(os.Stderr, "usage: kernelcheck -out DIR [-against DIR | -golden DIR | -write-golden DIR [-note TEXT]] [-cases DIR] [-skip-tag TAG]")
		os.Exit(2)
	}
	cases, err := load(*casesDir, *skipTag)
	if err == nil {
		err = run(cases, *out, *against, *golden, *writeGolden, *note)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kernelcheck:", err)
		os.Exit(1)
	}
}

func load(dir, skipTag string) ([]kernels.Case, error) {
	all, err := kernels.Load(dir)
	if err != nil {
		return nil, err
	}
	var cases []kernels.Case
	for _, c := range all {
		if skipTag == "" || !c.HasTag(skipTag) {
			cases = append(cases, c)
		}
	}
	return cases, nil
}

func run(cases []kernels.Case, out, against, golden, writeGolden, note string) error {
	switch {
	case against != "":
		if err := kernels.CompareDirs(cases, out, against); err != nil {
			return err
		}
		fmt.Printf("kernelcheck: %d case(s) in %s match %s\n", len(cases), out, against)
	case golden != "":
		rep, err := kernels.CheckGolden(cases, out, golden)
		if err != nil {
			return err
		}
		fmt.Printf("kernelcheck: %s matches the GPU record %s: %s\n", out, golden, rep)
	default:
		if writeGolden != "" {
			if err := kernels.WriteGolden(cases, out, writeGolden, note); err != nil {
				return err
			}
			fmt.Printf("kernelcheck: recorded %s as the golden set %s\n", out, writeGolden)
		}
		if err := kernels.CheckDir(cases, out); err != nil {
			return err
		}
		fmt.Printf("kernelcheck: %d case(s) in %s match the CPU references\n", len(cases), out)
	}
	return nil
}

// defaultCases finds e2e/kernels/cases from the repository root or from the
// package directory.
func defaultCases() string {
	for _, d := range []string{"e2e/kernels/cases", "cases"} {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return d
		}
	}
	return filepath.Join("e2e", "kernels", "cases")
}
