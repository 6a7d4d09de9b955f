// Package errs classifies errors by kind and names their subject, in the
// manner of containerd's errdefs: code deep in a package says what kind of
// failure happened and to what ("session s-1f2e: not found"); only the API
// boundary maps kinds to HTTP statuses and the CLI maps them to exit codes.
package errs

import (
	"errors"
	"fmt"
)

// Kind is the class of a failure, stable across the control API.
type Kind string

const (
	Unknown            Kind = "unknown"
	NotFound           Kind = "not_found"
	AlreadyExists      Kind = "already_exists"
	InvalidArgument    Kind = "invalid_argument"
	FailedPrecondition Kind = "failed_precondition"
	Unavailable        Kind = "unavailable"
	Unauthenticated    Kind = "unauthenticated"
	ResourceExhausted  Kind = "resource_exhausted"
	DataLoss           Kind = "data_loss"
	Internal           Kind = "internal"

	// PermissionDenied: the caller is known but may not do this (a
	// tenant asking for what only the host's administrator may do).
	PermissionDenied Kind = "permission_denied"
)

// Error is a failure of some kind concerning a subject, such as
// `session "s-12"` or `image "img-9"`, optionally wrapping a cause.
type Error struct {
	Kind    Kind
	Subject string // e.g. `session "s-12"`; may be empty
	Msg     string
	Err     error
}

func (e *Error) Error() string {
	s := e.Msg
	if e.Subject != "" {
		s = e.Subject + ": " + s
	}
	if e.Err != nil {
		if s == "" {
			return e.Err.Error()
		}
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an error of kind about subject.
func New(kind Kind, subject, format string, args ...any) error {
	return &Error{Kind: kind, Subject: subject, Msg: fmt.Sprintf(format, args...)}
}

// Wrap returns err classified as kind about subject, with a message.
// A nil err returns nil.
func Wrap(err error, kind Kind, subject, format string, args ...any) error {
	if err == nil {
		return nil
	}
	return &Error{Kind: kind, Subject: subject, Msg: fmt.Sprintf(format, args...), Err: err}
}

// KindOf returns the outermost kind found in err's chain, or Unknown.
func KindOf(err error) Kind {
	for err != nil {
		var e *Error
		if !errors.As(err, &e) {
			return Unknown
		}
		if e.Kind != "" && e.Kind != Unknown {
			return e.Kind
		}
		err = e.Err
	}
	return Unknown
}

// Is reports whether err is of kind k.
func Is(err error, k Kind) bool { return KindOf(err) == k }

// IsNotFound and friends read better at call sites than Is(err, NotFound).
func IsNotFound(err error) bool           { return Is(err, NotFound) }
func IsAlreadyExists(err error) bool      { return Is(err, AlreadyExists) }
func IsInvalidArgument(err error) bool    { return Is(err, InvalidArgument) }
func IsFailedPrecondition(err error) bool { return Is(err, FailedPrecondition) }
func IsUnavailable(err error) bool        { return Is(err, Unavailable) }
func IsPermissionDenied(err error) bool   { return Is(err, PermissionDenied) }

// Subject helpers keep the quoting uniform.
func Session(id string) string { return fmt.Sprintf("session %q", id) }
func Image(id string) string   { return fmt.Sprintf("image %q", id) }
func Host(addr string) string  { return fmt.Sprintf("host %q", addr) }
