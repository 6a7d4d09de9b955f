package kernels

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuctl/gpuctl/errs"
)

// MismatchError is an output that differs from its reference.
type MismatchError struct {
	Case, Buffer string
	Index        int // element index; -1 for a size mismatch
	Got, Want    string
	Rule         string // the comparison that failed
	Bad          int    // how many elements differ in total
}

func (e *MismatchError) Error() string {
	if e.Index < 0 {
		return fmt.Sprintf("case %q: buffer %s: size %s, want %s", e.Case, e.Buffer, e.Got, e.Want)
	}
	return fmt.Sprintf("case %q: buffer %s[%d]: got %s, want %s (%s; %d element(s) differ)", e.Case, e.Buffer, e.Index, e.Got, e.Want, e.Rule, e.Bad)
}

// Compare checks every output of c in got against want (usually the result of
// [Case.Reference]) and returns a *MismatchError for the first difference.
func (c *Case) Compare(got, want Mem) error {
	for _, ck := range c.Checks {
		if err := c.CompareBuffer(ck.Name, got[ck.Name], want[ck.Name]); err != nil {
			return err
		}
	}
	return nil
}

// CompareBuffer compares one output buffer or global by its check rule.
func (c *Case) CompareBuffer(name string, got, want []byte) error {
	var ck *Check
	for i := range c.Checks {
		if c.Checks[i].Name == name {
			ck = &c.Checks[i]
		}
	}
	b := c.buffer(name)
	if ck == nil || b == nil {
		return errs.New(errs.InvalidArgument, caseSubject(c.Name), "%s is not a checked output", name)
	}
	if len(got) != len(want) {
		return &MismatchError{Case: c.Name, Buffer: name, Index: -1, Got: fmt.Sprint(len(got)), Want: fmt.Sprint(len(want))}
	}
	t := b.Type
	size := t.Size()
	var first *MismatchError
	for i := 0; i < len(got)/size; i++ {
		g, w := load(got[i*size:], t), load(want[i*size:], t)
		if g == w || elemOK(ck, t, g, w) {
			continue
		}
		if first == nil {
			first = &MismatchError{Case: c.Name, Buffer: name, Index: i, Got: formatElem(t, g), Want: formatElem(t, w), Rule: ck.Source}
		}
		first.Bad++
	}
	if first != nil {
		return first
	}
	return nil
}

func elemOK(ck *Check, t Type, g, w uint64) bool {
	if !t.IsFloat() {
		return false
	}
	gf, wf := toF64(t, g), toF64(t, w)
	if math.IsNaN(gf) || math.IsNaN(wf) {
		return math.IsNaN(gf) && math.IsNaN(wf)
	}
	switch ck.Mode {
	case ULP:
		if math.IsInf(gf, 0) || math.IsInf(wf, 0) {
			return gf == wf
		}
		return ulpDistance(t, g, w) <= ck.ULPs
	case Tol:
		if math.IsInf(gf, 0) || math.IsInf(wf, 0) {
			return gf == wf
		}
		return math.Abs(gf-wf) <= ck.Abs+ck.Rel*math.Abs(wf)
	}
	return false // Exact: the bits differ, and NaN was handled above
}

func toF64(t Type, bits uint64) float64 {
	if t == F32 {
		return float64(math.Float32frombits(uint32(bits)))
	}
	return math.Float64frombits(bits)
}

// ulpDistance counts representable values between two finite floats of the
// same type, across zero.
func ulpDistance(t Type, a, b uint64) uint64 {
	ord := func(x uint64) int64 {
		if t == F32 {
			v := int64(int32(uint32(x)))
			if v < 0 {
				v = math.MinInt32 - v
			}
			return v
		}
		v := int64(x)
		if v < 0 {
			v = math.MinInt64 - v
		}
		return v
	}
	d := ord(a) - ord(b)
	if d < 0 {
		d = -d
	}
	return uint64(d)
}

// OutputPath is where a runner writes output name of case c under dir.
func OutputPath(dir string, c *Case, name string) string {
	return filepath.Join(dir, c.Name+"."+name+".bin")
}

// ErrorPath is where a runner writes the CUDA error name of a case that
// expects one.
func ErrorPath(dir string, c *Case) string {
	return filepath.Join(dir, c.Name+".error")
}

// ReadOutputs reads every checked output of c that a runner wrote under dir.
func ReadOutputs(dir string, c *Case) (Mem, error) {
	m := Mem{}
	for _, ck := range c.Checks {
		b, err := os.ReadFile(OutputPath(dir, c, ck.Name))
		if err != nil {
			return nil, errs.Wrap(err, errs.NotFound, caseSubject(c.Name), "output %s", ck.Name)
		}
		m[ck.Name] = b
	}
	return m, nil
}

// CheckDir checks a runner's output directory against the CPU references:
// every checked output of every case must be present and match; a case that
// expects an error must have recorded exactly that error. Cases whose module
// the runner skipped are reported too. It returns all failures joined.
func CheckDir(cases []Case, dir string) error {
	var fails []string
	for i := range cases {
		c := &cases[i]
		if err := c.checkOne(dir); err != nil {
			fails = append(fails, err.Error())
		}
	}
	if len(fails) > 0 {
		return errs.New(errs.FailedPrecondition, "", "%d of %d case(s) failed:\n  %s", len(fails), len(cases), strings.Join(fails, "\n  "))
	}
	return nil
}

func (c *Case) checkOne(dir string) error {
	if c.Expect != "" {
		b, err := os.ReadFile(ErrorPath(dir, c))
		if err != nil {
			return errs.Wrap(err, errs.NotFound, caseSubject(c.Name), "expected error record")
		}
		if got := strings.TrimSpace(string(b)); got != c.Expect {
			return errs.New(errs.FailedPrecondition, caseSubject(c.Name), "launch ended with %s, want %s", got, c.Expect)
		}
		return nil
	}
	in, err := c.Inputs()
	if err != nil {
		return err
	}
	want, err := c.Reference(in)
	if err != nil {
		return err
	}
	got, err := ReadOutputs(dir, c)
	if err != nil {
		return err
	}
	return c.Compare(got, want)
}

// CompareDirs compares two runners' output directories with each other (for
// example the emulator's against the GPU's), output by output, using each
// check's rule. Cases that expect an error must have recorded the same error.
func CompareDirs(cases []Case, gotDir, wantDir string) error {
	var fails []string
	for i := range cases {
		c := &cases[i]
		var err error
		if c.Expect != "" {
			var g, w []byte
			if g, err = os.ReadFile(ErrorPath(gotDir, c)); err == nil {
				if w, err = os.ReadFile(ErrorPath(wantDir, c)); err == nil && strings.TrimSpace(string(g)) != strings.TrimSpace(string(w)) {
					err = errs.New(errs.FailedPrecondition, caseSubject(c.Name), "error %s, want %s", strings.TrimSpace(string(g)), strings.TrimSpace(string(w)))
				}
			}
		} else {
			var got, want Mem
			if got, err = ReadOutputs(gotDir, c); err == nil {
				if want, err = ReadOutputs(wantDir, c); err == nil {
					err = c.Compare(got, want)
				}
			}
		}
		if err != nil {
			fails = append(fails, err.Error())
		}
	}
	if len(fails) > 0 {
		return errs.New(errs.FailedPrecondition, "", "%d of %d case(s) differ:\n  %s", len(fails), len(cases), strings.Join(fails, "\n  "))
	}
	return nil
}
