// Package kernels is the kernel corpus's test oracle: it reads the case
// definitions in cases/*.case, generates every input buffer byte for byte,
// computes the expected outputs with a hand-written CPU reference per kernel,
// and compares device outputs against them.
//
// The same cases drive three runners: the Go emulator tests, kernelrun.c on a
// real GPU (golden outputs), and kernelrun.c through gpud on the emulated
// backend. All three must produce inputs identical to [Case.Inputs]; the file
// format and the init patterns are specified in README.md so that the C runner
// can follow it exactly.
//
// Typical use:
//
//	cases, err := kernels.Load("e2e/kernels/cases")
//	for _, c := range cases {
//		in, _ := c.Inputs()             // Mem: buffer and global name -> bytes
//		dev := runOnDevice(c, in)       // the caller's device; same names
//		want, _ := c.Reference(in)      // Mem after c.Launches launches
//		if err := c.Compare(dev, want); err != nil { ... } // *MismatchError
//	}
//
// or, for a directory written by kernelrun (<case>.<buffer>.bin files):
//
//	err := kernels.CheckDir(cases, outDir)
//	err := kernels.CompareDirs(cases, emulatorDir, gpuDir)
//
// [Case.PTXPath] names the PTX file for a target. Every kernel of src/*.cu has
// at least one case and a reference; the package tests enforce that.
package kernels
