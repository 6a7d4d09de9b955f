package api

import (
	"errors"

	"github.com/gpuctl/gpuctl/errs"
)

// ErrorBody is the body of every failed request, with an HTTP status that
// package control derives from the kind.
type ErrorBody struct {
	Kind  errs.Kind `json:"kind"`
	Error string    `json:"error"`
}

// Err turns the envelope back into an error of the same kind, so that a
// caller on the far side can still ask errs.IsNotFound. The message
// already names its subject.
func (b ErrorBody) Err() error {
	return &errs.Error{Kind: b.Kind, Err: errors.New(b.Error)}
}
