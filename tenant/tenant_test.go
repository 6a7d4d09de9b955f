package tenant

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want []Tenant
		err  string // substring; "" = accepted
	}{
		{"empty array", `[]`, []Tenant{}, ""},
		{"one, no limits", `[{"name":"alice","token_file":"/t/a"}]`, []Tenant{{Name: "alice", TokenFile: "/t/a"}}, ""},
		{"limits", `[{"name":"bob","token_file":"b","max_mem_bytes":1073741824,"max_sessions":3}]`,
			[]Tenant{{Name: "bob", TokenFile: "b", Limits: Limits{MaxMemBytes: 1 << 30, MaxSessions: 3}}}, ""},
		{"zero limits", `[{"name":"c.d_e-1","token_file":"c","max_mem_bytes":0,"max_sessions":0}]`, []Tenant{{Name: "c.d_e-1", TokenFile: "c"}}, ""},
		{"white space around", " \n[ {\"name\":\"a\",\"token_file\":\"x\"} ]\n", []Tenant{{Name: "a", TokenFile: "x"}}, ""},
		{"empty file", ``, nil, "empty"},
		{"null", `null`, nil, "null"},
		{"an object", `{"name":"a"}`, nil, "not a JSON array"},
		{"trailing text", `[] []`, nil, "text after the array"},
		{"unknown field", `[{"name":"a","token_file":"x","max_gpus":1}]`, nil, `unknown field "max_gpus"`},
		{"no name", `[{"token_file":"x"}]`, nil, `entry 1 has no "name"`},
		{"bad name", `[{"name":"Alice","token_file":"x"}]`, nil, `tenant name "Alice"`},
		{"name with slash", `[{"name":"a/b","token_file":"x"}]`, nil, "tenant name"},
		{"long name", `[{"name":"` + strings.Repeat("a", 64) + `","token_file":"x"}]`, nil, "tenant name"},
		{"no token file", `[{"name":"a"}]`, nil, `entry 1 ("a") has no "token_file"`},
		{"empty token file", `[{"name":"a","token_file":""}]`, nil, `has no "token_file"`},
		{"duplicate", `[{"name":"a","token_file":"x"},{"name":"a","token_file":"y"}]`, nil, `entries 1 and 2 are both named "a"`},
		{"negative memory", `[{"name":"a","token_file":"x","max_mem_bytes":-1}]`, nil, `"max_mem_bytes" is negative`},
		{"negative sessions", `[{"name":"a","token_file":"x","max_sessions":-2}]`, nil, `"max_sessions" must be 0`},
		{"huge sessions", `[{"name":"a","token_file":"x","max_sessions":99999999999}]`, nil, `"max_sessions" must be 0`},
		{"fractional limit", `[{"name":"a","token_file":"x","max_mem_bytes":1.5}]`, nil, "not a JSON array of tenants"},
		{"string limit", `[{"name":"a","token_file":"x","max_mem_bytes":"8G"}]`, nil, "not a JSON array of tenants"},
		{"NUL in path", `[{"name":"a","token_file":"x\u0000y"}]`, nil, "not a usable path"},
		{"too large", `[` + strings.Repeat(" ", MaxFileBytes) + `]`, nil, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !errs.IsInvalidArgument(err) {
					t.Fatalf("err %v, want an invalid_argument error containing %q", err, tc.err)
				}
				if !strings.HasPrefix(err.Error(), "tenants file: ") || strings.Contains(err.Error(), "\n") {
					t.Errorf("error %q is not one line starting with the file's role", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(tc.want)
			if string(a) != string(b) {
				t.Fatalf("parsed %s, want %s", a, b)
			}
		})
	}
}

func TestValidName(t *testing.T) {
	for _, ok := range []string{"a", "0", "team-1", "a.b_c", strings.Repeat("x", 63)} {
		if err := ValidName(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "A", "a b", "a/b", "(admin)", "é", strings.Repeat("x", 64)} {
		if err := ValidName(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// FuzzParse holds the parser to its promises on any input: no panic, and
// whatever it accepts is a list of valid, unique tenants that survives a
// round trip through its own JSON form unchanged.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`[]`,
		`[{"name":"alice","token_file":"/etc/gpud/alice.token","max_mem_bytes":8589934592,"max_sessions":4}]`,
		`[{"name":"a","token_file":"x"},{"name":"b","token_file":"y","max_sessions":1}]`,
		`[{"name":"a","token_file":"x"},{"name":"a","token_file":"y"}]`,
		`[{"name":"a","token_file":"x","max_mem_bytes":-1}]`,
		`[{"name":"a","token_file":"x","extra":true}]`,
		`{"name":"a"}`, `null`, ``, `[`, `[1,2]`, `[{}]`, `[null]`, `[{"name":null,"token_file":null}]`,
		`[{"name":"a","token_file":"x","max_mem_bytes":1e30}]`,
		`[{"name":"a","token_file":"x","max_sessions":9223372036854775808}]`,
		"[{\"name\":\"a\",\"token_file\":\"\\u0000\"}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := Parse(b)
		if err != nil {
			if !errs.IsInvalidArgument(err) || strings.ContainsAny(err.Error(), "\n") {
				t.Fatalf("error %q is not one invalid_argument line", err)
			}
			return
		}
		seen := map[string]bool{}
		for _, ten := range got {
			if ValidName(ten.Name) != nil || seen[ten.Name] || ten.TokenFile == "" || ten.MaxSessions < 0 {
				t.Fatalf("accepted a bad entry %+v from %q", ten, b)
			}
			seen[ten.Name] = true
		}
		again, err := json.Marshal(got)
		if err != nil {
			t.Fatal(err)
		}
		back, err := Parse(again)
		if err != nil {
			t.Fatalf("its own output %s is refused: %v", again, err)
		}
		if a, _ := json.Marshal(back); string(a) != string(again) {
			t.Fatalf("round trip changed %s into %s", again, a)
		}
	})
}
