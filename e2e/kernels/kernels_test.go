package kernels

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

func loadCorpus(t *testing.T) []Case {
	t.Helper()
	cases, err := Load("cases")
	if err != nil {
		t.Fatal(err)
	}
	return cases
}

var kernelRE = regexp.MustCompile(`extern "C" __global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(`)

// sourceKernels maps each kernel of src/*.cu to its module (file stem).
func sourceKernels(t *testing.T) map[string]string {
	t.Helper()
	files, err := filepath.Glob("src/*.cu")
	if err != nil || len(files) == 0 {
		t.Fatalf("no sources: %v", err)
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range kernelRE.FindAllStringSubmatch(string(b), -1) {
			if prev, dup := out[m[1]]; dup {
				t.Errorf("kernel %s defined in %s and %s", m[1], prev, f)
			}
			out[m[1]] = strings.TrimSuffix(filepath.Base(f), ".cu")
		}
	}
	return out
}

// TestCorpusCoverage: every kernel has a case, every case names a kernel of
// its module, and every case that checks outputs has a reference.
func TestCorpusCoverage(t *testing.T) {
	src := sourceKernels(t)
	if len(src) < 25 {
		t.Fatalf("only %d kernels in src/", len(src))
	}
	covered := map[string]bool{}
	for _, c := range loadCorpus(t) {
		mod, ok := src[c.Kernel]
		switch {
		case !ok:
			t.Errorf("%s: kernel %s is not in src/*.cu", c.Pos, c.Kernel)
		case mod != c.Module:
			t.Errorf("%s: kernel %s is in module %s, case says %s", c.Pos, c.Kernel, mod, c.Module)
		}
		if c.Expect == "" && !HasReference(c.Kernel) {
			t.Errorf("%s: kernel %s has no reference", c.Pos, c.Kernel)
		}
		covered[c.Kernel] = true
	}
	for k, mod := range src {
		if !covered[k] {
			t.Errorf("kernel %s (%s.cu) has no case", k, mod)
		}
	}
	for k := range references {
		if _, ok := src[k]; !ok {
			t.Errorf("reference for %s, which no source defines", k)
		}
	}
}

// TestCorpusReferences runs every reference on its generated inputs and
// requires that the launch changes at least one checked output, so that a
// reference that does nothing cannot pass.
func TestCorpusReferences(t *testing.T) {
	for _, c := range loadCorpus(t) {
		t.Run(c.Name, func(t *testing.T) {
			in, err := c.Inputs()
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range c.Params {
				if p.Buffer != nil && len(in[p.Name]) != p.Buffer.Bytes() {
					t.Fatalf("input %s: %d bytes, want %d", p.Name, len(in[p.Name]), p.Buffer.Bytes())
				}
			}
			if c.Expect != "" {
				if _, err := c.Reference(in); !errs.IsFailedPrecondition(err) {
					t.Fatalf("Reference of an expected-error case: %v, want failed_precondition", err)
				}
				return
			}
			out, err := c.Reference(in)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Checks) == 0 {
				return
			}
			changed := false
			for _, ck := range c.Checks {
				if before, ok := in[ck.Name]; !ok || !slices.Equal(before, out[ck.Name]) {
					changed = true
				}
			}
			if !changed {
				t.Errorf("no checked output differs from its input")
			}
			if err := c.Compare(out, out); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestInitPatterns(t *testing.T) {
	tests := []struct {
		typ  Type
		init string
		want []uint64 // bit patterns of the first elements
	}{
		// Marsaglia's xorshift32 from seed 1: 270369, 67634689, 2647435461.
		{U32, "rand:1", []uint64{270369, 67634689, 2647435461}},
		{U64, "rand:7", []uint64{0x1c099207001ce0e7}},
		{I32, "randi:7:-5:5", []uint64{0xfffffffb, 1, 0xffffffff}},
		{U8, "randi:7:0:255", []uint64{1892583 & 0xff}},
		{F32, "randf:7:-1:1", []uint64{0xbf7fc640, 0xbf47ecdc}},
		{F64, "randf:7:-1:1", []uint64{math.Float64bits(-0.9991186989915217)}},
		{F32, "randi:7:-5:5", []uint64{uint64(math.Float32bits(-5)), uint64(math.Float32bits(1))}},
		{I16, "seq:-2:3", []uint64{0xfffe, 1, 4}},
		{F32, "seq:0.5:0.25", []uint64{uint64(math.Float32bits(0.5)), uint64(math.Float32bits(0.75))}},
		{U32, "const:0xdeadbeef", []uint64{0xdeadbeef, 0xdeadbeef}},
		{U32, "const:-1", []uint64{0xffffffff}},
		{F32, "list:1.5,nan,-inf", []uint64{0x3fc00000, 0x7fc00000, 0xff800000, 0x3fc00000}},
		{F64, "list:0.1", []uint64{0x3fb999999999999a}},
		{I64, "list:-9223372036854775808", []uint64{1 << 63}},
		{U32, "zero", []uint64{0, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.typ.String()+"/"+tt.init, func(t *testing.T) {
			in, err := parseInit(tt.init)
			if err != nil {
				t.Fatal(err)
			}
			if err := in.check(tt.typ); err != nil {
				t.Fatal(err)
			}
			b := in.generate(tt.typ, len(tt.want))
			for i, w := range tt.want {
				if g := load(b[i*tt.typ.Size():], tt.typ); g != w {
					t.Errorf("element %d = %#x, want %#x", i, g, w)
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	const head = "case c\n module m\n kernel k\n"
	tests := []struct{ name, text, want string }{
		{"no case line", "kernel k\n", "expected 'case NAME'"},
		{"unknown directive", head + " frob 1\nend\n", "unknown directive"},
		{"no end", head, "has no 'end'"},
		{"no kernel", "case c\n module m\nend\n", "no kernel"},
		{"bad type", head + " buf a i33 4 zero\nend\n", "unknown type"},
		{"zero count", head + " buf a i32 0 zero\nend\n", "not a positive integer"},
		{"rand on floats", head + " buf a f32 4 rand:1\nend\n", "use randf"},
		{"randf on ints", head + " buf a i32 4 randf:1:0:1\nend\n", "use randi"},
		{"seed zero", head + " buf a i32 4 rand:0\nend\n", "seed must be"},
		{"randi reversed", head + " buf a i32 4 randi:1:5:-5\nend\n", "LO <= HI"},
		{"bad const", head + " buf a i32 4 const:1.5\nend\n", "bad i32 literal"},
		{"octal", head + " scalar n i32 010\nend\n", "leading zero"},
		{"keep on buffer", head + " buf a i32 4 keep\nend\n", "keep is for globals"},
		{"duplicate name", head + " buf a i32 4 zero\n scalar a i32 1\nend\n", "repeated name"},
		{"check unknown", head + " check a exact\nend\n", "no buffer or global"},
		{"tolerance on ints", head + " buf a i32 4 zero\n check a ulp:1\nend\n", "must be exact"},
		{"bad tolerance", head + " buf a f32 4 zero\n check a tol:x:1\nend\n", "tol:ABS:REL"},
		{"big block", head + " block 1024 2\nend\n", "exceeds 1024"},
		{"expect then outputs", head + " buf a f32 4 zero\n check a exact\n expect CUDA_ERROR_ILLEGAL_ADDRESS\nend\n", "no outputs"},
		{"case after expect", head + " expect CUDA_ERROR_ILLEGAL_ADDRESS\nend\ncase d\n module m\n kernel k\nend\n", "must be the last case"},
		{"bad expect", head + " expect ILLEGAL\nend\n", "CUDA error name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.text), "t.case")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
			if !errs.IsInvalidArgument(err) {
				t.Errorf("kind %s, want invalid_argument", errs.KindOf(err))
			}
			if !strings.Contains(err.Error(), "t.case:") {
				t.Errorf("error %q does not name the file and line", err)
			}
		})
	}
}

func TestParseCase(t *testing.T) {
	text := `# comment
case full   # trailing comment
  module mod
  kernel k
  grid 2 3
  block 32 2 1
  shared 256
  launches 2
  buf in f32 8 randf:1:0:1
  scalar n i32 -8
  scalar a f32 0.5
  buf out u64 4 zero
  global g i32 1 keep
  check out exact
  check in ulp:2
  check g exact
  tags bench slow
end
`
	cs, err := Parse(strings.NewReader(text), "t.case")
	if err != nil {
		t.Fatal(err)
	}
	c := cs[0]
	switch {
	case c.Name != "full" || c.Module != "mod" || c.Kernel != "k":
		t.Errorf("names %q %q %q", c.Name, c.Module, c.Kernel)
	case c.Grid != [3]uint32{2, 3, 1} || c.Block != [3]uint32{32, 2, 1} || c.Threads() != 384:
		t.Errorf("dims %v %v", c.Grid, c.Block)
	case c.Shared != 256 || c.Launches != 2:
		t.Errorf("shared %d launches %d", c.Shared, c.Launches)
	case len(c.Params) != 4 || c.Params[1].Name != "n" || c.Int("n") != -8 || c.F32("a") != 0.5:
		t.Errorf("params %+v", c.Params)
	case len(c.Globals) != 1 || !c.Globals[0].Global || len(c.Checks) != 3 || c.Checks[1].ULPs != 2:
		t.Errorf("globals %+v checks %+v", c.Globals, c.Checks)
	case !c.HasTag("slow") || c.HasTag("fast"):
		t.Errorf("tags %v", c.Tags)
	case c.PTXPath("ptx", "sm_90") != filepath.Join("ptx", "mod.sm_90.ptx"):
		t.Errorf("PTXPath %s", c.PTXPath("ptx", "sm_90"))
	}
}

func f32b(f float32) []byte { return le(f) }

func TestCompare(t *testing.T) {
	cs, err := Parse(strings.NewReader(`case cmp
  module m
  kernel k
  buf e f32 1 zero
  buf u f32 1 zero
  buf t f32 1 zero
  buf i i32 1 zero
  check e exact
  check u ulp:2
  check t tol:0.01:0.1
  check i exact
end
`), "t.case")
	if err != nil {
		t.Fatal(err)
	}
	c := &cs[0]
	next := func(f float32, k int) float32 {
		for range k {
			f = math.Nextafter32(f, float32(math.Inf(1)))
		}
		return f
	}
	nan := float32(math.NaN())
	other := math.Float32frombits(0x7fc00001)
	tests := []struct {
		buf       string
		got, want []byte
		ok        bool
	}{
		{"e", f32b(1), f32b(1), true},
		{"e", f32b(next(1, 1)), f32b(1), false},
		{"e", f32b(float32(math.Copysign(0, -1))), f32b(0), false},
		{"e", f32b(nan), f32b(other), true},
		{"e", f32b(nan), f32b(1), false},
		{"u", f32b(next(1, 2)), f32b(1), true},
		{"u", f32b(next(1, 3)), f32b(1), false},
		{"u", f32b(next(-1e-45, 2)), f32b(-1e-45), true}, // across zero
		{"u", f32b(float32(math.Inf(1))), f32b(math.MaxFloat32), false},
		{"t", f32b(10.5), f32b(10), true},
		{"t", f32b(11.02), f32b(10), false},
		{"t", f32b(0.009), f32b(0), true},
		{"i", le[int32](5), le[int32](5), true},
		{"i", le[int32](5), le[int32](6), false},
		{"i", le[int32](5, 5), le[int32](5), false},
	}
	for _, tt := range tests {
		err := c.CompareBuffer(tt.buf, tt.got, tt.want)
		if (err == nil) != tt.ok {
			t.Errorf("%s: got %x want %x: err %v, want ok=%v", tt.buf, tt.got, tt.want, err, tt.ok)
		}
		var me *MismatchError
		if err != nil && (!errors.As(err, &me) || me.Case != "cmp" || me.Buffer != tt.buf) {
			t.Errorf("%s: error %v does not name case and buffer", tt.buf, err)
		}
	}
}

// TestCheckDir writes outputs the way kernelrun does and checks them: the
// reference passes, a one-bit change fails naming the element, a missing file
// fails, and an expected error must match.
func TestCheckDir(t *testing.T) {
	all := loadCorpus(t)
	pick := func(name string) Case {
		for _, c := range all {
			if c.Name == name {
				return c
			}
		}
		t.Fatalf("no case %s", name)
		return Case{}
	}
	cases := []Case{pick("scan_warp_inclusive"), pick("use_globals"), pick("oob_write")}
	dir := t.TempDir()
	for i := range cases[:2] {
		c := &cases[i]
		in, _ := c.Inputs()
		want, err := c.Reference(in)
		if err != nil {
			t.Fatal(err)
		}
		for _, ck := range c.Checks {
			if err := os.WriteFile(OutputPath(dir, c, ck.Name), want[ck.Name], 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := CheckDir(cases[:2], dir); err != nil {
		t.Fatalf("reference outputs: %v", err)
	}
	if err := CheckDir(cases, dir); err == nil || !strings.Contains(err.Error(), "expected error record") {
		t.Fatalf("missing .error: %v", err)
	}
	os.WriteFile(ErrorPath(dir, &cases[2]), []byte("CUDA_ERROR_LAUNCH_FAILED\n"), 0o644)
	if err := CheckDir(cases, dir); err == nil || !strings.Contains(err.Error(), "want CUDA_ERROR_ILLEGAL_ADDRESS") {
		t.Fatalf("wrong error: %v", err)
	}
	os.WriteFile(ErrorPath(dir, &cases[2]), []byte("CUDA_ERROR_ILLEGAL_ADDRESS\n"), 0o644)
	if err := CheckDir(cases, dir); err != nil {
		t.Fatalf("right error: %v", err)
	}
	if err := CompareDirs(cases, dir, dir); err != nil {
		t.Fatalf("CompareDirs of a directory with itself: %v", err)
	}

	p := OutputPath(dir, &cases[1], "g_counter")
	b, _ := os.ReadFile(p)
	b[0] ^= 1
	os.WriteFile(p, b, 0o644)
	err := CheckDir(cases, dir)
	if err == nil || !strings.Contains(err.Error(), `case "use_globals": buffer g_counter[0]: got 4001, want 4000`) {
		t.Fatalf("flipped bit: %v", err)
	}
	os.Remove(p)
	if err := CheckDir(cases, dir); err == nil || !strings.Contains(err.Error(), "output g_counter") {
		t.Fatalf("missing output: %v", err)
	}
}

// TestFma32 compares the float64 round-to-odd fma with exact big.Float
// arithmetic, including products that cancel and sums at rounding ties.
func TestFma32(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(200).Mul(bigf(float64(a)), bigf(float64(b)))
		s := new(big.Float).SetPrec(200).Add(p, bigf(float64(c)))
		f, _ := s.Float32()
		return f
	}
	for i := range 200000 {
		a := math.Float32frombits(r.Uint32()&0x807fffff | uint32(100+r.IntN(56))<<23)
		b := math.Float32frombits(r.Uint32()&0x807fffff | uint32(100+r.IntN(56))<<23)
		var c float32
		switch i % 3 {
		case 0:
			c = -float32(float64(a) * float64(b)) // near-total cancellation
		case 1:
			c = math.Float32frombits(r.Uint32()&0x807fffff | uint32(100+r.IntN(56))<<23)
		default:
			c = float32(float64(a)*float64(b)) * 0x1p-25 // sum near a tie
		}
		if g, w := fma32(a, b, c), exact(a, b, c); math.Float32bits(g) != math.Float32bits(w) {
			t.Fatalf("fma32(%g, %g, %g) = %g, want %g", a, b, c, g, w)
		}
	}
}

func TestHalf(t *testing.T) {
	tests := []struct {
		in     float32
		rn, rz uint16
	}{
		{1, 0x3c00, 0x3c00},
		{-2, 0xc000, 0xc000},
		{0.1, 0x2e66, 0x2e66},
		{0.1001, 0x2e68, 0x2e68},
		{1.0009765625, 0x3c01, 0x3c01},
		{1.00048828125, 0x3c00, 0x3c00}, // tie, to even
		{1.00146484375, 0x3c02, 0x3c01}, // tie, to even (up)
		{65504, 0x7bff, 0x7bff},
		{65519, 0x7bff, 0x7bff},
		{65520, 0x7c00, 0x7bff},
		{1e6, 0x7c00, 0x7bff},
		{float32(math.Inf(-1)), 0xfc00, 0xfc00},
		{0x1p-24, 0x0001, 0x0001},
		{0x1p-25, 0x0000, 0x0000},
		{0x3p-25, 0x0002, 0x0001},
		{0x1p-14, 0x0400, 0x0400},
		{0x1.ffcp-15, 0x0400, 0x03ff},
		{-0x1p-30, 0x8000, 0x8000},
	}
	for _, tt := range tests {
		if g := f32ToF16(tt.in, false); g != tt.rn {
			t.Errorf("rn(%g) = %#04x, want %#04x", tt.in, g, tt.rn)
		}
		if g := f32ToF16(tt.in, true); g != tt.rz {
			t.Errorf("rz(%g) = %#04x, want %#04x", tt.in, g, tt.rz)
		}
		if !math.IsInf(float64(tt.in), 0) && math.Abs(float64(tt.in)) < 65504 {
			if back := f16ToF64(tt.rz); math.Abs(back) > math.Abs(float64(tt.in)) {
				t.Errorf("rz(%g) = %g is larger in magnitude", tt.in, back)
			}
		}
	}
}

func TestConversions(t *testing.T) {
	tests := []struct {
		name string
		got  any
		want any
	}{
		{"cvt.rni.s32 tie", cvtInt(2.5, rn, 32), int64(2)},
		{"cvt.rni.s32 -tie", cvtInt(-2.5, rn, 32), int64(-2)},
		{"cvt.rmi.s32", cvtInt(-0.5, rd, 32), int64(-1)},
		{"cvt.rpi.s32", cvtInt(0.25, ru, 32), int64(1)},
		{"cvt.rzi.s32 saturates", cvtInt(3e9, rz, 32), int64(math.MaxInt32)},
		{"cvt.rzi.s32 -saturates", cvtInt(-3e9, rz, 32), int64(math.MinInt32)},
		{"cvt.s32 NaN", cvtInt(math.NaN(), rn, 32), int64(0)},
		{"cvt.s64 inf", cvtInt(math.Inf(1), rn, 64), int64(math.MaxInt64)},
		{"cvt.u32 negative", cvtUint(-5, rn, 32), uint64(0)},
		{"cvt.u32 saturates", cvtUint(5e9, rz, 32), uint64(math.MaxUint32)},
		{"cvt.u64 saturates", cvtUint(2e19, ru, 64), uint64(math.MaxUint64)},
		{"cvt.rz.f32.s32", i64ToF32(16777217, rz), float32(16777216)},
		{"cvt.rp.f32.s32", i64ToF32(16777217, ru), float32(16777218)},
		{"cvt.rm.f32.s32 negative", i64ToF32(-16777217, rd), float32(-16777218)},
		{"add.rz.f32", add32(1, 0x1p-30, rz), float32(1)},
		{"add.rp.f32", add32(1, 0x1p-30, ru), math.Nextafter32(1, 2)},
		{"mul.rm.f32", mul32(-1, 1+0x1p-23, rd), -(1 + float32(0x1p-23))},
		{"div.rz.f32", div32(1, 3, rz), math.Float32frombits(0x3eaaaaaa)},
		{"sqrt.rm.f32", sqrt32rd(2), math.Float32frombits(0x3fb504f3)},
		{"sqrt.rp.f64 above", sqrt64ru(2), math.Sqrt(2)},                    // RN is already above
		{"sqrt.rp.f64 below", sqrt64ru(3), math.Nextafter(math.Sqrt(3), 2)}, // RN is below
		{"cvt.rz.f32.f64", toF32(1-0x1p-40, rz), math.Nextafter32(1, 0)},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s = %v, want %v", tt.name, tt.got, tt.want)
		}
	}
}
