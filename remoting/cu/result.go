// Package cu holds the CUDA driver API's result codes and the Go error type
// that carries one. It is the shared vocabulary between the wire protocol,
// the worker's dispatch and the device backends: a backend returns a
// [Result] (or wraps one), and the dispatcher puts its numeric value on the
// wire, where the interposer hands it to the application unchanged.
package cu

import (
	"errors"
	"fmt"
)

// Result is a CUresult. The constants, generated from remoting/spec's
// table of results into result_gen.go, are NVIDIA's numbers and must never
// change: applications compare against them.
type Result uint32

// Name returns NVIDIA's name for r, or a numeric form for codes the
// driver API does not define.
func (r Result) Name() string {
	if n := r.name(); n != "" {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", uint32(r))
}

func (r Result) Error() string { return r.Name() }

// Error is a CUDA result together with the detail that explains it, such
// as the PTX instruction an emulated kernel could not execute. The detail
// travels to gpud's logs and to the client's log line; the application
// sees only Code.
type Error struct {
	Code   Result
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return e.Code.Name()
	}
	return e.Code.Name() + ": " + e.Detail
}

// Is lets errors.Is(err, cu.ErrorIllegalAddress) match an *Error.
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && r == e.Code
}

// Errorf returns an *Error with code and a formatted detail.
func Errorf(code Result, format string, args ...any) error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Code extracts the CUDA result an error carries. A nil error is Success;
// an error that carries no result is ErrorUnknown, so that every failure
// reaches the application as some failure.
func Code(err error) Result {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	var r Result
	if errors.As(err, &r) {
		return r
	}
	return ErrorUnknown
}
