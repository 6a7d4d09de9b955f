package api

import (
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

func TestParseLabels(t *testing.T) {
	cases := []struct {
		in, want string // want: the canonical form, or "!" for an error
	}{
		{"", ""},
		{"job=42", "job=42"},
		{"user=ann, job=42", "job=42,user=ann"},
		{"pod=web-0,ns=prod/x", "ns=prod/x,pod=web-0"},
		{"empty=", "empty="},
		{"job", "!"},
		{"=v", "!"},
		{"job=4 2", "!"},
		{"job=1,job=2", "!"},
		{"k=" + string(make([]byte, 64)), "!"},
	}
	for _, c := range cases {
		l, err := ParseLabels(c.in)
		if c.want == "!" {
			if !errs.IsInvalidArgument(err) {
				t.Errorf("ParseLabels(%q): %v, want an invalid-argument error", c.in, err)
			}
			continue
		}
		if err != nil || l.String() != c.want {
			t.Errorf("ParseLabels(%q) = %q, %v; want %q", c.in, l.String(), err, c.want)
		}
	}
}

func TestSelector(t *testing.T) {
	if _, err := ParseSelector(" "); !errs.IsInvalidArgument(err) {
		t.Errorf("empty selector: %v, want an invalid-argument error", err)
	}
	sel, err := ParseSelector("job=42,user=ann")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		labels string
		want   bool
	}{
		{"job=42,user=ann", true},
		{"job=42,user=ann,pod=x", true},
		{"job=42", false},
		{"job=43,user=ann", false},
		{"", false},
	} {
		l, _ := ParseLabels(c.labels)
		if got := sel.Matches(l); got != c.want {
			t.Errorf("%s matches %q: %v, want %v", sel, c.labels, got, c.want)
		}
	}
}

func TestParsePriority(t *testing.T) {
	for in, want := range map[string]int32{"0": 0, "10": 10, "-3": -3, " 7 ": 7} {
		if got, err := ParsePriority(in); err != nil || got != want {
			t.Errorf("ParsePriority(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "high", "1.5", "99999999999"} {
		if _, err := ParsePriority(in); !errs.IsInvalidArgument(err) {
			t.Errorf("ParsePriority(%q): %v, want an invalid-argument error", in, err)
		}
	}
}
