package cu_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/spec"
)

// Every code of the spec's table has its name here, and codes outside it
// print as numbers.
func TestNames(t *testing.T) {
	for _, r := range spec.Results {
		if got := cu.Result(r.Code).Name(); got != r.Name {
			t.Errorf("Result(%d).Name() = %q, want %q", r.Code, got, r.Name)
		}
	}
	for _, c := range []struct {
		r    cu.Result
		want string
	}{
		{cu.ErrorIllegalAddress, "CUDA_ERROR_ILLEGAL_ADDRESS"},
		{cu.ErrorHostMemoryNotRegistered, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"},
		{cu.Result(12345), "CUresult(12345)"},
	} {
		if got := c.r.Error(); got != c.want {
			t.Errorf("%d: %q, want %q", uint32(c.r), got, c.want)
		}
	}
}

func TestCode(t *testing.T) {
	cases := []struct {
		err  error
		want cu.Result
	}{
		{nil, cu.Success},
		{cu.ErrorNotReady, cu.ErrorNotReady},
		{cu.Errorf(cu.ErrorInvalidPTX, "bad instruction %s", "foo.bar"), cu.ErrorInvalidPTX},
		{fmt.Errorf("launch: %w", cu.Errorf(cu.ErrorLaunchFailed, "trap")), cu.ErrorLaunchFailed},
		{errors.New("no code"), cu.ErrorUnknown},
	}
	for _, c := range cases {
		if got := cu.Code(c.err); got != c.want {
			t.Errorf("Code(%v) = %s, want %s", c.err, got.Name(), c.want.Name())
		}
	}
	err := cu.Errorf(cu.ErrorIllegalAddress, "at 0x10")
	if !errors.Is(err, cu.ErrorIllegalAddress) || errors.Is(err, cu.ErrorInvalidValue) {
		t.Errorf("errors.Is on %v", err)
	}
	if err.Error() != "CUDA_ERROR_ILLEGAL_ADDRESS: at 0x10" {
		t.Errorf("message %q", err.Error())
	}
}
