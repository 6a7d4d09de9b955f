package modimage

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// findNvcc finds nvcc or skips the test.
func findNvcc(t *testing.T) string {
	t.Helper()
	p := nvccPath()
	if p == "" {
		t.Skip("nvcc not found: run `make deps` (it installs CUDA 12.4 under .deps/nvcc) or set GPUCTL_NVCC_DIR")
	}
	return p
}

// nvccPath finds the CUDA toolkit `make deps` installs, the one
// GPUCTL_NVCC_DIR names, or nvcc on PATH; "" when there is none.
func nvccPath() string {
	var dirs []string
	if d := os.Getenv("GPUCTL_NVCC_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, "../../../../.deps/nvcc")
	for _, d := range dirs {
		p, err := filepath.Abs(filepath.Join(d, "bin/nvcc"))
		if err == nil {
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	if p, err := exec.LookPath("nvcc"); err == nil {
		return p
	}
	return ""
}

// compile runs nvcc on testdata/src with args and returns what it wrote.
func compile(t *testing.T, nvcc, dir, src, out string, args ...string) []byte {
	t.Helper()
	in, err := filepath.Abs(filepath.Join("testdata", src))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, out)
	cmd := exec.Command(nvcc, append(args, in, "-o", path)...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nvcc %s: %v\n%s", strings.Join(args, " "), err, b)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

var (
	fatbinArgs = []string{"-fatbin", "--no-compress",
		"-gencode", "arch=compute_80,code=sm_80",
		"-gencode", "arch=compute_90,code=[sm_90,compute_90]"}
	variants = []struct {
		name string
		args []string
	}{
		{"ptx", []string{"-ptx", "-arch=sm_90"}},
		{"cubin", []string{"-cubin", "-arch=sm_90"}},
		{"cubin-rdc", []string{"-cubin", "-rdc=true", "-arch=sm_90"}},
		{"fatbin", fatbinArgs},
	}
	// nvcc compresses PTX by default; -compress-all also compresses cubins.
	compressed = []struct {
		name string
		args []string
	}{
		{"fatbin-default", []string{"-fatbin", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"}},
		{"fatbin-compress-all", []string{"-fatbin", "-Xfatbin", "-compress-all", "-gencode", "arch=compute_90,code=[sm_90,compute_90]"}},
	}
)

// TestNvccImages compiles each testdata source to PTX, cubins and an
// uncompressed fatbin and checks what Inspect reads from each, then that
// compressed, truncated and concatenated forms are handled.
func TestNvccImages(t *testing.T) {
	nvcc := findNvcc(t)
	dir := t.TempDir()
	cases := []struct {
		src     string
		globals []string
		heap    bool
	}{
		{"globals.cu", []string{"arr", "counter", "k"}, false},
		{"heap.cu", nil, true},
		{"plain.cu", nil, false},
		{"printf.cu", []string{"$str"}, false},
	}
	images := map[string][]byte{}
	for _, c := range cases {
		base := strings.TrimSuffix(c.src, ".cu")
		for _, v := range variants {
			img := compile(t, nvcc, dir, c.src, base+"."+v.name, v.args...)
			images[base+"."+v.name] = img
			t.Run(base+"/"+v.name, func(t *testing.T) {
				check(t, img, c.globals, c.heap)
				if v.name == "ptx" {
					check(t, append(slices.Clone(img), 0), c.globals, c.heap)
				}
				for _, n := range []int{len(img) / 2, len(img) - 1} {
					if v.name == "ptx" && n == len(img)-1 {
						continue // dropping the final newline leaves valid PTX
					}
					if _, ok := Inspect(img[:n]); ok {
						t.Errorf("truncated to %d of %d bytes: ok, want not ok", n, len(img))
					}
				}
			})
		}
		for _, v := range compressed {
			img := compile(t, nvcc, dir, c.src, base+"."+v.name, v.args...)
			t.Run(base+"/"+v.name, func(t *testing.T) {
				if info, ok := Inspect(img); ok {
					t.Errorf("compressed fatbin: ok with %+v, want not ok", info)
				}
			})
		}
	}
	t.Run("concatenated-fatbins", func(t *testing.T) {
		img := slices.Concat(images["globals.fatbin"], images["heap.fatbin"], make([]byte, 8))
		check(t, img, []string{"arr", "counter", "k"}, true)
	})
	t.Run("fatbin-then-garbage", func(t *testing.T) {
		img := slices.Concat(images["globals.fatbin"], []byte("garbage!"))
		if _, ok := Inspect(img); ok {
			t.Error("fatbin followed by garbage: ok, want not ok")
		}
	})
}

func check(t *testing.T, img []byte, globals []string, heap bool) {
	t.Helper()
	info, ok := Inspect(img)
	if !ok {
		t.Fatalf("Inspect: not ok, want globals %q heap %v", globals, heap)
	}
	if !slices.Equal(info.Globals, globals) || info.Heap != heap {
		t.Errorf("Inspect = globals %q heap %v, want globals %q heap %v", info.Globals, info.Heap, globals, heap)
	}
}

const ptxHead = ".version 8.4\n.target sm_90\n.address_size 64\n"

// TestPTX covers the declarations Inspect must tell apart in PTX text.
func TestPTX(t *testing.T) {
	cases := []struct {
		name    string
		text    string
		ok      bool
		globals []string
		heap    bool
	}{
		{"declarations", ptxHead + `
.file 1 "/src/free.cu", 1700000000, 1234
.visible .global .align 4 .b8 name[16] = {1, 2, 3, 4};
.global .align 4 .u32 a, b = 3, c[2] = {1, 2};
.const .align 4 .f32 pi = 0f40490FDB;
.weak .global .u64 fp = generic(a);
.common .global .align 8 .b8 cm[8];
.global .attribute(.managed) .align 4 .u32 man;
.visible .global .align 16 .v4 .f32 vec[2][3];
.extern .global .align 4 .u32 ext;
.extern .const .b8 extc[];
.shared .align 4 .b8 sh[64];
/* .global .u32 blockcomment;
   still a comment */
// .global .u32 linecomment;
.visible .entry k(
	.param .u64 k_param_0
)
.maxntid 128, 1, 1
{
	.reg .b32 %r<3>;
	.shared .align 4 .u32 inner;
	ld.global.u32 %r1, [a]; // .global .u32 notthis;
	ld.const.f32 %r2, [pi];
	{ // callseq
	.param .b64 param0;
	}
	ret;
}
`, true, []string{"a", "b", "c", "cm", "fp", "man", "name", "pi", "vec"}, false},
		{"function-scope global", ptxHead + `
.visible .entry k()
{
	.global .align 4 .u32 inner;
	ret;
}
`, false, nil, false},
		{"function-scope const", ptxHead + ".func f()\n{\n\t.const .u32 c = 1;\n\tret;\n}\n", false, nil, false},
		{"malloc declared", ptxHead + `
.extern .func  (.param .b64 func_retval0) malloc
(
	.param .b64 malloc_param_0
)
;
.visible .entry k() { ret; }
`, true, nil, true},
		{"free called", ptxHead + ".extern .func free(.param .b64 p);\n.visible .entry k() { { .param .b64 param0; call.uni free, (param0); } ret; }\n", true, nil, true},
		{"device runtime", ptxHead + ".extern .func (.param .b32 r) __cudaCDP2Malloc(.param .b64 a, .param .b64 b);\n", true, nil, true},
		{"aligned malloc", ptxHead + ".extern .func (.param .b64 r) __cuda_syscall_aligned_malloc(.param .b64 a, .param .b64 b);\n", true, nil, true},
		{"printf is not heap", ptxHead + `
.extern .func  (.param .b32 func_retval0) vprintf
(
	.param .b64 vprintf_param_0,
	.param .b64 vprintf_param_1
)
;
.global .align 1 .b8 $str[6] = {110, 61, 37, 100, 10};
`, true, []string{"$str"}, false},
		{"pragma in entry header", ptxHead + ".entry k() .pragma \"nounroll\";\n{\n\tret;\n}\n.global .u32 after;\n", true, []string{"after"}, false},
		{"debug section", ptxHead + ".global .u32 g;\n.section .debug_abbrev\n{\n.b8 1\n.b8 17\n}\n.section .debug_loc\t{\t}\n", true, []string{"g"}, false},
		{"nul terminated", ptxHead + ".global .u32 g;\n\x00junk after the terminator", true, []string{"g"}, false},
		{"texref", ptxHead + ".global .texref tex;\n", false, nil, false},
		{"unknown directive", ptxHead + ".frobnicate x;\n", false, nil, false},
		{"no version", ".target sm_90\n.global .u32 g;\n", false, nil, false},
		{"truncated body", ptxHead + ".visible .entry k()\n{\n\tret;\n", false, nil, false},
		{"truncated statement", ptxHead + ".global .u32 g", false, nil, false},
		{"unterminated comment", ptxHead + "/* .global .u32 g;\n", false, nil, false},
		{"unterminated string", ptxHead + ".file 1 \"x.cu\n", false, nil, false},
		{"stray brace", ptxHead + "{ ret; }\n", false, nil, false},
		{"missing name", ptxHead + ".global .u32 ;\n", false, nil, false},
		{"dotted name", ptxHead + ".global .u32 a.b;\n", false, nil, false},
		{"binary", ptxHead + ".global .u32 g;\n\x01\x02", false, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			info, ok := Inspect([]byte(c.text))
			if ok != c.ok {
				t.Fatalf("ok = %v (%+v), want %v", ok, info, c.ok)
			}
			if ok && (!slices.Equal(info.Globals, c.globals) || info.Heap != c.heap) {
				t.Errorf("Inspect = globals %q heap %v, want globals %q heap %v", info.Globals, info.Heap, c.globals, c.heap)
			}
		})
	}
}

// fatbinEntry lays out one fatbin entry the way nvcc 12.4 does: a 64-byte
// header (nvcc's carry a few more bytes, which the header size covers)
// and the payload padded to 8 bytes.
func fatbinEntry(kind uint16, flags uint64, payload []byte) []byte {
	padded := (len(payload) + 7) &^ 7
	e := make([]byte, 64+padded)
	le := binary.LittleEndian
	le.PutUint16(e[0:], kind)
	le.PutUint16(e[2:], 0x0101)
	le.PutUint32(e[4:], 64)
	le.PutUint64(e[8:], uint64(padded))
	le.PutUint32(e[28:], 90)
	le.PutUint64(e[40:], flags)
	copy(e[64:], payload)
	return e
}

func fatbin(entries ...[]byte) []byte {
	body := slices.Concat(entries...)
	h := make([]byte, 16)
	binary.LittleEndian.PutUint32(h[0:], fatbinMagic)
	binary.LittleEndian.PutUint16(h[4:], 1)
	binary.LittleEndian.PutUint16(h[6:], 16)
	binary.LittleEndian.PutUint64(h[8:], uint64(len(body)))
	return append(h, body...)
}

var samplePTX = []byte(ptxHead + ".global .u32 g;\n.visible .entry k() { ret; }\n")

// TestMalformed feeds images nothing could read with certainty.
func TestMalformed(t *testing.T) {
	good := fatbin(fatbinEntry(fatbinKindPTX, 0x11, samplePTX))
	check(t, good, []string{"g"}, false)

	elf32 := append([]byte("\x7fELF\x01\x01\x01"), make([]byte, 64)...)
	bigEndian := append([]byte("\x7fELF\x02\x02\x01"), make([]byte, 64)...)
	junkPadded := fatbin(fatbinEntry(fatbinKindPTX, 0x11, append(append(slices.Clone(samplePTX), 0), "junk"...)))
	badHeader := slices.Clone(good)
	binary.LittleEndian.PutUint32(badHeader[16+4:], 1<<30) // entry header size past the end
	badSize := slices.Clone(good)
	binary.LittleEndian.PutUint64(badSize[8:], 1<<62)
	cases := map[string][]byte{
		"empty":           nil,
		"garbage":         []byte("\x13\x37 this is not a module image \xff\xfe"),
		"text":            []byte("hello, world\n"),
		"fatbin magic":    good[:4],
		"fatbin header":   good[:16],
		"elf magic":       []byte("\x7fELF"),
		"elf32":           elf32,
		"big-endian elf":  bigEndian,
		"zeroed elf64":    append([]byte("\x7fELF\x02\x01\x01"), make([]byte, 200)...),
		"unknown kind":    fatbin(fatbinEntry(4, 0x11, samplePTX)),
		"lz4 flag":        fatbin(fatbinEntry(fatbinKindPTX, 0x2011, samplePTX)),
		"zstd flag":       fatbin(fatbinEntry(fatbinKindPTX, 0x8011, samplePTX)),
		"elf kind, ptx":   fatbin(fatbinEntry(fatbinKindELF, 0x11, samplePTX)),
		"ptx kind, bytes": fatbin(fatbinEntry(fatbinKindPTX, 0x11, []byte{0x3c, 0x0a, 0x2f, 0x2f, 0x03, 0x00, 0xf0})),
		"junk in padding": junkPadded,
		"no entries":      fatbin(),
		"entry size":      badHeader,
		"container size":  badSize,
		"short entry":     fatbin(make([]byte, 40)),
	}
	for name, img := range cases {
		t.Run(name, func(t *testing.T) {
			if info, ok := Inspect(img); ok {
				t.Errorf("ok with %+v, want not ok", info)
			}
		})
	}
}

func FuzzInspect(f *testing.F) {
	f.Add(samplePTX)
	f.Add([]byte(ptxHead + ".global .align 4 .b8 a[4] = {1, 2, 3, 4};\n.extern .func free(.param .b64 p);\n"))
	f.Add(fatbin(fatbinEntry(fatbinKindPTX, 0x11, samplePTX)))
	f.Add(fatbin(fatbinEntry(fatbinKindELF, 0x11, []byte("\x7fELF\x02\x01\x01\x33"))))
	// Real cubins and fatbins when a toolkit is at hand.
	nvcc := nvccPath()
	for _, src := range []string{"globals.cu", "heap.cu"} {
		if nvcc == "" {
			break
		}
		dir := f.TempDir()
		for _, args := range [][]string{{"-cubin", "-arch=sm_90"}, fatbinArgs} {
			out := filepath.Join(dir, "out")
			if exec.Command(nvcc, append(args, filepath.Join("testdata", src), "-o", out)...).Run() == nil {
				if b, err := os.ReadFile(out); err == nil {
					f.Add(b)
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, img []byte) {
		tm := time.AfterFunc(2*time.Second, func() { os.WriteFile("/tmp/hang.bin", img, 0o644); panic("hang") })
		defer tm.Stop()
		info, ok := Inspect(img)
		if !ok && (info.Globals != nil || info.Heap) {
			t.Fatalf("not ok but returned %+v", info)
		}
		if ok && !slices.IsSorted(info.Globals) {
			t.Fatalf("globals not sorted: %q", info.Globals)
		}
		for i := 1; ok && i < len(info.Globals); i++ {
			if info.Globals[i] == info.Globals[i-1] {
				t.Fatalf("duplicate global %q", info.Globals[i])
			}
		}
	})
}
