package kernels

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: no case text may crash the parser, and every case it accepts
// must generate inputs of exactly the declared sizes. The seed corpus is the
// real case files.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("cases/*.case")
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("case c\n module m\n kernel k\n buf a f32 3 list:nan,-inf,0x1p-3\n scalar n u64 -1\n check a ulp:0\nend\n"))
	f.Fuzz(func(t *testing.T, text []byte) {
		cases, err := Parse(bytes.NewReader(text), "fuzz.case")
		if err != nil {
			return
		}
		for _, c := range cases {
			total := 0
			for _, p := range c.Params {
				if p.Buffer != nil {
					total += p.Buffer.Bytes()
				}
			}
			if total > 1<<20 {
				continue
			}
			in, err := c.Inputs()
			if err != nil {
				t.Fatalf("case %s: %v", c.Name, err)
			}
			for _, p := range c.Params {
				if p.Buffer != nil && len(in[p.Name]) != p.Buffer.Bytes() {
					t.Fatalf("case %s: %s has %d bytes, declared %d", c.Name, p.Name, len(in[p.Name]), p.Buffer.Bytes())
				}
			}
		}
	})
}
