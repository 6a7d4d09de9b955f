package worker

import "testing"

func TestUnescapeMount(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/run/netns/a", "/run/netns/a"},
		{`/mnt/with\040space`, "/mnt/with space"},
		{`/tab\011and\134slash`, "/tab\tand\\slash"},
		{`/short\04`, `/short\04`},
		{`/not\9990octal`, `/not\9990octal`},
	} {
		if got := unescapeMount(tc.in); got != tc.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
