package kernels

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuctl/gpuctl/errs"
)

// A golden directory records what a real GPU produced for the corpus, so
// that CI can hold the emulator to the hardware without a GPU:
//
//	golden/<target>/MANIFEST         one line per output:
//	                                 "<case>.<name>.bin sha256:<hex> <bytes>" or
//	                                 "<case>.error <CUDA error name>"
//	golden/<target>/<case>.<name>.bin  the GPU's bytes, kept only for outputs
//	                                   compared with a tolerance (ulp/tol)
//
// Outputs compared exactly need only their digest: the emulator must
// reproduce them bit for bit. Approximations keep their bytes, because the
// emulator need only come within the tolerance of the hardware.

const manifestName = "MANIFEST"

// WriteGolden records the outputs a runner wrote under outDir (usually a
// GPU's) into goldenDir, replacing its manifest. Cases whose outputs are
// missing are an error: a golden directory is all or nothing.
func WriteGolden(cases []Case, outDir, goldenDir, header string) error {
	if err := os.MkdirAll(goldenDir, 0o755); err != nil {
		return errs.Wrap(err, errs.Internal, "", "golden directory")
	}
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(header), "\n") {
		if line != "" {
			fmt.Fprintf(&b, "# %s\n", line)
		}
	}
	for i := range cases {
		c := &cases[i]
		if c.Expect != "" {
			rec, err := os.ReadFile(ErrorPath(outDir, c))
			if err != nil {
				return errs.Wrap(err, errs.NotFound, caseSubject(c.Name), "error record")
			}
			fmt.Fprintf(&b, "%s.error %s\n", c.Name, strings.TrimSpace(string(rec)))
			continue
		}
		for _, ck := range c.Checks {
			data, err := os.ReadFile(OutputPath(outDir, c, ck.Name))
			if err != nil {
				return errs.Wrap(err, errs.NotFound, caseSubject(c.Name), "output %s", ck.Name)
			}
			file := filepath.Base(OutputPath(outDir, c, ck.Name))
			sum := sha256.Sum256(data)
			fmt.Fprintf(&b, "%s sha256:%s %d\n", file, hex.EncodeToString(sum[:]), len(data))
			if ck.Mode != Exact {
				if err := os.WriteFile(filepath.Join(goldenDir, file), data, 0o644); err != nil {
					return errs.Wrap(err, errs.Internal, caseSubject(c.Name), "golden copy of %s", ck.Name)
				}
			}
		}
	}
	return os.WriteFile(filepath.Join(goldenDir, manifestName), []byte(b.String()), 0o644)
}

// GoldenReport says how a directory of outputs compared with a golden one.
type GoldenReport struct {
	Bitwise   int // outputs equal to the GPU's bit for bit
	Tolerance int // approximations within their tolerance of the GPU's
	Errors    int // expected errors that matched
	Missing   int // cases the golden directory does not record (newer than it)
}

func (r GoldenReport) String() string {
	return fmt.Sprintf("%d outputs bit-identical, %d approximations within tolerance, %d errors identical; %d outputs not in the golden set",
		r.Bitwise, r.Tolerance, r.Errors, r.Missing)
}

// CheckGolden compares the outputs under gotDir with goldenDir's record of a
// GPU run. Exact outputs must have the GPU's digest; approximations must be
// within their check's tolerance of the GPU's bytes; expected errors must be
// the same error. Outputs of cases in cases but not in the manifest are
// counted as missing, not failed, so that new cases do not need a new GPU run
// before they can land.
func CheckGolden(cases []Case, gotDir, goldenDir string) (GoldenReport, error) {
	var rep GoldenReport
	manifest, err := readManifest(filepath.Join(goldenDir, manifestName))
	if err != nil {
		return rep, err
	}
	var fails []string
	for i := range cases {
		c := &cases[i]
		if c.Expect != "" {
			want, ok := manifest[c.Name+".error"]
			if !ok {
				rep.Missing++
				continue
			}
			got, err := os.ReadFile(ErrorPath(gotDir, c))
			switch {
			case err != nil:
				fails = append(fails, fmt.Sprintf("case %q: %v", c.Name, err))
			case strings.TrimSpace(string(got)) != want[0]:
				fails = append(fails, fmt.Sprintf("case %q: error %s, the GPU's was %s", c.Name, strings.TrimSpace(string(got)), want[0]))
			default:
				rep.Errors++
			}
			continue
		}
		for _, ck := range c.Checks {
			file := filepath.Base(OutputPath(gotDir, c, ck.Name))
			want, ok := manifest[file]
			if !ok {
				rep.Missing++
				continue
			}
			got, err := os.ReadFile(filepath.Join(gotDir, file))
			if err != nil {
				fails = append(fails, fmt.Sprintf("case %q: %v", c.Name, err))
				continue
			}
			sum := sha256.Sum256(got)
			if "sha256:"+hex.EncodeToString(sum[:]) == want[0] {
				rep.Bitwise++
				continue
			}
			if ck.Mode == Exact {
				fails = append(fails, fmt.Sprintf("case %q: %s differs from the GPU's (exact output; %d bytes, the GPU's had %s)", c.Name, ck.Name, len(got), want[1]))
				continue
			}
			gpu, err := os.ReadFile(filepath.Join(goldenDir, file))
			if err != nil {
				fails = append(fails, fmt.Sprintf("case %q: the golden set lacks the GPU's bytes of %s: %v", c.Name, ck.Name, err))
				continue
			}
			if err := c.CompareBuffer(ck.Name, got, gpu); err != nil {
				fails = append(fails, "against the GPU: "+err.Error())
				continue
			}
			rep.Tolerance++
		}
	}
	if len(fails) > 0 {
		return rep, errs.New(errs.FailedPrecondition, "", "%d output(s) differ from the GPU's (%s):\n  %s", len(fails), goldenDir, strings.Join(fails, "\n  "))
	}
	return rep, nil
}

// readManifest maps each recorded file to its fields after the name.
func readManifest(path string) (map[string][]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errs.Wrap(err, errs.NotFound, "", "golden manifest")
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if len(fields) < 2 || (strings.HasSuffix(fields[0], ".bin") && len(fields) != 3) {
			return nil, errs.New(errs.InvalidArgument, "", "%s:%d: want \"FILE sha256:HEX BYTES\" or \"CASE.error NAME\"", path, line)
		}
		out[fields[0]] = fields[1:]
	}
	if err := sc.Err(); err != nil {
		return nil, errs.Wrap(err, errs.Internal, "", "read %s", path)
	}
	return out, nil
}
