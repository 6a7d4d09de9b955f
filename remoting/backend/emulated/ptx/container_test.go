package ptx

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const corpusContainers = "../../../../e2e/kernels/ptx/containers"

// TestNvccContainers loads the fatbins and cubins nvcc 13 produced for the
// kernel corpus (zstd-compressed entries included).
func TestNvccContainers(t *testing.T) {
	if _, err := os.Stat(corpusContainers); err != nil {
		t.Skip("corpus containers not present")
	}
	cases := []struct {
		file    string
		kernels []string
		code    string
	}{
		{"basic.ptx_only.fatbin", []string{"empty", "vecadd", "scale_offset", "saxpy", "saxpy_iter"}, ""},
		{"basic.sass_ptx.fatbin", []string{"empty", "vecadd", "scale_offset", "saxpy", "saxpy_iter"}, ""},
		{"basic.compressed.fatbin", []string{"empty", "vecadd", "scale_offset", "saxpy", "saxpy_iter"}, ""},
		{"memory.compressed.fatbin", []string{"vec_load", "use_globals", "local_array"}, ""},
		{"basic.sass_only.fatbin", nil, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
		{"basic.sm_90.cubin", nil, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(corpusContainers, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			m, err := Load(b)
			if tc.code != "" {
				if codeOf(err) != tc.code || !strings.Contains(err.Error(), "-gencode arch=compute_") {
					t.Fatalf("got %v, want %s with rebuild advice", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(m.Kernels(), tc.kernels) {
				t.Fatalf("kernels %v, want %v", m.Kernels(), tc.kernels)
			}
		})
	}
}

// fatbinEntry builds one fatbin entry the way nvcc lays it out.
func fatbinEntry(kind uint16, arch uint32, payload []byte, flags uint64, rawSize uint64) []byte {
	padded := (len(payload) + 7) &^ 7
	e := make([]byte, 64+padded)
	binary.LittleEndian.PutUint16(e[0:], kind)
	binary.LittleEndian.PutUint16(e[2:], 0x0101)
	binary.LittleEndian.PutUint32(e[4:], 64)
	binary.LittleEndian.PutUint64(e[8:], uint64(padded))
	binary.LittleEndian.PutUint32(e[16:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(e[28:], arch)
	binary.LittleEndian.PutUint64(e[40:], flags|0x11)
	binary.LittleEndian.PutUint64(e[56:], rawSize)
	copy(e[64:], payload)
	return e
}

func fatbin(entries ...[]byte) []byte {
	body := bytes.Join(entries, nil)
	h := make([]byte, 16)
	binary.LittleEndian.PutUint32(h[0:], fatbinMagic)
	binary.LittleEndian.PutUint16(h[4:], 1)
	binary.LittleEndian.PutUint16(h[6:], 16)
	binary.LittleEndian.PutUint64(h[8:], uint64(len(body)))
	return append(h, body...)
}

// relocatable gives a fatbin the header magic of relocatable objects.
func relocatable(fb []byte) []byte {
	out := append([]byte(nil), fb...)
	binary.LittleEndian.PutUint32(out, fatbinWrapperMagic)
	return out
}

// lz4Literals encodes data as one literal-only LZ4 sequence, which is a
// valid LZ4 block.
func lz4Literals(data []byte) []byte {
	n := len(data)
	var out []byte
	if n < 15 {
		out = append(out, byte(n<<4))
	} else {
		out = append(out, 0xf0)
		r := n - 15
		for r >= 255 {
			out = append(out, 255)
			r -= 255
		}
		out = append(out, byte(r))
	}
	return append(out, data...)
}

// minimalELF wraps data in an ELF64 file with one section called name.
func minimalELF(name string, data []byte) []byte {
	shstr := append([]byte("\x00.shstrtab\x00"), append([]byte(name), 0)...)
	dataOff := 64
	shstrOff := dataOff + len(data)
	shOff := (shstrOff + len(shstr) + 7) &^ 7
	out := make([]byte, shOff+3*64)
	copy(out, "\x7fELF\x02\x01\x01")
	binary.LittleEndian.PutUint16(out[16:], 1)  // ET_REL
	binary.LittleEndian.PutUint16(out[18:], 62) // x86-64
	binary.LittleEndian.PutUint32(out[20:], 1)
	binary.LittleEndian.PutUint64(out[40:], uint64(shOff))
	binary.LittleEndian.PutUint16(out[52:], 64)
	binary.LittleEndian.PutUint16(out[58:], 64)
	binary.LittleEndian.PutUint16(out[60:], 3)
	binary.LittleEndian.PutUint16(out[62:], 1)
	copy(out[dataOff:], data)
	copy(out[shstrOff:], shstr)
	sh := func(i int, nameOff uint32, typ uint32, off, size int) {
		b := out[shOff+64*i:]
		binary.LittleEndian.PutUint32(b[0:], nameOff)
		binary.LittleEndian.PutUint32(b[4:], typ)
		binary.LittleEndian.PutUint64(b[24:], uint64(off))
		binary.LittleEndian.PutUint64(b[32:], uint64(size))
		binary.LittleEndian.PutUint64(b[48:], 1)
	}
	sh(1, 1, 3, shstrOff, len(shstr)) // .shstrtab
	sh(2, 11, 1, dataOff, len(data))  // name, PROGBITS
	return out
}

func TestContainers(t *testing.T) {
	base := readTestdata(t, "saxpy.ptx")
	ptxFor := func(sm int) []byte {
		return []byte(strings.Replace(base, ".target sm_75", ".target sm_"+strconv.Itoa(sm), 1) + "\x00")
	}
	multi := fatbin(
		fatbinEntry(fatbinKindPTX, 75, ptxFor(75), 0, 0),
		fatbinEntry(2, 90, []byte("\x7fELF not really"), 0, 0),
		fatbinEntry(fatbinKindPTX, 90, ptxFor(90), 0, 0),
		fatbinEntry(fatbinKindPTX, 100, ptxFor(100), 0, 0),
	)
	lz := ptxFor(80)
	lzFat := fatbin(fatbinEntry(fatbinKindPTX, 80, lz4Literals(lz), fatbinFlagLZ4, uint64(len(lz))))
	wrapper := make([]byte, 24)
	binary.LittleEndian.PutUint32(wrapper[0:], fatbinWrapperMagic)
	binary.LittleEndian.PutUint32(wrapper[4:], 1)
	binary.LittleEndian.PutUint64(wrapper[8:], 0xdeadbeef)
	cases := []struct {
		name  string
		image []byte
		sm    int // the .target of the PTX Load must pick
		code  string
	}{
		{"ptx text", []byte(base), 75, ""},
		{"ptx text with NUL", append([]byte(base), 0, 0xff, 0xfe), 75, ""},
		{"fatbin picks highest arch <= 90", multi, 90, ""},
		{"lz4 compressed entry", lzFat, 80, ""},
		{"runtime wrapper then fatbin", append(wrapper, multi...), 90, ""},
		{"ELF with .nv_fatbin", minimalELF(".nv_fatbin", multi), 90, ""},
		{"relocatable fatbin in __nv_relfatbin", minimalELF("__nv_relfatbin", relocatable(multi)), 90, ""},
		{"only newer PTX", fatbin(fatbinEntry(fatbinKindPTX, 100, ptxFor(100), 0, 0)), 0, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
		{"ELF without PTX", minimalELF(".text", []byte{1, 2, 3, 4}), 0, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
		{"truncated fatbin", multi[:len(multi)/2], 0, "CUDA_ERROR_INVALID_IMAGE"},
		{"corrupt lz4", fatbin(fatbinEntry(fatbinKindPTX, 80, []byte{0xf0, 1, 2}, fatbinFlagLZ4, 100)), 0, "CUDA_ERROR_INVALID_IMAGE"},
		{"garbage", []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, 0, "CUDA_ERROR_INVALID_IMAGE"},
		{"empty", nil, 0, "CUDA_ERROR_INVALID_IMAGE"},
		{"target above device", ptxFor(100), 0, "CUDA_ERROR_NO_BINARY_FOR_GPU"},
		{"old PTX ISA", []byte(strings.Replace(base, ".version 8.4", ".version 5.0", 1)), 0, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
		{"syntax error", []byte(strings.Replace(base, "ret;", "ret", 1)), 0, "CUDA_ERROR_INVALID_PTX"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Load(tc.image)
			if tc.code != "" {
				if codeOf(err) != tc.code {
					t.Fatalf("got %v, want %s", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.sm != tc.sm {
				t.Fatalf("picked PTX for sm_%d, want sm_%d", m.sm, tc.sm)
			}
			// The loaded kernel runs.
			f := mustFunc(t, m, "saxpy")
			mem := newTestMem()
			x, y := mem.alloc(16), mem.alloc(16)
			mem.putF32(x, []float32{1, 2, 3, 4})
			if err := f.Run(context.Background(), Launch{Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{4, 1, 1}, Params: params(t, f, int32(4), float32(2), x, y)}, mem, 1); err != nil {
				t.Fatal(err)
			}
			if got := mem.f32s(y, 4); !slices.Equal(got, []float32{2, 4, 6, 8}) {
				t.Fatalf("y = %v", got)
			}
		})
	}
}

func TestUnLZ4(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		size int
		want string
		ok   bool
	}{
		{"literals", lz4Literals([]byte("hello")), 5, "hello", true},
		{"long literals", lz4Literals(bytes.Repeat([]byte("x"), 300)), 300, strings.Repeat("x", 300), true},
		// "abc", then a 9-byte match at distance 3 (overlapping), then "X"
		{"overlapping match", []byte{0x35, 'a', 'b', 'c', 3, 0, 0x10, 'X'}, 13, "abcabcabcabcX", true},
		{"long match", []byte{0x1f, 'z', 1, 0, 20, 0x00}, 1 + 15 + 20 + 4, strings.Repeat("z", 40), true},
		{"distance zero", []byte{0x15, 'a', 0, 0}, 10, "", false},
		{"distance beyond output", []byte{0x15, 'a', 5, 0}, 10, "", false},
		{"output larger than declared", lz4Literals([]byte("hello")), 3, "", false},
		{"truncated literals", []byte{0x50, 'a'}, 5, "", false},
		{"truncated offset", []byte{0x11, 'a', 1}, 10, "", false},
		{"short output", lz4Literals([]byte("hi")), 5, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := unlz4(tc.in, tc.size)
			if tc.ok != (err == nil) {
				t.Fatalf("err = %v, want ok=%v", err, tc.ok)
			}
			if tc.ok && string(got) != tc.want {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestUnsupportedDeclarations(t *testing.T) {
	src := `.version 8.0
.target sm_90
.address_size 64
.visible .entry k()
{
	.reg .v4 .f32 %v;
	ret;
}`
	if _, err := Load([]byte(src)); codeOf(err) != "CUDA_ERROR_NOT_SUPPORTED" || !strings.Contains(err.Error(), "vector registers") {
		t.Fatalf("got %v", err)
	}
}

func TestHostileSyntax(t *testing.T) {
	head := ".version 8.0\n.target sm_90\n.address_size 64\n"
	cases := []struct{ name, src string }{
		{"nested initializer", head + ".global .u32 g[1] = " + strings.Repeat("{", 100000) + "1" + strings.Repeat("}", 100000) + ";"},
		{"nested negation", head + ".visible .entry k() { .reg .pred %p<2>; and.pred %p1, " + strings.Repeat("!", 100000) + "%p0, %p0; ret; }"},
		{"nested vectors", head + ".visible .entry k() { .reg .b32 %r<2>; mov.b64 " + strings.Repeat("{", 100000) + "%r0" + strings.Repeat("}", 100000) + ", 0; ret; }"},
		{"unterminated body", head + ".visible .entry k() { ret;"},
		{"unterminated comment", head + "/* ..."},
		{"bad register range", head + ".visible .entry k() { .reg .b32 %r<99999999999>; ret; }"},
		{"label twice", head + ".visible .entry k() { L: L: ret; }"},
		{"undefined label", head + ".visible .entry k() { bra L; }"},
		{"undeclared register", head + ".visible .entry k() { mov.u32 %r9, 1; ret; }"},
		{"write to special register", head + ".visible .entry k() { mov.u32 %tid.x, 1; ret; }"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.src))
			if codeOf(err) != "CUDA_ERROR_INVALID_PTX" {
				t.Fatalf("got %v, want CUDA_ERROR_INVALID_PTX", err)
			}
		})
	}
}

// TestCorpusFullyImplemented compiles every module nvcc produced for the
// kernel corpus and requires that no instruction on any path, taken by
// the corpus's cases or not, is one the emulator lacks.
func TestCorpusFullyImplemented(t *testing.T) {
	files, _ := filepath.Glob("../../../../e2e/kernels/ptx/*.ptx")
	local, _ := filepath.Glob("testdata/nvcc/*.ptx")
	files = append(files, local...)
	if len(files) == 0 {
		t.Skip("no nvcc PTX present")
	}
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Load(src)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(name), err)
			continue
		}
		for _, cf := range m.cfuncs {
			for _, in := range cf.code {
				if in.unsupported != "" {
					t.Errorf("%s: %s line %d: `%s`: %s", filepath.Base(name), cf.name, in.src.line, in.src.text, in.unsupported)
				}
			}
		}
	}
}
