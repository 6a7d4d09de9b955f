package spec

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
