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

// Result is a CUresult. The numeric values are NVIDIA's and must never
// change: applications compare against them.
type Result uint32

const (
	Success                    Result = 0
	ErrorInvalidValue          Result = 1
	ErrorOutOfMemory           Result = 2
	ErrorNotInitialized        Result = 3
	ErrorDeinitialized         Result = 4
	ErrorNoDevice              Result = 100
	ErrorInvalidDevice         Result = 101
	ErrorInvalidImage          Result = 200
	ErrorInvalidContext        Result = 201
	ErrorMapFailed             Result = 205
	ErrorNoBinaryForGPU        Result = 209
	ErrorInvalidPTX            Result = 218
	ErrorUnsupportedPTXVersion Result = 222
	ErrorInvalidSource         Result = 300
	ErrorFileNotFound          Result = 301
	ErrorOperatingSystem       Result = 304
	ErrorInvalidHandle         Result = 400
	ErrorIllegalState          Result = 401
	ErrorNotFound              Result = 500
	ErrorNotReady              Result = 600
	ErrorIllegalAddress        Result = 700
	ErrorLaunchOutOfResources  Result = 701
	ErrorLaunchTimeout         Result = 702
	ErrorPrimaryContextActive  Result = 708
	ErrorContextIsDestroyed    Result = 709
	ErrorAssert                Result = 710
	ErrorHostMemoryRegistered  Result = 712
	ErrorHostMemoryNotRegd     Result = 713
	ErrorIllegalInstruction    Result = 715
	ErrorMisalignedAddress     Result = 716
	ErrorInvalidAddressSpace   Result = 717
	ErrorInvalidPC             Result = 718
	ErrorLaunchFailed          Result = 719
	ErrorNotPermitted          Result = 800
	ErrorNotSupported          Result = 801
	ErrorSystemNotReady        Result = 802
	ErrorTimeout               Result = 909
	ErrorUnknown               Result = 999
)

var names = map[Result]string{
	Success:                    "CUDA_SUCCESS",
	ErrorInvalidValue:          "CUDA_ERROR_INVALID_VALUE",
	ErrorOutOfMemory:           "CUDA_ERROR_OUT_OF_MEMORY",
	ErrorNotInitialized:        "CUDA_ERROR_NOT_INITIALIZED",
	ErrorDeinitialized:         "CUDA_ERROR_DEINITIALIZED",
	ErrorNoDevice:              "CUDA_ERROR_NO_DEVICE",
	ErrorInvalidDevice:         "CUDA_ERROR_INVALID_DEVICE",
	ErrorInvalidImage:          "CUDA_ERROR_INVALID_IMAGE",
	ErrorInvalidContext:        "CUDA_ERROR_INVALID_CONTEXT",
	ErrorMapFailed:             "CUDA_ERROR_MAP_FAILED",
	ErrorNoBinaryForGPU:        "CUDA_ERROR_NO_BINARY_FOR_GPU",
	ErrorInvalidPTX:            "CUDA_ERROR_INVALID_PTX",
	ErrorUnsupportedPTXVersion: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	ErrorInvalidSource:         "CUDA_ERROR_INVALID_SOURCE",
	ErrorFileNotFound:          "CUDA_ERROR_FILE_NOT_FOUND",
	ErrorOperatingSystem:       "CUDA_ERROR_OPERATING_SYSTEM",
	ErrorInvalidHandle:         "CUDA_ERROR_INVALID_HANDLE",
	ErrorIllegalState:          "CUDA_ERROR_ILLEGAL_STATE",
	ErrorNotFound:              "CUDA_ERROR_NOT_FOUND",
	ErrorNotReady:              "CUDA_ERROR_NOT_READY",
	ErrorIllegalAddress:        "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrorLaunchOutOfResources:  "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrorLaunchTimeout:         "CUDA_ERROR_LAUNCH_TIMEOUT",
	ErrorPrimaryContextActive:  "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE",
	ErrorContextIsDestroyed:    "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	ErrorAssert:                "CUDA_ERROR_ASSERT",
	ErrorHostMemoryRegistered:  "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
	ErrorHostMemoryNotRegd:     "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
	ErrorIllegalInstruction:    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
	ErrorMisalignedAddress:     "CUDA_ERROR_MISALIGNED_ADDRESS",
	ErrorInvalidAddressSpace:   "CUDA_ERROR_INVALID_ADDRESS_SPACE",
	ErrorInvalidPC:             "CUDA_ERROR_INVALID_PC",
	ErrorLaunchFailed:          "CUDA_ERROR_LAUNCH_FAILED",
	ErrorNotPermitted:          "CUDA_ERROR_NOT_PERMITTED",
	ErrorNotSupported:          "CUDA_ERROR_NOT_SUPPORTED",
	ErrorSystemNotReady:        "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrorTimeout:               "CUDA_ERROR_TIMEOUT",
	ErrorUnknown:               "CUDA_ERROR_UNKNOWN",
}

// Name returns NVIDIA's name for r, or a numeric form for codes this
// package does not list.
func (r Result) Name() string {
	if n, ok := names[r]; ok {
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
