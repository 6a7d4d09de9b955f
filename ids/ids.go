// Package ids defines the two kinds of id gpuctl hands out and accepts:
// session ids and image ids. Each format is written down once, here, with
// the one function that checks it and the one that makes a new id.
//
// The package depends on nothing but errs, so the CLI, the control API's
// types and gpud's pipelines can all check an id without linking the
// image store.
package ids

import (
	"crypto/rand"
	"encoding/hex"
	"regexp"

	"github.com/gpuctl/gpuctl/errs"
)

// A session id is "s-" and 12 lowercase hex digits, made by gpud when a
// client's first handshake creates the session, and kept across
// checkpoints and migrations.
var sessionPattern = regexp.MustCompile(`^s-[0-9a-f]{12}$`)

// An image id is 1 to 128 of A-Z a-z 0-9 . _ -, starting with a letter or
// digit: safe as one path element and in a URL path. gpud names the images
// it commits "img-" and 12 hex digits; an import keeps the id it carries.
var imagePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// CheckSession returns an errs.InvalidArgument error naming id unless it
// is a well-formed session id.
func CheckSession(id string) error {
	if !sessionPattern.MatchString(id) {
		return errs.New(errs.InvalidArgument, errs.Session(id), "not a session id (s- and 12 hex digits); list them with `gpuctl sessions`")
	}
	return nil
}

// CheckImage returns an errs.InvalidArgument error naming id unless it is
// a well-formed image id.
func CheckImage(id string) error {
	if !imagePattern.MatchString(id) {
		return errs.New(errs.InvalidArgument, errs.Image(id), "not a valid image id: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit; list images with `gpuctl images ls`")
	}
	return nil
}

// NewSession returns a fresh session id.
func NewSession() string { return "s-" + randomHex() }

// NewImage returns a fresh image id.
func NewImage() string { return "img-" + randomHex() }

// randomHex is 12 hex digits from crypto/rand, whose Read never fails.
func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
