package criubin

import (
	"slices"
	"testing"
)

// TestEnvBreakpoints: CRIU gets CRIU_FAULT=130 exactly where the probe
// found breakpoints broken, and an operator's own CRIU_FAULT always wins.
// On a host whose breakpoints do not trap, every dump test in this
// package hangs without it.
func TestEnvBreakpoints(t *testing.T) {
	bp := Breakpoints()
	t.Logf("hardware breakpoints: %+v", bp)
	if !bp.Work && bp.Why == "" {
		t.Fatal("the probe found breakpoints broken without saying why")
	}
	for _, tc := range []struct {
		name     string
		operator string // CRIU_FAULT as the operator set it; "" for unset
		want     string // the CRIU_FAULT entry CRIU must see; "" for none
	}{
		{"unset", "", map[bool]string{true: "", false: "CRIU_FAULT=130"}[bp.Work]},
		{"operator's", "129", "CRIU_FAULT=129"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.operator != "" {
				t.Setenv("CRIU_FAULT", tc.operator)
			}
			var got []string
			for _, kv := range Env() {
				if len(kv) >= 11 && kv[:11] == "CRIU_FAULT=" {
					got = append(got, kv)
				}
			}
			var want []string
			if tc.want != "" {
				want = []string{tc.want}
			}
			if !slices.Equal(got, want) {
				t.Errorf("CRIU_FAULT entries %q, want %q", got, want)
			}
		})
	}
}
