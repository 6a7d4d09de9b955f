package spec

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestOpsTable(t *testing.T) {
	codes, names := map[uint16]string{}, map[string]bool{}
	for _, op := range Ops {
		if prev, ok := codes[op.Code]; ok {
			t.Errorf("op code %d used by %s and %s", op.Code, prev, op.Name)
		}
		codes[op.Code] = op.Name
		if names[op.Name] {
			t.Errorf("op %s listed twice", op.Name)
		}
		names[op.Name] = true
		if op.Code == 0 {
			t.Errorf("op %s: code 0 is reserved", op.Name)
		}
		if op.Async && len(op.Out) > 0 {
			t.Errorf("op %s: asynchronous ops get no reply, so they cannot have outputs", op.Name)
		}
		if op.Async && op.Bulk == BulkOut {
			t.Errorf("op %s: an asynchronous op cannot stream a reply", op.Name)
		}
		if op.Bulk != NoBulk && !op.Custom {
			t.Errorf("op %s: bulk ops need a hand-written dispatch", op.Name)
		}
	}
}

func TestEntriesTable(t *testing.T) {
	ops := map[string]Op{}
	for _, op := range Ops {
		ops[op.Name] = op
	}
	src, err := filepath.Glob("../interposer/src/*.c")
	if err != nil || len(src) == 0 {
		t.Fatalf("interposer sources: %v", err)
	}
	var c []byte
	for _, f := range src {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		c = append(c, b...)
	}
	syms := map[string]bool{}
	for _, e := range Entries {
		if len(e.Symbols) == 0 {
			t.Errorf("entry %s exports no symbol", e.Name)
		}
		for i, s := range e.Symbols {
			if syms[s.Name] {
				t.Errorf("symbol %s exported twice", s.Name)
			}
			syms[s.Name] = true
			if i > 0 && s.Version < e.Symbols[i-1].Version {
				t.Errorf("entry %s: symbols must be listed oldest first", e.Name)
			}
		}
		switch e.Kind {
		case Remote:
			op, ok := ops[e.Op]
			if !ok {
				t.Errorf("entry %s: unknown op %q", e.Name, e.Op)
				continue
			}
			if len(e.Args) != len(op.In) || len(e.Outs) != len(op.Out) {
				t.Errorf("entry %s: %d args and %d outs for op %s with %d inputs and %d outputs", e.Name, len(e.Args), len(e.Outs), op.Name, len(op.In), len(op.Out))
			}
		case Custom, Local:
			// Hand-written entries must exist in the C sources.
			for _, s := range e.Symbols {
				re := regexp.MustCompile(`(?m)^CUresult CUDAAPI ` + regexp.QuoteMeta(s.Name) + `\(`)
				if !re.Match(c) {
					t.Errorf("entry %s: symbol %s is not defined in remoting/interposer/src", e.Name, s.Name)
				}
			}
		}
	}
}

// TestGeneratedFilesAreCurrent regenerates into a scratch tree and
// compares with the checked-in files, as `make check-generated` does.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	tmp := t.TempDir()
	out, err := exec.Command("go", "run", "./gen", "-root", tmp).CombinedOutput()
	if err != nil {
		t.Fatalf("generator: %v\n%s", err, out)
	}
	n := 0
	err = filepath.Walk(tmp, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return err
		}
		n++
		rel, _ := filepath.Rel(tmp, p)
		want, _ := os.ReadFile(p)
		got, err := os.ReadFile(filepath.Join("..", "..", rel))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run go generate ./remoting/spec", rel)
		}
		return nil
	})
	if err != nil || n == 0 {
		t.Fatalf("walked %d generated files: %v", n, err)
	}
}

func TestResultsTable(t *testing.T) {
	codes, names, goNames := map[uint32]string{}, map[string]bool{}, map[string]bool{}
	for i, r := range Results {
		if prev, ok := codes[r.Code]; ok {
			t.Errorf("result code %d used by %s and %s", r.Code, prev, r.Name)
		}
		codes[r.Code] = r.Name
		if names[r.Name] || goNames[r.GoName()] {
			t.Errorf("result %s (Go %s) listed twice", r.Name, r.GoName())
		}
		names[r.Name], goNames[r.GoName()] = true, true
		if !regexp.MustCompile(`^CUDA_(SUCCESS|ERROR_[A-Z0-9_]+)$`).MatchString(r.Name) {
			t.Errorf("result %d: %q is not a CUresult enumerator", r.Code, r.Name)
		}
		if i > 0 && r.Code <= Results[i-1].Code {
			t.Errorf("result %s: the table is in ascending order of codes, as cuda.h", r.Name)
		}
	}
	for name, want := range map[string]string{
		"CUDA_SUCCESS":                           "Success",
		"CUDA_ERROR_INVALID_VALUE":               "ErrorInvalidValue",
		"CUDA_ERROR_NO_BINARY_FOR_GPU":           "ErrorNoBinaryForGPU",
		"CUDA_ERROR_UNSUPPORTED_PTX_VERSION":     "ErrorUnsupportedPTXVersion",
		"CUDA_ERROR_NVLINK_UNCORRECTABLE":        "ErrorNVLinkUncorrectable",
		"CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED":  "ErrorHostMemoryNotRegistered",
		"CUDA_ERROR_INVALID_PC":                  "ErrorInvalidPC",
		"CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD": "ErrorStreamCaptureWrongThread",
	} {
		if got := (Result{Name: name}).GoName(); got != want {
			t.Errorf("GoName of %s = %s, want %s", name, got, want)
		}
	}
	for _, must := range []string{"CUDA_SUCCESS", "CUDA_ERROR_INVALID_VALUE", "CUDA_ERROR_OUT_OF_MEMORY", "CUDA_ERROR_NOT_SUPPORTED", "CUDA_ERROR_UNKNOWN"} {
		for _, r := range Results {
			if r.Name == must && r.Text == "" {
				t.Errorf("%s has no cuGetErrorString text", must)
			}
		}
	}
}

// TestResultsMatchHeader holds the CUresult enum of the interposer's
// cuda.h, which programs compile against, to the table: the same
// enumerators with the same values in the same order.
func TestResultsMatchHeader(t *testing.T) {
	h, err := os.ReadFile("../interposer/include/cuda.h")
	if err != nil {
		t.Fatal(err)
	}
	body := regexp.MustCompile(`(?s)typedef enum cudaError_enum \{(.*?)\} CUresult;`).FindSubmatch(h)
	if body == nil {
		t.Fatal("cuda.h has no `typedef enum cudaError_enum { ... } CUresult;`")
	}
	var header []Result
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*(\d+)\s*,?\s*$`).FindAllSubmatch(body[1], -1) {
		var code uint32
		if _, err := fmt.Sscan(string(m[2]), &code); err != nil {
			t.Fatalf("%s = %s: %v", m[1], m[2], err)
		}
		header = append(header, Result{Code: code, Name: string(m[1])})
	}
	if lines := bytes.Count(bytes.TrimSpace(body[1]), []byte("\n")) + 1; lines != len(header) {
		t.Errorf("the enum has %d lines and %d read as NAME = VALUE: keep one enumerator per line", lines, len(header))
	}
	for i := 0; i < max(len(header), len(Results)); i++ {
		var h, r Result
		if i < len(header) {
			h = header[i]
		}
		if i < len(Results) {
			r = Results[i]
		}
		if h.Name != r.Name || h.Code != r.Code {
			t.Errorf("enumerator %d: cuda.h has %s = %d, the table %s = %d", i, h.Name, h.Code, r.Name, r.Code)
		}
	}
}

func TestResolveEntries(t *testing.T) {
	names := func(es []Entry) []string {
		var out []string
		for _, e := range es {
			for _, s := range e.Symbols {
				out = append(out, fmt.Sprintf("%s:%s@%d/%v/%d", e.Name, s.Name, s.Version, s.PerThread, e.Kind))
			}
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		lists [][]Entry
		want  []string // entry:symbol@version/perthread/kind, in order
		panic string   // non-empty: resolveEntries must panic with this in its message
	}{
		{
			name: "a later entry of a call takes it over and keeps the earlier symbols",
			lists: [][]Entry{
				{remote("cuA", "void", "Op", nil, nil)},
				{custom("cuA", sym("cuA_v2", 13000)), custom("cuB", ptsym("cuB_ptsz", 7000))},
				{local("cuA", sym("cuA", 2000)), custom("cuB")},
			},
			want: []string{"cuA:cuA@2000/false/2", "cuA:cuA_v2@13000/false/2", "cuB:cuB@2000/false/1", "cuB:cuB_ptsz@7000/true/1"},
		},
		{
			name: "stubs of served symbols and names are dropped",
			lists: [][]Entry{
				append(unsupported("cuA", "cuB_v2", "cuC"), lookupOnly("cuD", "cuB", "cuE")...),
				{custom("cuA"), custom("cuB", sym("cuB_v2", 3020))},
			},
			want: []string{"cuA:cuA@2000/false/1", "cuB:cuB_v2@3020/false/1", "cuC:cuC@2000/false/3", "cuD:cuD@2000/false/4", "cuE:cuE@2000/false/4"},
		},
		{
			name:  "a symbol restated with another version",
			lists: [][]Entry{{custom("cuA", sym("cuA", 7000))}, {custom("cuA")}},
			panic: "lists symbol cuA",
		},
		{
			name:  "a symbol claimed by two calls",
			lists: [][]Entry{{custom("cuA", sym("cuX", 2000))}, {custom("cuB", sym("cuX", 2000))}},
			panic: "exported by both cuA and cuB",
		},
		{
			name:  "a Remote entry cannot take over a form it does not list",
			lists: [][]Entry{{custom("cuA", sym("cuA_v2", 13000))}, {remote("cuA", "void", "Op", nil, nil)}},
			panic: "cannot serve cuA_v2",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if tc.panic == "" && r != nil {
					t.Fatalf("panicked: %v", r)
				}
				if tc.panic != "" && (r == nil || !strings.Contains(fmt.Sprint(r), tc.panic)) {
					t.Fatalf("panic %v, want one mentioning %q", r, tc.panic)
				}
			}()
			got := names(resolveEntries(tc.lists...))
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestJoinedEntries holds the joined table to what each list contributes
// for the calls that several of them serve: every form survives, under
// one implementation.
func TestJoinedEntries(t *testing.T) {
	byName := map[string]Entry{}
	for _, e := range Entries {
		if e.Kind != Unsupported && e.Kind != LookupOnly {
			byName[e.Name] = e
		}
	}
	for name, want := range map[string][]Symbol{
		"cuCtxGetDevice":            {sym("cuCtxGetDevice", 2000), sym("cuCtxGetDevice_v2", 13000)},
		"cuCtxSynchronize":          {sym("cuCtxSynchronize", 2000), sym("cuCtxSynchronize_v2", 13000)},
		"cuStreamQuery":             {sym("cuStreamQuery", 2000), ptsym("cuStreamQuery_ptsz", 7000)},
		"cuStreamSynchronize":       {sym("cuStreamSynchronize", 2000), ptsym("cuStreamSynchronize_ptsz", 7000)},
		"cuDevicePrimaryCtxRetain":  {sym("cuDevicePrimaryCtxRetain", 7000)},
		"cuDevicePrimaryCtxRelease": {sym("cuDevicePrimaryCtxRelease", 7000), sym("cuDevicePrimaryCtxRelease_v2", 11000)},
		"cuDevicePrimaryCtxReset":   {sym("cuDevicePrimaryCtxReset", 7000), sym("cuDevicePrimaryCtxReset_v2", 11000)},
		"cuCtxGetFlags":             {sym("cuCtxGetFlags", 7000)},
		"cuLaunchKernel":            {sym("cuLaunchKernel", 2000), ptsym("cuLaunchKernel_ptsz", 7000)},
		"cuEventRecord":             {sym("cuEventRecord", 2000), ptsym("cuEventRecord_ptsz", 7000)},
		"cuStreamWaitEvent":         {sym("cuStreamWaitEvent", 2000), ptsym("cuStreamWaitEvent_ptsz", 7000)},
		"cuCtxPushCurrent":          {sym("cuCtxPushCurrent", 2000), sym("cuCtxPushCurrent_v2", 4000)},
		"cuCtxPopCurrent":           {sym("cuCtxPopCurrent", 2000), sym("cuCtxPopCurrent_v2", 4000)},
		"cuLaunchKernelEx":          {sym("cuLaunchKernelEx", 11060), ptsym("cuLaunchKernelEx_ptsz", 11060)},
	} {
		e, ok := byName[name]
		if !ok {
			t.Errorf("%s: no implemented entry", name)
			continue
		}
		if e.Kind == Remote {
			t.Errorf("%s: generated, but the client's caches or capture serve it", name)
		}
		if !slices.Equal(e.Symbols, want) {
			t.Errorf("%s exports %+v, want %+v", name, e.Symbols, want)
		}
	}
}

// TestDlsymNamesExported: cuBLAS and cuBLASLt fail handle creation when a
// driver symbol they dlsym is missing, so every such name is exported,
// implemented or as a stub.
func TestDlsymNamesExported(t *testing.T) {
	exported := map[string]bool{}
	for _, e := range Entries {
		if e.Kind == LookupOnly {
			continue // handed out by cuGetProcAddress only, never exported
		}
		for _, s := range e.Symbols {
			exported[s.Name] = true
		}
	}
	for _, n := range dlsymNames {
		if !exported[n] {
			t.Errorf("%s is resolved with dlsym by NVIDIA's libraries but not exported", n)
		}
	}
}

// TestOpLists: each op list keeps to its range of codes, so a list's ops
// can be added without looking at the others, and every code is used
// once across the joined table.
func TestOpLists(t *testing.T) {
	seen := map[uint16]string{}
	for _, l := range []struct {
		name   string
		ops    []Op
		lo, hi uint16
	}{
		{"coreOps", coreOps, 1, 299},
		{"torchOps", torchOps, 300, 399},
		{"libraryOps", libraryOps, 400, 499},
		{"sessionOps", sessionOps, 500, 599},
	} {
		for _, op := range l.ops {
			if op.Code < l.lo || op.Code > l.hi {
				t.Errorf("%s: %s has code %d, outside %d-%d", l.name, op.Name, op.Code, l.lo, l.hi)
			}
			if prev, ok := seen[op.Code]; ok {
				t.Errorf("code %d is used by %s and %s", op.Code, prev, op.Name)
			}
			seen[op.Code] = op.Name
		}
	}
	if len(seen) != len(Ops) {
		t.Errorf("the op lists hold %d codes, Ops %d", len(seen), len(Ops))
	}
}
