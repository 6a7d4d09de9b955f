package ids

import (
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
)

func TestCheckSession(t *testing.T) {
	cases := []struct {
		id string
		ok bool
	}{
		{"s-0123456789ab", true},
		{"s-000000000000", true},
		{"s-0123456789AB", false}, // gpud writes lowercase only
		{"s-0123456789a", false},
		{"s-0123456789abc", false},
		{"S-0123456789ab", false},
		{"0123456789ab", false},
		{"s-01234567890g", false},
		{"", false},
		{"s-0123456789ab\n", false},
	}
	for _, c := range cases {
		err := CheckSession(c.id)
		if (err == nil) != c.ok {
			t.Errorf("CheckSession(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
		if err != nil && (!errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), errs.Session(c.id))) {
			t.Errorf("CheckSession(%q): %v is not an invalid argument naming the session", c.id, err)
		}
	}
}

func TestCheckImage(t *testing.T) {
	cases := []struct {
		id string
		ok bool
	}{
		{"img-3f9a0c2b7d41", true},
		{"a", true},
		{"9", true},
		{"My_image.v2-final", true},
		{strings.Repeat("a", 128), true},
		{strings.Repeat("a", 129), false},
		{"", false},
		{".hidden", false},
		{"-x", false},
		{"_x", false},
		{"../x", false},
		{"a/b", false},
		{"a b", false},
		{"a%2fb", false},
		{"img-\x00", false},
	}
	for _, c := range cases {
		err := CheckImage(c.id)
		if (err == nil) != c.ok {
			t.Errorf("CheckImage(%q) = %v, want ok=%v", c.id, err, c.ok)
		}
		if err != nil && (!errs.IsInvalidArgument(err) || !strings.Contains(err.Error(), errs.Image(c.id))) {
			t.Errorf("CheckImage(%q): %v is not an invalid argument naming the image", c.id, err)
		}
	}
}

// New ids pass their own checks and do not repeat.
func TestNewIDs(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		s, i := NewSession(), NewImage()
		if err := CheckSession(s); err != nil {
			t.Fatal(err)
		}
		if err := CheckImage(i); err != nil || !strings.HasPrefix(i, "img-") || len(i) != 16 {
			t.Fatalf("new image id %q: %v", i, err)
		}
		if seen[s] || seen[i] {
			t.Fatalf("id repeated after %d draws", len(seen)/2)
		}
		seen[s], seen[i] = true, true
	}
}
