package errs

import (
	"errors"
	"fmt"
	"testing"
)

func TestKindOf(t *testing.T) {
	base := errors.New("disk full")
	tests := []struct {
		name string
		err  error
		want Kind
		msg  string
	}{
		{"nil", nil, Unknown, ""},
		{"plain", base, Unknown, "disk full"},
		{"new", New(NotFound, Session("s-1"), "no such session"), NotFound, `session "s-1": no such session`},
		{"wrap", Wrap(base, Unavailable, Host("b:1"), "dial"), Unavailable, `host "b:1": dial: disk full`},
		{"fmt-wrapped", fmt.Errorf("checkpoint: %w", New(AlreadyExists, Image("i"), "exists")), AlreadyExists, `checkpoint: image "i": exists`},
		{"inner kind wins when outer is unknown", &Error{Msg: "outer", Err: New(DataLoss, "", "bad chunk")}, DataLoss, "outer: bad chunk"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := KindOf(tt.err); got != tt.want {
				t.Fatalf("KindOf = %q, want %q", got, tt.want)
			}
			if tt.err != nil && tt.err.Error() != tt.msg {
				t.Fatalf("Error() = %q, want %q", tt.err.Error(), tt.msg)
			}
		})
	}
	if !errors.Is(Wrap(base, Internal, "", "x"), base) {
		t.Fatal("Wrap must keep the cause reachable with errors.Is")
	}
	if Wrap(nil, Internal, "", "x") != nil {
		t.Fatal("Wrap(nil) must be nil")
	}
}
