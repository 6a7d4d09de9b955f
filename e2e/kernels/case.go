package kernels

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/gpuctl/gpuctl/errs"
)

// Buffer is a device buffer parameter or a module global.
type Buffer struct {
	Name   string
	Type   Type
	Count  int
	Init   Init
	Global bool // a module global (cuModuleGetGlobal), not a kernel parameter
}

// Bytes is the buffer's size in bytes.
func (b *Buffer) Bytes() int { return b.Count * b.Type.Size() }

// Param is one kernel parameter: a device buffer (Buffer != nil) or a scalar.
type Param struct {
	Name   string
	Type   Type
	Buffer *Buffer
	Bits   uint64 // a scalar's value as a little-endian bit pattern
	Raw    []byte // a raw scalar's bytes (a struct passed by value)
	Source string // a scalar's value as written
}

// Value is a scalar parameter's bytes as the kernel receives them.
func (p *Param) Value() []byte {
	if p.Type == Raw {
		return p.Raw
	}
	b := make([]byte, p.Type.Size())
	store(b, p.Type, p.Bits)
	return b
}

// CompareMode is how an output is compared with its reference.
type CompareMode uint8

const (
	Exact CompareMode = iota + 1 // bit for bit (float NaNs match any NaN)
	ULP                          // floats within N units in the last place
	Tol                          // floats with |got-want| <= Abs + Rel*|want|
)

// Check names an output (a buffer parameter or a global) and how to compare it.
type Check struct {
	Name     string
	Mode     CompareMode
	ULPs     uint64
	Abs, Rel float64
	Source   string
}

// Case is one launch configuration of one kernel, with its inputs and the
// outputs to check.
type Case struct {
	Name     string
	Module   string // PTX file stem: ptx/<Module>.sm_XX.ptx
	Kernel   string
	Grid     [3]uint32
	Block    [3]uint32
	Shared   uint32 // dynamic shared memory bytes
	Launches int    // back-to-back launches with the same parameters
	Params   []Param
	Globals  []*Buffer
	Checks   []Check
	Expect   string // a CUDA error name the launch must end with, or ""
	Tags     []string
	Pos      string // file:line of the case line
}

// PTXPath is the PTX file of this case's module for an sm target ("sm_90")
// under dir (usually e2e/kernels/ptx).
func (c *Case) PTXPath(dir, target string) string {
	return filepath.Join(dir, c.Module+"."+target+".ptx")
}

// HasTag reports whether the case carries tag t (e.g. "bench").
func (c *Case) HasTag(t string) bool {
	for _, x := range c.Tags {
		if x == t {
			return true
		}
	}
	return false
}

// Threads is the total number of threads of one launch.
func (c *Case) Threads() int {
	return int(c.Grid[0]) * int(c.Grid[1]) * int(c.Grid[2]) * int(c.Block[0]) * int(c.Block[1]) * int(c.Block[2])
}

// buffer returns the buffer or global called name.
func (c *Case) buffer(name string) *Buffer {
	for _, p := range c.Params {
		if p.Buffer != nil && p.Name == name {
			return p.Buffer
		}
	}
	for _, g := range c.Globals {
		if g.Name == name {
			return g
		}
	}
	return nil
}

func (c *Case) scalar(name string) Param {
	for _, p := range c.Params {
		if p.Buffer == nil && p.Name == name {
			return p
		}
	}
	panic(fmt.Sprintf("case %s has no scalar parameter %q", c.Name, name))
}

// Int returns scalar parameter name as an integer, sign-extended for signed
// types.
func (c *Case) Int(name string) int64 {
	p := c.scalar(name)
	switch p.Type {
	case I8:
		return int64(int8(p.Bits))
	case I16:
		return int64(int16(p.Bits))
	case I32:
		return int64(int32(p.Bits))
	case F32, F64, Raw:
		panic(fmt.Sprintf("case %s: scalar %q is %s, not an integer", c.Name, name, p.Type))
	}
	return int64(p.Bits)
}

// F64 returns scalar parameter name, which must be f64.
func (c *Case) F64(name string) float64 {
	p := c.scalar(name)
	if p.Type != F64 {
		panic(fmt.Sprintf("case %s: scalar %q is %s, not f64", c.Name, name, p.Type))
	}
	return math.Float64frombits(p.Bits)
}

// RawBytes returns raw scalar parameter name's bytes.
func (c *Case) RawBytes(name string) []byte {
	p := c.scalar(name)
	if p.Type != Raw {
		panic(fmt.Sprintf("case %s: scalar %q is %s, not raw", c.Name, name, p.Type))
	}
	return p.Raw
}

// F32 returns scalar parameter name, which must be f32.
func (c *Case) F32(name string) float32 {
	p := c.scalar(name)
	if p.Type != F32 {
		panic(fmt.Sprintf("case %s: scalar %q is %s, not f32", c.Name, name, p.Type))
	}
	return math.Float32frombits(uint32(p.Bits))
}

// maxBufferBytes bounds one buffer, so that a mistyped count fails at load
// time instead of exhausting memory; kernelrun applies the same limit.
const maxBufferBytes = 1 << 30

// maxRawBytes bounds a struct passed by value (CUDA allows 32 KB of
// parameters on recent GPUs; 4 KB is plenty for the corpus).
const maxRawBytes = 4096

var nameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Load parses every *.case file in dir, in name order, and checks that case
// names are unique across files.
func Load(dir string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.case"))
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "case directory %s", dir)
	}
	if len(files) == 0 {
		return nil, errs.New(errs.NotFound, "", "no *.case files in %s", dir)
	}
	sort.Strings(files)
	var all []Case
	seen := map[string]string{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, errs.Wrap(err, errs.NotFound, "", "open case file")
		}
		cs, err := Parse(fh, f)
		fh.Close()
		if err != nil {
			return nil, err
		}
		for _, c := range cs {
			if prev, dup := seen[c.Name]; dup {
				return nil, errs.New(errs.InvalidArgument, caseSubject(c.Name), "%s: defined again (first at %s)", c.Pos, prev)
			}
			seen[c.Name] = c.Pos
		}
		all = append(all, cs...)
	}
	return all, nil
}

func caseSubject(name string) string { return fmt.Sprintf("case %q", name) }

// Parse reads case definitions from r; file names them in errors.
func Parse(r io.Reader, file string) ([]Case, error) {
	var (
		cases []Case
		cur   *Case
		line  int
	)
	fail := func(format string, args ...any) error {
		return errs.New(errs.InvalidArgument, "", "%s:%d: %s", file, line, fmt.Sprintf(format, args...))
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line++
		text, _, _ := strings.Cut(sc.Text(), "#")
		f := strings.Fields(text)
		if len(f) == 0 {
			continue
		}
		if cur == nil {
			if f[0] != "case" || len(f) != 2 || !nameRE.MatchString(f[1]) {
				return nil, fail("expected 'case NAME' (NAME of letters, digits and _), got %q", strings.TrimSpace(text))
			}
			if n := len(cases); n > 0 && cases[n-1].Expect != "" {
				return nil, fail("case %s expects an error that leaves the context unusable, so it must be the last case of its file", cases[n-1].Name)
			}
			cur = &Case{Name: f[1], Launches: 1, Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{1, 1, 1}, Pos: fmt.Sprintf("%s:%d", file, line)}
			continue
		}
		if err := cur.directive(f); err != nil {
			return nil, fail("%v", err)
		}
		if f[0] == "end" {
			if err := cur.validate(); err != nil {
				return nil, fail("case %s: %v", cur.Name, err)
			}
			cases = append(cases, *cur)
			cur = nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "read %s", file)
	}
	if cur != nil {
		return nil, fail("case %s has no 'end'", cur.Name)
	}
	return cases, nil
}

func parseDims(f []string) ([3]uint32, error) {
	d := [3]uint32{1, 1, 1}
	if len(f) < 2 || len(f) > 4 {
		return d, fmt.Errorf("%s takes 1 to 3 sizes", f[0])
	}
	for k, s := range f[1:] {
		v, err := strconv.ParseUint(s, 10, 32)
		if err != nil || v == 0 {
			return d, fmt.Errorf("%s: %q is not a positive integer", f[0], s)
		}
		d[k] = uint32(v)
	}
	return d, nil
}

func (c *Case) directive(f []string) error {
	n := len(f)
	var err error
	switch f[0] {
	case "module", "kernel":
		if n != 2 || !nameRE.MatchString(f[1]) {
			return fmt.Errorf("%s takes one name", f[0])
		}
		if f[0] == "module" {
			c.Module = f[1]
		} else {
			c.Kernel = f[1]
		}
	case "grid":
		c.Grid, err = parseDims(f)
	case "block":
		c.Block, err = parseDims(f)
	case "shared", "launches":
		if n != 2 {
			return fmt.Errorf("%s takes one number", f[0])
		}
		v, perr := strconv.ParseUint(f[1], 10, 32)
		if perr != nil {
			return fmt.Errorf("%s: %q is not a non-negative integer", f[0], f[1])
		}
		if f[0] == "shared" {
			c.Shared = uint32(v)
		} else {
			c.Launches = int(v)
		}
	case "buf", "global":
		if n != 5 {
			return fmt.Errorf("%s takes NAME TYPE COUNT INIT", f[0])
		}
		b := &Buffer{Name: f[1], Global: f[0] == "global"}
		if !nameRE.MatchString(b.Name) {
			return fmt.Errorf("bad name %q", b.Name)
		}
		if c.buffer(b.Name) != nil || c.hasScalar(b.Name) {
			return fmt.Errorf("name %q used twice", b.Name)
		}
		if b.Type, err = parseType(f[2]); err != nil {
			return err
		}
		if b.Type == Raw {
			return fmt.Errorf("raw is for scalar parameters (structs by value), not buffers")
		}
		cnt, perr := strconv.ParseUint(f[3], 10, 31)
		if perr != nil || cnt == 0 {
			return fmt.Errorf("count %q is not a positive integer", f[3])
		}
		b.Count = int(cnt)
		if b.Bytes() > maxBufferBytes {
			return fmt.Errorf("%s %s is %d bytes; a case buffer holds at most %d", f[0], b.Name, b.Bytes(), maxBufferBytes)
		}
		if b.Init, err = parseInit(f[4]); err != nil {
			return err
		}
		if b.Init.Kind == InitKeep && !b.Global {
			return fmt.Errorf("keep is for globals only: a buffer has no initializer of its own")
		}
		if err := b.Init.check(b.Type); err != nil {
			return err
		}
		if b.Global {
			c.Globals = append(c.Globals, b)
		} else {
			c.Params = append(c.Params, Param{Name: b.Name, Type: b.Type, Buffer: b})
		}
	case "scalar":
		if n != 4 {
			return fmt.Errorf("scalar takes NAME TYPE VALUE")
		}
		if !nameRE.MatchString(f[1]) || c.buffer(f[1]) != nil || c.hasScalar(f[1]) {
			return fmt.Errorf("bad or repeated name %q", f[1])
		}
		t, err := parseType(f[2])
		if err != nil {
			return err
		}
		if t == Raw {
			raw, err := hex.DecodeString(f[3])
			if err != nil || len(raw) == 0 || len(raw) > maxRawBytes {
				return fmt.Errorf("raw scalar %q: want 1 to %d bytes as an even number of hex digits", f[1], maxRawBytes)
			}
			c.Params = append(c.Params, Param{Name: f[1], Type: Raw, Raw: raw, Source: f[3]})
			return nil
		}
		bits, err := parseValue(t, f[3])
		if err != nil {
			return err
		}
		c.Params = append(c.Params, Param{Name: f[1], Type: t, Bits: bits, Source: f[3]})
	case "check":
		if n != 3 {
			return fmt.Errorf("check takes NAME COMPARE")
		}
		b := c.buffer(f[1])
		if b == nil {
			return fmt.Errorf("check %q: no buffer or global of that name (declare it first)", f[1])
		}
		ck, err := parseCheck(f[1], f[2], b.Type)
		if err != nil {
			return err
		}
		c.Checks = append(c.Checks, ck)
	case "expect":
		if n != 2 || !strings.HasPrefix(f[1], "CUDA_ERROR_") {
			return fmt.Errorf("expect takes one CUDA error name, e.g. CUDA_ERROR_ILLEGAL_ADDRESS")
		}
		c.Expect = f[1]
	case "tags":
		c.Tags = append(c.Tags, f[1:]...)
	case "end":
		if n != 1 {
			return fmt.Errorf("end takes nothing")
		}
	default:
		return fmt.Errorf("unknown directive %q (want module, kernel, grid, block, shared, launches, buf, scalar, global, check, expect, tags or end)", f[0])
	}
	return err
}

func (c *Case) hasScalar(name string) bool {
	for _, p := range c.Params {
		if p.Buffer == nil && p.Name == name {
			return true
		}
	}
	return false
}

func parseCheck(name, s string, t Type) (Check, error) {
	ck := Check{Name: name, Source: s}
	mode, arg, _ := strings.Cut(s, ":")
	switch mode {
	case "exact":
		ck.Mode = Exact
		if arg != "" {
			return ck, fmt.Errorf("exact takes no argument")
		}
		return ck, nil
	case "ulp":
		ck.Mode = ULP
		v, err := strconv.ParseUint(arg, 10, 32)
		if err != nil {
			return ck, fmt.Errorf("ulp:N needs a count, got %q", s)
		}
		ck.ULPs = v
	case "tol":
		ck.Mode = Tol
		a, r, ok := strings.Cut(arg, ":")
		var err1, err2 error
		ck.Abs, err1 = strconv.ParseFloat(a, 64)
		ck.Rel, err2 = strconv.ParseFloat(r, 64)
		if !ok || err1 != nil || err2 != nil || ck.Abs < 0 || ck.Rel < 0 {
			return ck, fmt.Errorf("tol:ABS:REL needs two non-negative numbers, got %q", s)
		}
	default:
		return ck, fmt.Errorf("unknown comparison %q (want exact, ulp:N or tol:ABS:REL)", s)
	}
	if !t.IsFloat() {
		return ck, fmt.Errorf("%s compares integers, which must be exact", name)
	}
	return ck, nil
}

func (c *Case) validate() error {
	switch {
	case c.Module == "":
		return fmt.Errorf("no module")
	case c.Kernel == "":
		return fmt.Errorf("no kernel")
	case c.Launches < 1:
		return fmt.Errorf("launches must be at least 1")
	case len(c.Checks) > 0 && c.Expect != "":
		return fmt.Errorf("a case that expects an error has no outputs to check")
	}
	threads := uint64(c.Block[0]) * uint64(c.Block[1]) * uint64(c.Block[2])
	if threads > 1024 {
		return fmt.Errorf("block of %d threads exceeds 1024", threads)
	}
	return nil
}
