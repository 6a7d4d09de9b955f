// Command kernelcheck checks a directory of kernel outputs written by
// kernelrun (or the emulator tests) against the corpus's CPU references, or
// against another such directory.
//
//	kernelcheck -out DIR                  # against the CPU references
//	kernelcheck -out DIR -against GOLDEN  # e.g. the emulator's outputs against a GPU's
//
// It exits 0 when everything matches and 1 with one line per failing case
// otherwise.
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
	against := flag.String("against", "", "compare with this directory instead of the CPU references")
	casesDir := flag.String("cases", defaultCases(), "directory of *.case files")
	skipTag := flag.String("skip-tag", "", "leave out cases with this tag (e.g. bench)")
	flag.Parse()
	if *out == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: kernelcheck -out DIR [-against DIR] [-cases DIR] [-skip-tag TAG]")
		os.Exit(2)
	}
	if err := run(*casesDir, *out, *against, *skipTag); err != nil {
		fmt.Fprintln(os.Stderr, "kernelcheck:", err)
		os.Exit(1)
	}
}

func run(casesDir, out, against, skipTag string) error {
	all, err := kernels.Load(casesDir)
	if err != nil {
		return err
	}
	var cases []kernels.Case
	for _, c := range all {
		if skipTag == "" || !c.HasTag(skipTag) {
			cases = append(cases, c)
		}
	}
	if against != "" {
		err = kernels.CompareDirs(cases, out, against)
	} else {
		err = kernels.CheckDir(cases, out)
	}
	if err != nil {
		return err
	}
	what := "the CPU references"
	if against != "" {
		what = against
	}
	fmt.Printf("kernelcheck: %d case(s) in %s match %s\n", len(cases), out, what)
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
